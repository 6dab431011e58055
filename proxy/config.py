"""Proxy configuration: a YAML file validated by pydantic, every value overridable from env."""

from __future__ import annotations

import os
import re
import types
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    SecretStr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from kafka_policy_proxy.proxy.identity.tls import parse_mapping_rules

ENV_PREFIX = "KPP_"
FILE_SUFFIX = "_file"  # a secret `x` may instead be read from the file named by `x_file`
Port = Annotated[int, Field(ge=1, le=65535)]


class ConfigError(Exception):
    """The configuration was refused; the message names each key and the reason."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostPort(_Section):
    """One host:port address."""

    host: str = Field(min_length=1)
    port: Port

    @classmethod
    def parse(cls, text: str) -> HostPort:
        """Parse 'host:port' (IPv6 hosts in brackets)."""
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{text!r} is not host:port")
        return cls(host=host.strip("[]"), port=int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _host_ports(value: Any) -> Any:
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [HostPort.parse(v) if isinstance(v, str) else v for v in value]
    return value


def _int_text(value: Any) -> Any:
    # The environment gives text, and pydantic does not coerce text to an int Literal.
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


_HOST_PORT_SCHEMA = {"type": "string", "pattern": r"^\S+:\d+$"}
# NoDecode: the environment form is 'host:port,host:port', not JSON. The schema states the
# text forms a file uses, which the model's own schema (a list of objects) would refuse.
HostPorts = Annotated[
    list[HostPort],
    NoDecode,
    BeforeValidator(_host_ports),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": _HOST_PORT_SCHEMA, "minItems": 1},
                {"type": "string", "description": "host:port,host:port"},
            ]
        }
    ),
]


def _secrets_schema(schema: dict[str, Any], model: type) -> None:
    # A secret is required, but as either of two keys.
    names: tuple[str, ...] = getattr(model, "secret_fields", ())
    required = set(schema.get("required", []))
    schema["required"] = [key for key in required if key not in names]
    schema["allOf"] = [
        {"oneOf": [{"required": [name]}, {"required": [name + FILE_SUFFIX]}]}
        if name in required
        else {"not": {"required": [name, name + FILE_SUFFIX]}}
        for name in names
    ]


class _SecretsSection(_Section):
    """A section whose secrets may each be given inline or as a sibling `<name>_file` path."""

    model_config = ConfigDict(json_schema_extra=_secrets_schema)
    secret_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _read_secret_files(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name in cls.secret_fields:
            file_key = name + FILE_SUFFIX
            inline, path = data.get(name), data.get(file_key)
            required = cls.model_fields[name].is_required()
            if (inline is not None and path is not None) or (required and inline is path is None):
                raise ValueError(
                    f"set {'exactly' if required else 'at most'} one of {name} and {file_key}"
                )
            if path is not None:
                data[name] = _read_secret(file_key, Path(path))
        return data


def _read_secret(key: str, path: Path) -> str:
    try:
        text = path.read_bytes().decode()
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{key}: {path} is not UTF-8 text") from None
    # Files written by `echo` or an editor end in a newline that is not part of the secret.
    return text.removesuffix("\n")


class TlsConfig(_Section):
    """TLS on the client side of the proxy; a client certificate names the principal."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = Field(default=None, description="CAs that sign client certificates")
    client_auth: Literal["none", "requested", "required"] = "none"
    principal_mapping_rules: list[str] = Field(
        default=["DEFAULT"], description="as Kafka's ssl.principal.mapping.rules, one per item"
    )
    reload_interval_s: float = Field(
        default=5.0,
        ge=0,
        description="how often the files are checked for a change, then reloaded (0: SIGHUP only)",
    )

    @field_validator("principal_mapping_rules")
    @classmethod
    def _rules_parse(cls, rules: list[str]) -> list[str]:
        parse_mapping_rules(rules)  # a MappingRuleError names the rule and the reason
        return rules


_NODE_ID = "$(nodeId)"
_HOST_NAME = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*", re.IGNORECASE)


class SniConfig(_Section):
    """SNI routing: one TLS port; the host name a client asks for picks bootstrap or a broker.

    The names follow Kroxylicious's SNI gateway (bootstrapAddress, advertisedBrokerAddressPattern).
    """

    bootstrap_address: str = Field(
        description="host:port: clients bootstrap with this name; the proxy listens on the port"
    )
    advertised_broker_address_pattern: str = Field(
        description="each broker's name, with $(nodeId) for its node id, and an optional :port "
        "to advertise (default: the bootstrap port), e.g. broker-$(nodeId).kafka.example.com"
    )

    @field_validator("bootstrap_address")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r} is not host:port")
        if not _HOST_NAME.fullmatch(host) or host.replace(".", "").isdigit():
            raise ValueError(f"{host!r} is not a DNS host name (SNI carries names, not addresses)")
        return value

    @field_validator("advertised_broker_address_pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        host, sep, port = value.rpartition(":") if ":" in value else (value, "", "")
        if sep and (not port.isdigit() or not 0 < int(port) < 65536):
            raise ValueError(f"{value!r}: the port after ':' must be a number below 65536")
        if host.count(_NODE_ID) != 1:
            raise ValueError(f"{value!r}: must hold {_NODE_ID} exactly once")
        if not _HOST_NAME.fullmatch(host.replace(_NODE_ID, "0")):
            raise ValueError(f"{value!r} is not a DNS host name pattern")
        return value

    @property
    def port(self) -> int:
        """The port the SNI listener binds (the bootstrap address's)."""
        return int(self.bootstrap_address.rpartition(":")[2])

    @property
    def bootstrap_host(self) -> str:
        """The SNI name that reaches the bootstrap brokers."""
        return self.bootstrap_address.rpartition(":")[0].lower()

    def broker_address(self, node_id: int) -> tuple[str, int]:
        """The host and port advertised for a node."""
        pattern = self.advertised_broker_address_pattern
        host, _, port = pattern.rpartition(":") if ":" in pattern else (pattern, "", "")
        return host.replace(_NODE_ID, str(node_id)).lower(), int(port) if port else self.port


def _off(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as false.
    return "off" if value is False else value


class ListenersConfig(_Section):
    """Where the proxy listens, and the address it tells clients to use."""

    bind_host: str = "0.0.0.0"
    advertised_host: str = "127.0.0.1"
    bootstrap_port: Port = 9192
    broker_port_base: Port = Field(
        default=9200, description="node id N is served on broker_port_base + N"
    )
    tls: TlsConfig | None = None
    sni: SniConfig | None = Field(
        default=None,
        description="one more TLS port, for bootstrap and every broker, routed by SNI host name",
    )
    proxy_protocol: Annotated[Literal["off", "required"], BeforeValidator(_off)] = Field(
        default="off",
        description="required: every connection to every listener starts with a PROXY protocol "
        "v1 or v2 header (HAProxy send-proxy, an NLB's proxy protocol), whose client address "
        "the logs, the audit and the per-client limits use; one without it is closed. Reach "
        "such a port only through the load balancer: whoever connects directly can name any "
        "address",
    )
    proxy_protocol_timeout_s: float = Field(
        default=5.0, gt=0, description="a connection without a whole PROXY header by then is closed"
    )
    proxy_protocol_allowed_peers: list[IPvAnyNetwork] = Field(
        default=[],
        description="with proxy_protocol: required, the load balancers' addresses (CIDRs): a "
        "connection from any other peer is closed before its header is read; empty: any peer",
    )
    oauthbearer_principal_claim: str = Field(
        default="sub",
        min_length=1,
        pattern=r"^\S+$",
        description="the JWT claim an OAUTHBEARER client's principal comes from: the brokers' "
        "sasl.oauthbearer.sub.claim.name",
    )

    @model_validator(mode="after")
    def _peers_need_proxy_protocol(self) -> ListenersConfig:
        if self.proxy_protocol_allowed_peers and self.proxy_protocol != "required":
            raise ValueError("proxy_protocol_allowed_peers: needs proxy_protocol: required")
        return self

    @model_validator(mode="after")
    def _sni_needs_tls(self) -> ListenersConfig:
        if self.sni is not None and self.tls is None:
            raise ValueError(
                "sni: needs listeners.tls (a certificate covering the bootstrap and broker names)"
            )
        return self


class UpstreamTlsConfig(_SecretsSection):
    """TLS from the proxy to the brokers (client TLS is terminated and re-originated)."""

    secret_fields: ClassVar[tuple[str, ...]] = ("key_password",)

    ca_file: Path | None = Field(
        default=None, description="CAs that sign the broker certificates; default: the system's"
    )
    check_hostname: bool = Field(
        default=True, description="the broker certificate must name the host dialled"
    )
    cert_file: Path | None = Field(default=None, description="client certificate for mTLS")
    key_file: Path | None = Field(default=None, description="its private key (PEM)")
    key_password: SecretStr | None = Field(
        default=None, description="the key's passphrase, or key_password_file"
    )
    key_password_file: Path | None = None
    min_version: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2"
    reload_interval_s: float = Field(
        default=5.0,
        ge=0,
        description="how often the files are checked for a change, then reloaded (0: SIGHUP only)",
    )

    @model_validator(mode="after")
    def _cert_with_key(self) -> UpstreamTlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mTLS needs both)")
        if self.key_password is not None and self.key_file is None:
            raise ValueError("key_password needs key_file")
        return self


class UpstreamConfig(_Section):
    """The Kafka cluster behind the proxy."""

    bootstrap_servers: HostPorts = Field(min_length=1)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    tls: UpstreamTlsConfig | None = Field(
        default=None, description="absent: plaintext to the brokers"
    )
    client_properties: Path | None = Field(
        default=None,
        description="a Kafka client .properties file (security.protocol, ssl.*, sasl.*; secrets "
        "as ${file:...}, ${dir:...} or ${env:...}) for every connection the proxy makes to the "
        "cluster, its TLS also for relayed client connections; instead of upstream.tls and "
        "cluster_state.sasl",
    )

    @model_validator(mode="after")
    def _one_spelling_of_tls(self) -> UpstreamConfig:
        if self.client_properties is not None and self.tls is not None:
            raise ValueError("set upstream.client_properties or upstream.tls, not both")
        return self


_FRAME_DEFAULT = 100 * 1024 * 1024
_JUDGED_DEFAULT = 8 * 1024 * 1024
_CONNECTION_DEFAULT = 16 * 1024 * 1024


class LimitsConfig(_Section):
    """Protection against oversized or stuck input, and against too many connections."""

    max_frame_bytes: int = Field(default=_FRAME_DEFAULT, ge=1024, le=2**31 - 1)
    max_buffered_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1024,
        description="bytes buffered across all connections before the largest stop reading",
    )
    stall_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="over the budget, a connection holding bytes without progress this long "
        "is closed",
    )
    max_judged_request_bytes: int = Field(
        default=_JUDGED_DEFAULT,
        ge=1024,
        description="a request some filter reads whole (guarded admin APIs, Metadata, SASL) "
        "larger than this closes the connection at its header, before its body is buffered; "
        "at most max_frame_bytes (which it follows when left unset and smaller)",
    )
    max_connection_buffered_bytes: int = Field(
        default=_CONNECTION_DEFAULT,
        ge=1024,
        description="one connection stops being read while it holds this much (partial, held "
        "and reserved request frames, queued responses, write buffers); at least "
        "max_judged_request_bytes",
    )
    max_connections_per_listener: int = Field(default=1000, ge=1)
    max_connections: int = Field(default=4000, ge=1, description="across all listeners")
    max_entries_per_request: int = Field(
        default=5000,
        ge=1,
        le=1_000_000,
        description="topics or resources per guarded admin request (and 10x this in array "
        "elements in all, partitions and configs included), checked before decoding: over it "
        "every entry is answered INVALID_REQUEST, over 4x it the connection is closed",
    )

    @field_validator("max_buffered_bytes")
    @classmethod
    def _budget_fits_a_frame(cls, value: int, info: ValidationInfo) -> int:
        frame = info.data.get("max_frame_bytes")
        if frame is not None and value < frame:
            raise ValueError(f"must be at least limits.max_frame_bytes ({frame})")
        return value

    @model_validator(mode="before")
    @classmethod
    def _caps_follow_frames(cls, data: Any) -> Any:
        # Left unset, the memory caps follow a smaller frame limit rather than refuse it.
        if not isinstance(data, dict):
            return data
        try:
            frame = int(data.get("max_frame_bytes", _FRAME_DEFAULT))
            judged = int(data.get("max_judged_request_bytes", min(_JUDGED_DEFAULT, frame)))
        except (TypeError, ValueError):
            return data  # the field's own validation names the key
        data = dict(data)
        data.setdefault("max_judged_request_bytes", judged)
        data.setdefault("max_connection_buffered_bytes", max(_CONNECTION_DEFAULT, judged))
        return data

    @model_validator(mode="after")
    def _caps_fit_frames(self) -> LimitsConfig:
        if self.max_judged_request_bytes > self.max_frame_bytes:
            raise ValueError(
                f"limits.max_judged_request_bytes ({self.max_judged_request_bytes}) must be "
                f"at most limits.max_frame_bytes ({self.max_frame_bytes})"
            )
        if self.max_connection_buffered_bytes < self.max_judged_request_bytes:
            raise ValueError(
                "limits.max_connection_buffered_bytes "
                f"({self.max_connection_buffered_bytes}) must be at least "
                f"limits.max_judged_request_bytes ({self.max_judged_request_bytes})"
            )
        return self


class PolicyConfig(_Section):
    """The policy file and how violations are reported."""

    file: Path | None = Field(
        default=None, description="policy YAML; without one the proxy enforces nothing"
    )
    watch: bool = Field(default=True, description="reload when the file changes (and on SIGHUP)")
    legacy_error_code: Annotated[Literal[-1, 44], BeforeValidator(_int_text)] = Field(
        default=-1,
        description="error for response versions without a message field "
        "(DeleteTopics v1-4; DeleteRecords always gets 44): -1 UNKNOWN_SERVER_ERROR, "
        "or 44 POLICY_VIOLATION",
    )


class SaslConfig(_SecretsSection):
    """SASL credentials for the proxy's own connection to the cluster."""

    secret_fields: ClassVar[tuple[str, ...]] = ("password",)

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    username: str = Field(min_length=1)
    password: SecretStr = Field(description="or password_file")
    password_file: Path | None = Field(
        default=None, description="a file holding the password (one trailing newline dropped)"
    )


class ClusterStateConfig(_Section):
    """How the proxy reads topic metadata, configs and broker defaults for the policy."""

    ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a fact is reused for Metadata and creates' existence checks; "
        "mutations of existing topics read their facts fresh",
    )
    request_timeout_s: float = Field(default=10.0, gt=0)
    connections: int = Field(
        default=2,
        ge=1,
        le=16,
        description="connections the proxy reads cluster state on; big reads (many topic ids) "
        "keep off the first, so a slow one does not hold every judgement",
    )
    max_ids_per_request: int = Field(
        default=100,
        ge=1,
        description="unknown topic ids one request may make the proxy look up; the rest are "
        "answered UNKNOWN_TOPIC_ID without a read",
    )
    unknown_id_ttl_s: float = Field(
        default=2.0,
        ge=0,
        description="how long a topic id found unknown is answered UNKNOWN_TOPIC_ID without "
        "a read (a create forwarded by this proxy ends it at once)",
    )
    bootstrap_servers: HostPorts | None = Field(
        default=None, description="defaults to upstream.bootstrap_servers"
    )
    sasl: SaslConfig | None = None


class AuditKafkaConfig(_Section):
    """The audit topic: decision records as CloudEvents-style JSON, keyed by topic."""

    topic: str = Field(default="kafka-policy-proxy-audit", min_length=1, max_length=249)
    bootstrap_servers: HostPorts | None = Field(
        default=None,
        description="defaults to upstream.bootstrap_servers, with upstream.tls and "
        "cluster_state.sasl",
    )
    buffer_events: int = Field(
        default=10000, ge=1, description="events awaiting delivery; beyond it they are dropped"
    )
    linger_ms: int = Field(default=50, ge=0)
    delivery_timeout_s: float = Field(default=10.0, gt=0)


class AuditConfig(_Section):
    """Where the audit log of policy decisions goes (docs/audit-log.md)."""

    file: Path | None = None
    stdout: bool = False
    max_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    backups: int = Field(default=5, ge=0)
    proxy_id: str | None = Field(
        default=None,
        min_length=1,
        description="names this proxy in each record; defaults to <hostname>:<bootstrap_port>",
    )
    on_failure: Literal["open", "closed"] = Field(
        default="open",
        description="closed: a mutation is refused unless its audit event was written",
    )
    kafka: AuditKafkaConfig | None = None
    max_records_per_request: int = Field(
        default=100,
        ge=1,
        description="topic records one request may write; beyond it, one summary record",
    )
    summary_sample: int = Field(
        default=20,
        ge=0,
        le=1000,
        description="topics a summary record names one by one (and one per rule beyond them)",
    )
    min_retention_s: float = Field(
        default=3600.0,
        ge=0,
        description="the file never rotates away history younger than this; it alerts instead",
    )
    max_total_bytes: int | None = Field(
        default=None,
        ge=1024,
        description="all audit files together, beyond which records are refused (closed: "
        "mutations refused; open: dropped); default max_bytes x (backups + 2)",
    )
    principal_budget_bytes_per_minute: int = Field(
        default=10 * 1024 * 1024,
        ge=0,
        description="audit bytes one principal (ANONYMOUS: one client host) may cause per "
        "minute; beyond it its guarded requests are refused; 0: unlimited",
    )
    budget_principals: int = Field(
        default=10000, ge=1, description="principals the audit budget tracks at most (LRU)"
    )

    @model_validator(mode="after")
    def _closed_needs_a_sink_that_can_fail(self) -> AuditConfig:
        if self.on_failure == "closed" and self.kafka is None and self.file is None:
            raise ValueError(
                "on_failure: closed needs audit.file or audit.kafka (a sink whose failure it "
                "can see)"
            )
        return self

    @model_validator(mode="after")
    def _total_holds_the_rotation(self) -> AuditConfig:
        least = self.max_bytes * (self.backups + 1)
        if self.max_total_bytes is not None and self.max_total_bytes < least:
            raise ValueError(f"max_total_bytes must hold max_bytes x (backups + 1) = {least} bytes")
        return self


class AdmissionConfig(_Section):
    """Fair turns at judging, and each principal's rate of guarded entries (KIP-599 style)."""

    concurrent_judgements: int = Field(
        default=2,
        ge=1,
        le=256,
        description="guarded requests worked on at once; the rest wait, taken fairly by "
        "principal (by connection for User:ANONYMOUS) and by entries",
    )
    entries_per_second: float = Field(
        default=5000.0,
        gt=0,
        description="topics or resources per second each principal (each ANONYMOUS "
        "connection) may send in guarded requests; over it: THROTTLING_QUOTA_EXCEEDED with "
        "throttle_time_ms where the version has it, else the request waits",
    )
    burst: int = Field(
        default=10000, ge=1, description="entries a principal may send at once before its rate"
    )


class AdminConfig(_Section):
    """The operations HTTP listener: /metrics, /healthz, /readyz."""

    bind_host: str = Field(
        default="127.0.0.1",
        description="loopback: the listener needs no credentials; set 0.0.0.0 (or the pod "
        "address) where probes and Prometheus must reach it",
    )
    port: Port | None = Field(default=None, description="absent: no admin listener")
    readiness_max_age_s: float = Field(
        default=60.0, gt=0, description="/readyz needs a cluster-state read this recent"
    )


class NetConfig(_Section):
    """How bytes move between the client and broker sockets."""

    splice: bool = Field(
        default=False,
        description="move the bodies of large pass-through responses socket to socket with "
        "splice(2), never through Python (plaintext listeners to a plaintext cluster, Linux)",
    )


class LoggingConfig(_Section):
    """Log level and format (json when stderr is not a terminal, unless set)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class ProxyConfig(BaseSettings):
    """The whole proxy configuration."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    listeners: ListenersConfig = ListenersConfig()
    upstream: UpstreamConfig
    limits: LimitsConfig = LimitsConfig()
    net: NetConfig = NetConfig()
    admission: AdmissionConfig = AdmissionConfig()
    policy: PolicyConfig = PolicyConfig()
    cluster_state: ClusterStateConfig = ClusterStateConfig()
    audit: AuditConfig = AuditConfig()
    logging: LoggingConfig = LoggingConfig()
    admin: AdminConfig = AdminConfig()
    # "auto" stays as written: `run` resolves it (proxy/runtime/cpus.py) and logs the figure.
    workers: Annotated[
        Annotated[int, Field(ge=1, le=256)] | Literal["auto"],
        BeforeValidator(_int_text),
        WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]}),
    ] = Field(
        default=1,
        description="processes sharing the listeners; auto = the CPUs the process may use "
        "(its CPU affinity, capped by the cgroup CPU quota, rounded up)",
    )
    shutdown_timeout_s: float = Field(default=30.0, ge=0)

    @model_validator(mode="after")
    def _one_spelling_of_sasl(self) -> ProxyConfig:
        if self.upstream.client_properties is not None and self.cluster_state.sasl is not None:
            raise ValueError(
                "set upstream.client_properties or cluster_state.sasl, not both (the properties "
                "file holds the SASL login: sasl.mechanism and sasl.jaas.config)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment wins over the file, so a container can adjust one value.
        return (env_settings, init_settings)


def load_config(path: Path | None) -> ProxyConfig:
    """Load and validate the config file (if any) plus KPP_* environment overrides."""
    return build_config(read_config_file(path), path)


def read_config_file(path: Path | None) -> dict[str, Any]:
    """The config file's mapping as written (empty without a file)."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def build_config(data: dict[str, Any], path: Path | None) -> ProxyConfig:
    """Validate the file's mapping (from `path`) plus KPP_* environment overrides."""
    unknown = sorted(set(k for k in os.environ if k.startswith(ENV_PREFIX)) - _env_names())
    if unknown:
        raise ConfigError("\n".join(f"environment: {name}: unknown key" for name in unknown))
    # `from None`: the ValidationError's own text quotes each input, secrets included.
    try:
        return ProxyConfig(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    except SettingsError as exc:
        raise ConfigError(f"environment ({ENV_PREFIX}*): {exc}") from None


def _env_names(model: type[BaseModel] = ProxyConfig, prefix: str = ENV_PREFIX) -> set[str]:
    # pydantic-settings ignores unknown variables; a typo in KPP_* must not pass silently.
    names = set()
    for name, field in model.model_fields.items():
        env_name = f"{prefix}{name.upper()}"
        names.add(env_name)
        section = section_model(field.annotation)
        if section is not None:
            names |= _env_names(section, env_name + "__")
    return names


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds (`X` or `X | None`), or None for a plain value."""
    if get_origin(annotation) in (Union, types.UnionType):
        models = [a for a in get_args(annotation) if a is not type(None)]
        annotation = models[0] if len(models) == 1 else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _describe(exc: ValidationError, path: Path | None) -> str:
    env = sorted(k for k in os.environ if k.startswith(ENV_PREFIX))
    source = f"{path}" if path else "configuration"
    if env:
        source += f" (with {', '.join(env)} from the environment)"
    lines = [f"invalid {source}:"]
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        reason = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"  {key}: {reason}")
    return "\n".join(lines)
