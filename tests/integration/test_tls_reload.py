"""Certificates rotate under live traffic, on both sides of the proxy, without a restart.

The proxy's files are mounted as Kubernetes mounts a Secret (harness/secret_volume.py)
and rotated as the kubelet does. The listener side is watched (reload_interval_s), the broker
side reloads on SIGHUP only, so both ways are run. A producer and a consumer run through the
proxy the whole time and must see no error; a new TLS connection afterwards must see the new
certificate (its serial number), and the metrics must say what happened.
"""

from __future__ import annotations

import re
import signal
import socket
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509

from harness.proxy_process import ProxyProcess
from harness.secret_volume import SecretVolume
from harness.throwaway_ca import Issued, ThrowawayCa
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.proxy.net.connection import framed

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT = 18700
NODE_PORT_BASE = 18700  # nodes 1..3 on 18701..18703
ADMIN_PORT = 18730
POLICY = "version: 1\nrules:\n  - {name: no-scratch, match: {topic_prefix: scratch.}, deny: true}\n"


def pem(issued: Issued) -> dict[str, bytes]:
    """The Secret's files for one certificate (cert-manager's names)."""
    return {"tls.crt": issued.cert.read_bytes(), "tls.key": issued.key.read_bytes()}


@dataclass
class Rig:
    """The proxy, its two Secret volumes, and the CAs that sign the listener certificates."""

    proxy: ProxyProcess
    listener: SecretVolume
    upstream: SecretVolume
    upstream_files: dict[str, bytes]
    ca1: ThrowawayCa
    ca2: ThrowawayCa
    trust: Path  # both listener CAs: what clients trust during the rotation
    first: Issued
    topic: str
    kafka: Any = field(repr=False)


@pytest.fixture(scope="module")
def rig(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A proxy on TLS, in front of the cluster's mTLS listener, with rotatable files."""
    work = tmp_path_factory.mktemp("tls-reload")
    ca1, ca2 = ThrowawayCa(work / "ca1", "ca1"), ThrowawayCa(work / "ca2", "ca2")
    first = ca1.issue("listener-1", server=True)
    trust = work / "trust.pem"
    trust.write_bytes(ca1.cert.read_bytes() + ca2.cert.read_bytes())
    listener = SecretVolume(work / "listener", pem(first) | {"ca.crt": ca1.cert.read_bytes()})
    files = kafka.tls_files
    upstream_files = {
        "ca.crt": files.ca.read_bytes(),
        "tls.crt": files.client_cert.read_bytes(),
        "tls.key": files.client_key.read_bytes(),
    }
    upstream = SecretVolume(work / "upstream", upstream_files)
    (work / "policy.yaml").write_text(POLICY)
    proxy = ProxyProcess(
        work,
        kafka.mtls_bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "listeners": {
                "tls": {
                    "cert_file": str(listener.path("tls.crt")),
                    "key_file": str(listener.path("tls.key")),
                    "reload_interval_s": 0.2,
                },
            },
            "upstream": {
                "bootstrap_servers": kafka.mtls_bootstrap_servers.split(","),
                "tls": {
                    "ca_file": str(upstream.path("ca.crt")),
                    "cert_file": str(upstream.path("tls.crt")),
                    "key_file": str(upstream.path("tls.key")),
                    "reload_interval_s": 0,  # SIGHUP only
                },
            },
            "admin": {"port": ADMIN_PORT},
            "policy": {"file": str(work / "policy.yaml")},
        },
    )
    topic = f"rotation-{uuid.uuid4().hex[:8]}"
    # One partition per broker, so that traffic runs over every node listener.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    try:
        yield Rig(proxy, listener, upstream, upstream_files, ca1, ca2, trust, first, topic, kafka)
    finally:
        assert proxy.stop() == 0


def metric(name: str, port: int = ADMIN_PORT, **labels: str) -> float:
    """A value from a proxy's /metrics (0 when the series is not there yet)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.decode().splitlines():
        found = re.fullmatch(rf"{name}\{{([^}}]*)\}} (\S+)", line)
        if found and ",".join(sorted(found.group(1).split(","))) == wanted:
            return float(found.group(2))
    return 0.0


def wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Poll until `check()` holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def served_certificate(trust: Path) -> x509.Certificate:
    """The certificate a new TLS connection to the bootstrap listener is shown."""
    context = ssl.create_default_context(cafile=str(trust))
    with (
        socket.create_connection(("127.0.0.1", BOOTSTRAP_PORT), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as client,
    ):
        der = client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def api_versions(client: ssl.SSLSocket) -> bool:
    """Send ApiVersions v0; whether an answer came back (the broker behind was reached)."""
    client.sendall(framed(request_header(18, 0, 7, "rotation")))
    try:
        return len(client.recv(4)) == 4
    except (ConnectionError, ssl.SSLError, TimeoutError):
        return False


def open_client(trust: Path) -> ssl.SSLSocket:
    """A new raw TLS connection to the proxy's bootstrap listener."""
    context = ssl.create_default_context(cafile=str(trust))
    raw = socket.create_connection(("127.0.0.1", BOOTSTRAP_PORT), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


class Traffic:
    """A producer and a consumer through the proxy, counting records and every error."""

    def __init__(self, rig: Rig) -> None:
        self.errors: list[str] = []
        self.sent = self.delivered = self.received = 0
        self._topic = rig.topic
        self._stop = threading.Event()
        settings = {
            "bootstrap.servers": rig.proxy.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(rig.trust),
            "error_cb": lambda err: self.errors.append(f"client: {err}"),
        }
        self._producer = Producer(settings | {"linger.ms": 5, "acks": "all"})
        group = f"rotation-{uuid.uuid4().hex[:6]}"
        self._consumer = Consumer(settings | {"group.id": group, "auto.offset.reset": "earliest"})
        self._consumer.subscribe([rig.topic])
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _delivered(self, err: KafkaError | None, _: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(f"delivery: {err}")

    def _produce(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(
                self._topic, str(self.sent).encode(), on_delivery=self._delivered
            )
            self.sent += 1
            self._producer.poll(0.01)  # paces the producer: about 100 records a second
        self._producer.flush(30)

    def _consume(self) -> None:
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            if self._stop.is_set() and deadline is None:
                deadline = time.monotonic() + 30  # time to read what was still in flight
            if deadline is not None and self.received >= self.sent:
                break
            message = self._consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                self.errors.append(f"consume: {message.error()}")
            else:
                self.received += 1
        self._consumer.close()

    def wait_received(self, count: int) -> None:
        """Until the consumer has read `count` records."""
        wait_for(lambda: self.received >= count, f"{count} records consumed", timeout=60)

    def stop(self) -> None:
        """Stop producing; wait for the last deliveries and for the consumer to read them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(90)
        del self._producer  # librdkafka would go on reconnecting to the stopped proxy


def test_rotation_under_traffic(rig: Rig) -> None:
    """New CA-signed certificate, then a new CA, on the listener; new upstream files on SIGHUP:
    no client error, every record delivered and read, new connections see the new certificate."""
    assert (
        served_certificate(rig.trust).serial_number
        == x509.load_pem_x509_certificate(rig.first.cert.read_bytes()).serial_number
    )
    traffic = Traffic(rig)
    traffic.wait_received(100)
    # 1. A renewed certificate from the same CA (cert-manager's renewal).
    renewed = rig.ca1.issue("listener-2", server=True)
    rig.listener.update(pem(renewed) | {"ca.crt": rig.ca1.cert.read_bytes()})
    renewed_cert = x509.load_pem_x509_certificate(renewed.cert.read_bytes())
    wait_for(
        lambda: served_certificate(rig.trust).serial_number == renewed_cert.serial_number,
        "the renewed certificate on new connections",
    )
    traffic.wait_received(traffic.received + 100)
    # 2. A certificate from a new CA (clients were given both CAs beforehand).
    moved = rig.ca2.issue("listener-3", server=True)
    rig.listener.update(pem(moved) | {"ca.crt": rig.ca2.cert.read_bytes()})
    moved_cert = x509.load_pem_x509_certificate(moved.cert.read_bytes())
    wait_for(
        lambda: served_certificate(rig.trust).serial_number == moved_cert.serial_number,
        "the new CA's certificate on new connections",
    )
    # 3. The broker side: a new CA bundle and the client certificate files, on SIGHUP.
    other = ThrowawayCa(rig.ca1.directory / "other", "other-ca")
    rig.upstream.update(
        rig.upstream_files | {"ca.crt": other.cert.read_bytes() + rig.upstream_files["ca.crt"]}
    )
    rig.proxy.process.send_signal(signal.SIGHUP)
    wait_for(
        lambda: metric("kpp_tls_reloads_total", side="upstream", result="ok") == 1,
        "the upstream reload",
    )
    with open_client(rig.trust) as client:
        assert api_versions(client), "a new connection through the reloaded upstream context"
    traffic.wait_received(traffic.received + 100)
    traffic.stop()
    assert traffic.errors == []
    assert traffic.delivered == traffic.sent > 300
    assert traffic.received >= traffic.delivered
    # Two rotations seen by the watcher, and the SIGHUP, which reloads every side.
    assert metric("kpp_tls_reloads_total", side="listener", result="ok") == 3
    assert metric("kpp_tls_reloads_total", side="listener", result="failed") == 0
    assert (
        metric("kpp_tls_certificate_expiry_timestamp_seconds", side="listener")
        == moved_cert.not_valid_after_utc.timestamp()
    )


def test_bad_listener_files_keep_the_certificate_in_use(rig: Rig) -> None:
    """A key that does not match, then an expired certificate: refused, logged, counted."""
    in_use = served_certificate(rig.trust).serial_number
    failed = metric("kpp_tls_reloads_total", side="listener", result="failed")
    good, wrong = rig.ca2.issue("listener-4", server=True), rig.ca2.issue("listener-5", server=True)
    rig.listener.update({"tls.crt": good.cert.read_bytes(), "tls.key": wrong.key.read_bytes()})
    wait_for(
        lambda: metric("kpp_tls_reloads_total", side="listener", result="failed") == failed + 1,
        "the mismatched key refused",
    )
    expired = rig.ca2.issue("listener-6", server=True, expired=True)
    rig.listener.update(pem(expired))
    wait_for(
        lambda: metric("kpp_tls_reloads_total", side="listener", result="failed") == failed + 2,
        "the expired certificate refused",
    )
    assert served_certificate(rig.trust).serial_number == in_use
    log = rig.proxy.log_text()
    assert "TLS files refused" in log
    assert "listener/tls.key" in log  # the file is named
    assert "the certificate expired on" in log


def test_upstream_rotation_applies_to_new_connections_only(rig: Rig) -> None:
    """A client certificate the brokers do not trust, on SIGHUP: a connection opened before
    keeps working, a new one cannot reach the broker; the good files again, and it can."""
    held = open_client(rig.trust)
    try:
        assert api_versions(held)
        stranger = ThrowawayCa(rig.ca1.directory / "stranger", "stranger-ca").issue(
            "proxy", server=False
        )
        ok = metric("kpp_tls_reloads_total", side="upstream", result="ok")
        rig.upstream.update(rig.upstream_files | pem(stranger))
        rig.proxy.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: metric("kpp_tls_reloads_total", side="upstream", result="ok") == ok + 1,
            "the untrusted client certificate loaded",
        )
        with open_client(rig.trust) as refused:
            assert not api_versions(refused), "a new connection used the old client certificate"
        assert api_versions(held), "an open connection lost its broker session"
        rig.upstream.update(rig.upstream_files)
        rig.proxy.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: metric("kpp_tls_reloads_total", side="upstream", result="ok") == ok + 2,
            "the good client certificate loaded again",
        )
        with open_client(rig.trust) as again:
            assert api_versions(again)
    finally:
        held.close()


PROPERTIES_PORT = 18740  # bootstrap; nodes 1..3 on 18741..18743
PROPERTIES_ADMIN_PORT = 18732


@pytest.fixture(scope="module")
def properties_proxy(
    kafka: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxyProcess, SecretVolume, bytes]]:
    """A plaintext-listener proxy whose broker side is set by Kafka client properties naming
    a PEM keystore in a Secret volume; its mTLS to the brokers must follow that keystore."""
    work = tmp_path_factory.mktemp("tls-reload-properties")
    files = kafka.tls_files
    keystore = files.client_key.read_bytes() + files.client_cert.read_bytes()
    volume = SecretVolume(work / "keystore", {"keystore.pem": keystore})
    properties = work / "client.properties"
    properties.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={files.ca}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={volume.path('keystore.pem')}\n"
    )
    proxy = ProxyProcess(
        work,
        kafka.mtls_bootstrap_servers,
        PROPERTIES_PORT,
        PROPERTIES_PORT,
        extra={
            "upstream": {
                "bootstrap_servers": kafka.mtls_bootstrap_servers.split(","),
                "client_properties": str(properties),
            },
            "admin": {"port": PROPERTIES_ADMIN_PORT},
        },
    )
    try:
        yield proxy, volume, keystore
    finally:
        assert proxy.stop() == 0


def plain_client() -> socket.socket:
    """A new plaintext connection to the properties proxy's bootstrap listener."""
    return socket.create_connection(("127.0.0.1", PROPERTIES_PORT), timeout=10)


def plain_api_versions(client: socket.socket) -> bool:
    """ApiVersions v0 over plaintext; whether the broker behind answered."""
    client.sendall(framed(request_header(18, 0, 9, "rotation")))
    try:
        return len(client.recv(4)) == 4
    except (ConnectionError, TimeoutError):
        return False


def test_client_properties_keystore_rotation(
    properties_proxy: tuple[ProxyProcess, SecretVolume, bytes], tmp_path: Path
) -> None:
    """upstream.client_properties: a new keystore behind the same ssl.keystore.location is
    used by new broker connections after SIGHUP; an open one keeps its session."""
    proxy, volume, good = properties_proxy
    stranger = ThrowawayCa(tmp_path, "stranger-ca").issue("proxy", server=False)

    def upstream_reloads() -> float:
        return metric("kpp_tls_reloads_total", PROPERTIES_ADMIN_PORT, side="upstream", result="ok")

    with plain_client() as held:
        assert plain_api_versions(held)
        volume.update({"keystore.pem": stranger.key.read_bytes() + stranger.cert.read_bytes()})
        proxy.process.send_signal(signal.SIGHUP)
        wait_for(lambda: upstream_reloads() == 1, "the stranger's keystore loaded")
        with plain_client() as refused:
            assert not plain_api_versions(refused), "a new connection used the old keystore"
        assert plain_api_versions(held), "an open connection lost its broker session"
        volume.update({"keystore.pem": good})
        proxy.process.send_signal(signal.SIGHUP)
        wait_for(lambda: upstream_reloads() == 2, "the good keystore loaded again")
        with plain_client() as again:
            assert plain_api_versions(again)
