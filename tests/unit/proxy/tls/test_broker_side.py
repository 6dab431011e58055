"""upstream.tls: the client context refuses unusable files by key, and handshake failures with a
real TLS server are explained by the setting to change."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from harness.throwaway_ca import ThrowawayCa
from kafka_policy_proxy.proxy.cluster.client import KafkaClient
from kafka_policy_proxy.proxy.cluster.discovery import brokers_request
from kafka_policy_proxy.proxy.config import UpstreamTlsConfig
from kafka_policy_proxy.proxy.tls.broker_side import (
    BrokerTlsError,
    UpstreamTlsError,
    client_context,
)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A throwaway CA with a broker (127.0.0.1 only) and a client certificate."""
    ca = ThrowawayCa(tmp_path_factory.mktemp("ca"))
    ca.issue("broker", server=True)
    ca.issue("proxy", server=False)
    ca.issue("locked", server=False, key_password="s3cret")
    ca.issue("expired", server=False, expired=True)
    return ca


def tls(**keys: Any) -> UpstreamTlsConfig:
    return UpstreamTlsConfig(**keys)


def test_a_usable_config_builds_a_verifying_context(ca: Any) -> None:
    d = ca.directory
    context = client_context(
        tls(ca_file=ca.cert, cert_file=d / "proxy.pem", key_file=d / "proxy.key")
    )
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    relaxed = client_context(tls(ca_file=ca.cert, check_hostname=False, min_version="TLSv1.3"))
    assert relaxed.verify_mode == ssl.CERT_REQUIRED  # the CA is still checked
    assert not relaxed.check_hostname
    assert relaxed.minimum_version == ssl.TLSVersion.TLSv1_3


def test_an_encrypted_key_opens_with_its_password(ca: Any) -> None:
    d = ca.directory
    pair = {"cert_file": d / "locked.pem", "key_file": d / "locked.key"}
    client_context(tls(ca_file=ca.cert, key_password="s3cret", **pair))
    with pytest.raises(UpstreamTlsError) as refused:
        client_context(tls(ca_file=ca.cert, key_password="wrong", **pair))
    assert str(refused.value).startswith(f"upstream.tls.key_file: {d / 'locked.key'}:")
    assert "upstream.tls.key_password does not open it" in str(refused.value)
    assert "wrong" not in str(refused.value)
    with pytest.raises(UpstreamTlsError, match=r"upstream\.tls\.key_file"):
        client_context(tls(ca_file=ca.cert, **pair))  # no password: refused, no prompt


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"ca_file": "missing.pem"}, "upstream.tls.ca_file: missing.pem: cannot read"),
        ({"ca_file": "proxy.key"}, "upstream.tls.ca_file: proxy.key: no PEM CA certificate"),
        (
            {"cert_file": "expired.pem", "key_file": "expired.key"},
            "upstream.tls.cert_file: expired.pem: the certificate expired on",
        ),
        (
            {"cert_file": "proxy.key", "key_file": "proxy.key"},
            "upstream.tls.cert_file: proxy.key: no PEM certificate found",
        ),
        (
            {"cert_file": "proxy.pem", "key_file": "broker.key"},
            "upstream.tls.key_file: broker.key: not a PEM private key for the certificate",
        ),
    ],
)
def test_an_unusable_file_is_named_by_its_key(
    ca: Any, keys: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ca.directory)
    with pytest.raises(UpstreamTlsError) as refused:
        client_context(tls(**{"ca_file": str(ca.cert), **keys}))
    assert str(refused.value).startswith(expected)


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ({"cert_file": "c.pem"}, "cert_file and key_file go together"),
        ({"key_password": "x"}, "key_password needs key_file"),
        (
            {"cert_file": "c", "key_file": "k", "key_password": "x", "key_password_file": "f"},
            "set at most one of key_password and key_password_file",
        ),
    ],
)
def test_inconsistent_keys_are_refused(keys: dict[str, str], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        tls(**keys)


@pytest.fixture
async def broker(ca: Any) -> AsyncIterator[dict[str, int]]:
    """Two TLS servers with the broker certificate: one requires a client certificate."""
    d = ca.directory
    ports = {}
    servers = []
    for name, verify in (("tls", ssl.CERT_NONE), ("mtls", ssl.CERT_REQUIRED)):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca.cert)
        context.load_cert_chain(d / "broker.pem", d / "broker.key")
        context.verify_mode = verify

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
        servers.append(server)
        ports[name] = server.sockets[0].getsockname()[1]
    yield ports
    for server in servers:
        server.close()


async def failure(host: str, port: int, config: UpstreamTlsConfig) -> str:
    # A refused client certificate may arrive as an alert or as a bare close (TLS 1.3).
    with pytest.raises(ConnectionError) as failed:
        client = await KafkaClient.connect(host, port, 5, tls=client_context(config))
        try:
            await client.request(brokers_request())
        finally:
            await client.close()
    return str(failed.value)


async def test_handshake_failures_name_the_setting(
    ca: Any, broker: dict[str, int], tmp_path: Path
) -> None:
    other = ThrowawayCa(tmp_path, "other-ca")
    port = broker["tls"]
    assert "not signed by a CA in upstream.tls.ca_file" in await failure(
        "127.0.0.1", port, tls(ca_file=other.cert)
    )
    mismatch = await failure("localhost", port, tls(ca_file=ca.cert))
    assert "does not name 'localhost'" in mismatch
    assert "upstream.tls.check_hostname: false" in mismatch
    refused = await failure("127.0.0.1", broker["mtls"], tls(ca_file=ca.cert))
    assert "upstream.tls.cert_file" in refused


async def test_tls_to_a_plaintext_port_says_so() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(5)
        writer.transport.abort()  # as Kafka does with a "frame" too large to be one

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(BrokerTlsError, match=r"Remove upstream\.tls or dial the SSL listener"):
            await KafkaClient.connect("127.0.0.1", port, 5, tls=ssl.create_default_context())
    finally:
        server.close()
