"""SNI routing in the handshake: the name picks bootstrap or a known broker, anything else
gets the unrecognized_name alert."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from harness.throwaway_ca import ThrowawayCa
from kafka_policy_proxy.proxy.config import SniConfig, TlsConfig
from kafka_policy_proxy.proxy.tls.client_side import server_context
from kafka_policy_proxy.proxy.tls.sni import BOOTSTRAP, SniRouter
from tests.unit.proxy.tls.memory_handshake import handshake

CONFIG = SniConfig(
    bootstrap_address="bootstrap.kafka.example.com:9292",
    advertised_broker_address_pattern="broker-$(nodeId).kafka.example.com",
)
KNOWN = {0, 1, 2, 17}


@pytest.fixture
def router() -> SniRouter:
    return SniRouter(CONFIG, lambda node: node in KNOWN)


@pytest.mark.parametrize(
    ("name", "route"),
    [
        ("bootstrap.kafka.example.com", BOOTSTRAP),
        ("BOOTSTRAP.Kafka.Example.com", BOOTSTRAP),  # DNS names are case-insensitive
        ("bootstrap.kafka.example.com.", BOOTSTRAP),  # a fully qualified name's root dot
        ("broker-0.kafka.example.com", 0),
        ("broker-17.kafka.example.com", 17),
        ("broker-3.kafka.example.com", None),  # no such broker known
        ("broker-017.kafka.example.com", None),  # not a name the proxy advertises
        ("broker-1.kafka.example.com.evil.test", None),
        ("broker-1xkafka.example.com", None),  # the dots are literal
        ("kafka.example.com", None),
        ("", None),
        (None, None),
    ],
)
def test_names_route_to_bootstrap_or_a_known_broker(
    router: SniRouter, name: str | None, route: object
) -> None:
    assert router.route(name) == route


@pytest.fixture
def contexts(tmp_path: Path, router: SniRouter) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = ThrowawayCa(tmp_path)
    issued = ca.issue("wildcard", server=True, dns=["*.kafka.example.com"])
    server = router.install(server_context(TlsConfig(cert_file=issued.cert, key_file=issued.key)))
    return server, ssl.create_default_context(cafile=ca.cert)


def test_the_handshake_records_the_route_of_its_connection(
    router: SniRouter, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server, client = contexts
    to_broker, _ = handshake(server, client, "broker-2.kafka.example.com")
    to_bootstrap, _ = handshake(server, client, "bootstrap.kafka.example.com")
    assert router.route_of(to_broker) == 2
    assert router.route_of(to_bootstrap) == BOOTSTRAP
    with pytest.raises(LookupError):
        router.route_of(None)


@pytest.mark.parametrize(
    ("name", "reason"), [(None, "no_sni"), ("broker-9.kafka.example.com", "unknown_name")]
)
def test_a_hello_that_routes_nowhere_is_refused_with_unrecognized_name(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], name: str | None, reason: str
) -> None:
    server, client = contexts
    client.check_hostname = False  # to send no SNI at all
    before = REGISTRY.get_sample_value("kpp_sni_refused_total", {"reason": reason}) or 0
    with pytest.raises(ssl.SSLError) as refused:
        handshake(server, client, name)
    # The server's error says it refused; the client's (not raised here) reads the alert.
    assert refused.value.reason in ("CALLBACK_FAILED", "TLSV1_UNRECOGNIZED_NAME")
    assert REGISTRY.get_sample_value("kpp_sni_refused_total", {"reason": reason}) == before + 1
