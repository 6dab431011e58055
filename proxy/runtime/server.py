"""Listeners: one bootstrap listener plus one per broker node, and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.proxy.audit.budget import AuditBudget
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog
from kafka_policy_proxy.proxy.audit.kafka_sink import KafkaAuditSink
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.audit.sink import AuditSink
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks
from kafka_policy_proxy.proxy.cluster.discovery import BrokerDiscovery, brokers_request
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.cluster.login import sasl_login
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.config import ProxyConfig
from kafka_policy_proxy.proxy.filters.assembly import proxy_chain
from kafka_policy_proxy.proxy.kafka_client.proxy_settings import proxy_client_security
from kafka_policy_proxy.proxy.metrics import CONNECTIONS, CONNECTIONS_OPEN
from kafka_policy_proxy.proxy.net.connection import ClientConnection
from kafka_policy_proxy.proxy.net.memory_budget import MemoryBudget
from kafka_policy_proxy.proxy.net.proxy_protocol import proxy_protocol_listener
from kafka_policy_proxy.proxy.runtime.admin_http import AdminServer
from kafka_policy_proxy.proxy.runtime.policy_source import PolicySource
from kafka_policy_proxy.proxy.runtime.tls_sides import TlsSides
from kafka_policy_proxy.proxy.runtime.workers import last_good_policy
from kafka_policy_proxy.proxy.tls.client_side import (
    CertificatePrincipals,
    tls_listener,
)
from kafka_policy_proxy.proxy.tls.sni import SNI_LISTENER, Route, SniRouter

log = structlog.get_logger("proxy.runtime.server")


class ProxyServer:
    """Owns the listening sockets, the broker map and every client connection."""

    def __init__(self, config: ProxyConfig, worker: int | None = None) -> None:
        """`worker`: this process's number under `--workers N` (it shares the listeners)."""
        self._config = config
        self._worker = worker
        self._brokers: dict[int, tuple[str, int]] = {}
        self._servers: dict[str, asyncio.Server] = {}
        self._binding: dict[int, asyncio.Task[None]] = {}
        self._connections: set[ClientConnection] = set()
        self._per_listener: Counter[str] = Counter()
        limits = config.limits
        self.budget = MemoryBudget(limits.max_buffered_bytes, limits.stall_timeout_s)
        self._next_bootstrap = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.policy = (
            PolicySource(config.policy.file, last_good=last_good_policy() if worker else None)
            if config.policy.file
            else None
        )
        state = config.cluster_state
        tls = config.listeners.tls
        # Built first here, so that an unusable TLS file stops `run` before anything listens;
        # rebuilt when the files change (proxy/tls/reloading.py).
        self._tls = TlsSides()
        self._ssl = None if tls is None else self._tls.listener(tls)
        sni = config.listeners.sni
        self._sni = None if sni is None else SniRouter(sni, lambda node: node in self._brokers)
        self._sni_ssl = (
            None if tls is None or self._sni is None else self._tls.listener(tls, self._sni)
        )
        # The proxy's own security: upstream.client_properties, or upstream.tls and
        # cluster_state.sasl (their files checked first, above). Its login also discovers the
        # brokers; the properties' TLS re-originates client connections too.
        self._security = proxy_client_security(config)
        self._sasl = sasl_login(self._security)
        self._upstream_tls = self._tls.upstream(config, self._security)
        self._certificates = (
            None if tls is None else CertificatePrincipals(tls.principal_mapping_rules)
        )
        self.discovery = BrokerDiscovery()
        self.admin = AdminServer(self.readiness)
        self._stopping = False
        self.cluster_state = ClusterStateReader(
            [
                (s.host, s.port)
                for s in state.bootstrap_servers or config.upstream.bootstrap_servers
            ],
            ttl_s=state.ttl_s,
            request_timeout_s=state.request_timeout_s,
            sasl=self._sasl,
            tls=self._upstream_tls,
            discovery=self.discovery,
            connections=state.connections,
            unknown_id_ttl_s=state.unknown_id_ttl_s,
        )
        # Long batches are judged off the event loop (proxy/cluster/live_facts.py).
        self._judges = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kpp-judge")
        audit = config.audit
        audit_file = audit.file
        proxy_id = audit.proxy_id or f"{socket.gethostname()}:{config.listeners.bootstrap_port}"
        if worker is not None:
            # One file per worker: a rotating file cannot be shared between processes.
            if audit_file is not None:
                audit_file = audit_file.with_name(
                    f"{audit_file.stem}.worker-{worker}{audit_file.suffix}"
                )
            proxy_id += f"/worker-{worker}"
        sinks: list[AuditSink] = [
            AuditLog(
                audit_file,
                stdout=audit.stdout,
                max_bytes=audit.max_bytes,
                backups=audit.backups,
                min_retention_s=audit.min_retention_s,
                max_total_bytes=audit.max_total_bytes,
            )
        ]
        if audit.kafka is not None:
            sinks.append(
                KafkaAuditSink(
                    config, source=f"kafka-policy-proxy/{proxy_id}", security=self._security
                )
            )
        self._recorder = DecisionRecorder(
            sinks,
            proxy_id=proxy_id,
            cluster_id=lambda: self.discovery.cluster_id,
            closed=audit.on_failure == "closed",
            max_records_per_request=audit.max_records_per_request,
            sample_size=audit.summary_sample,
            budget=AuditBudget(
                audit.principal_budget_bytes_per_minute, max_principals=audit.budget_principals
            ),
        )
        self._chain = proxy_chain(
            listeners=self,
            policy=self._current_policy,
            facts=LiveFacts(
                self.cluster_state, max_ids=state.max_ids_per_request, executor=self._judges
            ),
            recorder=self._recorder,
            legacy_error_code=config.policy.legacy_error_code,
            max_entries_per_request=config.limits.max_entries_per_request,
            admission=config.admission,
            audit_budget=self._recorder.budget,
            principal_claim=config.listeners.oauthbearer_principal_claim,
            budget_locks=BudgetLocks.from_environment(),
        )

    @property
    def bootstrap_address(self) -> str:
        """The address clients put in bootstrap.servers."""
        listeners = self._config.listeners
        return f"{listeners.advertised_host}:{listeners.bootstrap_port}"

    @property
    def node_ports(self) -> dict[int, int]:
        """The port of each node listener bound so far."""
        return {int(name): self.endpoint(int(name))[1] for name in self._servers if name.isdigit()}

    def reload_tls(self) -> None:
        """Rebuild every TLS context from its files (SIGHUP); a bad file keeps the old one."""
        self._tls.reload()

    def reload(self) -> None:
        """SIGHUP: reload the policy file and the TLS files."""
        self.reload_policy()
        self.reload_tls()

    def _current_policy(self) -> CompiledPolicy | None:
        return None if self.policy is None else self.policy.current()

    def reload_policy(self) -> None:
        """Reload the policy file (SIGHUP); an invalid file leaves the old policy in force."""
        if self.policy is not None:
            self.policy.reload()

    async def start(self) -> None:
        """Load the policy, bind the bootstrap listener, then learn the brokers."""
        if self.policy is not None:
            self.policy.start()
            if self._config.policy.watch:
                task = asyncio.ensure_future(self.policy.watch())
                self._tasks.add(task)
        else:
            log.warning("no policy file configured: the proxy enforces nothing")
        self._tasks.add(asyncio.ensure_future(self._watch_budget()))
        self._tasks.update(self._tls.watchers())
        admin = self._config.admin
        if admin.port is not None:
            if self._worker is None:  # under --workers, the supervisor serves it
                await self.admin.start(admin.bind_host, admin.port)
            self._tasks.add(asyncio.ensure_future(self._probe_cluster()))
        self._servers["bootstrap"] = await self._listen(
            "bootstrap", lambda _: self._bootstrap_target(), self._config.listeners.bootstrap_port
        )
        sni = self._config.listeners.sni
        if sni is not None and self._sni is not None:
            router = self._sni  # the handshake's SNI route picks the broker
            self._servers[SNI_LISTENER] = await self._listen(
                SNI_LISTENER,
                lambda conn: self._sni_target(router.route_of(conn.tls_object())),
                sni.port,
                self._sni_ssl,
            )
        await self._discover()

    def endpoint(self, node_id: int) -> tuple[str, int]:
        """The proxy address clients must use for a node."""
        listeners = self._config.listeners
        return listeners.advertised_host, listeners.broker_port_base + node_id

    def sni_endpoint(self, node_id: int) -> tuple[str, int]:
        """The address clients of the SNI listener must use for a node."""
        assert self._config.listeners.sni is not None
        return self._config.listeners.sni.broker_address(node_id)

    def _sni_target(self, route: Route) -> list[tuple[str, int]]:
        if route == "bootstrap":
            return self._bootstrap_target()
        return [self._brokers[route]]  # known: the handshake checked it

    def ready(self, nodes: dict[int, tuple[str, int]]) -> bool:
        """Whether every node has a listener and this broker address is already known."""
        return all(
            str(node) in self._servers and self._brokers.get(node) == address
            for node, address in nodes.items()
        )

    async def ensure(self, nodes: dict[int, tuple[str, int]]) -> None:
        """Record the nodes' broker addresses and bind any listener still missing."""
        for node, address in nodes.items():
            if self._brokers.get(node) != address:
                log.info("broker address learned", node=node, broker=f"{address[0]}:{address[1]}")
                self._brokers[node] = address
        for node in nodes:
            if str(node) in self._servers:
                continue
            task = self._binding.get(node)
            if task is None:
                task = self._binding[node] = asyncio.ensure_future(self._bind_node(node))
            await asyncio.shield(task)

    async def _bind_node(self, node: int) -> None:
        port = self.endpoint(node)[1]
        if port > 65535:
            raise OSError(
                f"node {node} needs port {port}; lower listeners.broker_port_base so that "
                "broker_port_base + node id stays below 65536"
            )
        self._servers[str(node)] = await self._listen(
            f"node-{node}", lambda _: [self._brokers[node]], port
        )

    async def _listen(
        self,
        name: str,
        target: Callable[[ClientConnection], list[tuple[str, int]]],
        port: int,
        context: ssl.SSLContext | None = None,
    ) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        limits = self._config.limits
        context = context or self._ssl
        splice = self._config.net.splice and context is None  # TLS bytes pass through OpenSSL

        def factory() -> asyncio.BaseProtocol:
            conn: ClientConnection = ClientConnection(
                listener=name,
                target=lambda: target(conn),
                chain=self._chain,
                max_frame_bytes=limits.max_frame_bytes,
                connect_timeout=self._config.upstream.connect_timeout_s,
                budget=self.budget,
                max_judged_bytes=limits.max_judged_request_bytes,
                max_buffered_bytes=limits.max_connection_buffered_bytes,
                on_open=self._admit,
                on_close=self._closed,
                certificates=self._certificates,
                upstream_tls=self._upstream_tls,
                splice=splice,
            )
            return conn.reader()

        # Workers share each port (SO_REUSEPORT); the kernel spreads new connections over them.
        # TLS in front of each connection by our layer, which sends a refused handshake's alert.
        protocol = factory if context is None else tls_listener(factory, context)
        listeners = self._config.listeners
        if listeners.proxy_protocol == "required":  # its header comes before the ClientHello
            protocol = proxy_protocol_listener(
                protocol,
                listener=name,
                timeout_s=listeners.proxy_protocol_timeout_s,
                allowed_peers=listeners.proxy_protocol_allowed_peers,
            )
        server = await loop.create_server(
            protocol,
            self._config.listeners.bind_host,
            port,
            reuse_port=self._worker is not None,
        )
        advertised = (
            self._config.listeners.sni.bootstrap_address
            if name == SNI_LISTENER and self._config.listeners.sni
            else f"{self._config.listeners.advertised_host}:{port}"
        )
        log.info("listening", listener=name, port=port, advertised=advertised)
        return server

    def _admit(self, conn: ClientConnection) -> str | None:
        """Count a new connection in, or say which cap refuses it."""
        limits = self._config.limits
        if len(self._connections) >= limits.max_connections:
            return f"limits.max_connections ({limits.max_connections}) reached"
        if self._per_listener[conn.listener] >= limits.max_connections_per_listener:
            cap = limits.max_connections_per_listener
            return f"limits.max_connections_per_listener ({cap}) reached"
        self._connections.add(conn)
        self._per_listener[conn.listener] += 1
        CONNECTIONS.labels(listener=conn.listener).inc()
        CONNECTIONS_OPEN.labels(listener=conn.listener).inc()
        return None

    def _closed(self, conn: ClientConnection) -> None:
        if conn in self._connections:
            self._connections.remove(conn)
            self._per_listener[conn.listener] -= 1
            CONNECTIONS_OPEN.labels(listener=conn.listener).dec()

    async def _watch_budget(self) -> None:
        # Write buffers drain without telling anyone: recount them, and find the stalls.
        interval = min(1.0, self.budget.stall_timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            self.budget.check()

    def _bootstrap_target(self) -> list[tuple[str, int]]:
        servers = [(s.host, s.port) for s in self._config.upstream.bootstrap_servers]
        # Rotate so that bootstrap connections spread over the configured brokers.
        start = self._next_bootstrap % len(servers)
        self._next_bootstrap += 1
        return servers[start:] + servers[:start]

    async def _discover(self) -> None:
        found = await self.discovery.discover(
            self._bootstrap_target(),
            self._config.upstream.connect_timeout_s,
            self._sasl,
            self._upstream_tls,
        )
        if found is None:
            log.warning("no broker answered at start; node listeners are bound as brokers appear")
            return
        await self.ensure(found.nodes)

    def readiness(self) -> list[str]:
        """Why the proxy should not take traffic now (empty: ready), for /readyz."""
        reasons = []
        if self._stopping:
            reasons.append("shutting down")
        if self.policy is None:
            reasons.append("no policy: policy.file is not set, so nothing would be enforced")
        elif self.policy.current() is None:
            reasons.append(f"the policy {self.policy.path} is not loaded")
        if "bootstrap" not in self._servers:
            reasons.append("the bootstrap listener is not bound yet")
        max_age = self._config.admin.readiness_max_age_s
        last = self.cluster_state.last_read
        if last is None or asyncio.get_running_loop().time() - last > max_age:
            why = self.cluster_state.last_error or "no answer yet"
            reasons.append(f"the cluster state was not read in the last {max_age:g}s ({why})")
        return reasons

    async def _probe_cluster(self) -> None:
        # /readyz needs a recent read even when no client asks for one.
        interval = min(10.0, self._config.admin.readiness_max_age_s / 3)
        while True:
            with contextlib.suppress(ClusterStateUnavailable):
                await self.cluster_state.request(brokers_request(), "the brokers (readiness)")
            await asyncio.sleep(interval)

    async def shutdown(self) -> None:
        """Stop accepting, let responses in flight finish (bounded), then close everything."""
        self._stopping = True
        for server in self._servers.values():
            server.close()
        connections = list(self._connections)
        for conn in connections:
            conn.drain()
        waiting = [conn.closed for conn in connections if not conn.closed.done()]
        if waiting:
            _done, late = await asyncio.wait(waiting, timeout=self._config.shutdown_timeout_s)
            if late:
                log.warning("shutdown timeout: aborting connections", connections=len(late))
                for conn in connections:
                    if not conn.closed.done():
                        conn.abort()
        for server in self._servers.values():
            await server.wait_closed()
        for task in self._tasks:
            task.cancel()
        await self.cluster_state.close()
        self._judges.shutdown(wait=False, cancel_futures=True)
        await self._recorder.close()
        await self.admin.close()
        if self.policy is not None:
            self.policy.close()
        log.info("stopped")
