"""TLS termination: the server context against Python ssl clients, and certificate principals."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from kafka_policy_proxy.proxy.config import ConfigError, TlsConfig, load_config
from kafka_policy_proxy.proxy.identity.tls import MappingRuleError
from kafka_policy_proxy.proxy.tls.client_side import (
    CertificatePrincipalError,
    CertificatePrincipals,
    TlsError,
    server_context,
    tls_listener,
)
from tests.unit.proxy.tls_certs import TlsCerts, tls_certs_fixture  # noqa: F401

ALICE_RULES = ["RULE:^CN=([a-z]+),.*$/$1/L", "DEFAULT"]


def tls_config(certs: TlsCerts, client_auth: str = "required", **overrides: Any) -> TlsConfig:
    settings = {
        "cert_file": certs.server_cert,
        "key_file": certs.server_key,
        "ca_file": certs.ca,
        "client_auth": client_auth,
        **overrides,
    }
    return TlsConfig(**settings)


Outcome = str | None | CertificatePrincipalError


@dataclass
class Served:
    """A running TLS server: its port, and what each connection it accepted was told."""

    port: int
    outcomes: list[Outcome] = field(default_factory=list)


class _WhoAmI(asyncio.Protocol):
    """Writes the connection's principal ('-' for none) and closes, as the proxy would."""

    def __init__(self, principals: CertificatePrincipals, served: Served) -> None:
        self._principals = principals
        self._served = served

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        try:
            principal = self._principals.principal(transport)
        except CertificatePrincipalError as exc:
            self._served.outcomes.append(exc)
        else:
            self._served.outcomes.append(principal)
            cast(asyncio.Transport, transport).write((principal or "-").encode())
        transport.close()


@asynccontextmanager
async def tls_server(tls: TlsConfig) -> AsyncIterator[Served]:
    principals = CertificatePrincipals(tls.principal_mapping_rules)
    served = Served(0)
    loop = asyncio.get_running_loop()
    # As the proxy's listeners do.
    factory = tls_listener(lambda: _WhoAmI(principals, served), server_context(tls))
    server = await loop.create_server(factory, "127.0.0.1", 0)
    served.port = server.sockets[0].getsockname()[1]
    try:
        yield served
    finally:
        server.close()
        await server.wait_closed()


async def whoami(
    served: Served,
    certs: TlsCerts,
    client: str | None,
    version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
) -> str:
    """Connect over TLS (with the client's certificate, if any); return what the server said,
    or `alert: <reason>` for the TLS alert a refused handshake sends."""
    context = ssl.create_default_context(cafile=certs.ca)
    context.maximum_version = version
    if client is not None:
        context.load_cert_chain(certs.cert(client), certs.key(client))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port, ssl=context)
    except ssl.SSLError as exc:  # TLS 1.2: the alert ends the client's handshake
        return f"alert: {exc.reason}"
    try:
        # With TLS 1.3 the client's side of the handshake completes first: the alert comes
        # with the first read.
        return (await asyncio.wait_for(reader.read(), 5)).decode()
    except ssl.SSLError as exc:
        return f"alert: {exc.reason}"
    finally:
        writer.close()


async def test_required_client_auth_refuses_a_client_without_certificate(
    tls_certs: TlsCerts,
) -> None:
    with capture_logs() as logs:
        async with tls_server(tls_config(tls_certs, "required")) as served:
            # The alert a broker sends, so that a client fails instead of retrying.
            no_cert = await whoami(served, tls_certs, None)
            assert no_cert == "alert: TLSV13_ALERT_CERTIFICATE_REQUIRED"
            old = await whoami(served, tls_certs, None, ssl.TLSVersion.TLSv1_2)
            assert old == "alert: SSLV3_ALERT_HANDSHAKE_FAILURE"
            assert await whoami(served, tls_certs, "alice") == "User:CN=alice,OU=eng,O=Acme"
    assert served.outcomes == ["User:CN=alice,OU=eng,O=Acme"]
    refused = [e for e in logs if e["event"] == "client TLS handshake refused"]
    assert [e["reason"] for e in refused] == ["PEER_DID_NOT_RETURN_A_CERTIFICATE"] * 2
    assert all(e["client"].startswith("127.0.0.1:") for e in refused)


async def test_requested_client_auth_accepts_clients_with_and_without_certificate(
    tls_certs: TlsCerts,
) -> None:
    async with tls_server(tls_config(tls_certs, "requested")) as served:
        assert await whoami(served, tls_certs, "bob") == "User:CN=bob"
        assert await whoami(served, tls_certs, None) == "-"


async def test_requested_client_auth_still_verifies_a_presented_certificate(
    tls_certs: TlsCerts,
) -> None:
    with capture_logs() as logs:
        async with tls_server(tls_config(tls_certs, "requested")) as served:
            assert await whoami(served, tls_certs, "stranger") == "alert: TLSV1_ALERT_UNKNOWN_CA"
    assert served.outcomes == []
    [refused] = [e for e in logs if e["event"] == "client TLS handshake refused"]
    assert refused["reason"].startswith("CERTIFICATE_VERIFY_FAILED")


async def test_no_client_auth_names_no_principal(tls_certs: TlsCerts) -> None:
    async with tls_server(tls_config(tls_certs, "none", ca_file=None)) as served:
        assert await whoami(served, tls_certs, "alice") == "-"


async def test_mapping_rules_name_the_principal(tls_certs: TlsCerts) -> None:
    tls = tls_config(tls_certs, principal_mapping_rules=ALICE_RULES)
    async with tls_server(tls) as served:
        assert await whoami(served, tls_certs, "alice") == "User:alice"
        # "CN=bob" has no comma for the rule to match: DEFAULT keeps the whole DN.
        assert await whoami(served, tls_certs, "bob") == "User:CN=bob"


async def test_a_dn_no_rule_maps_raises_and_the_connection_closes(tls_certs: TlsCerts) -> None:
    tls = tls_config(tls_certs, principal_mapping_rules=ALICE_RULES[:1])
    async with tls_server(tls) as served:
        assert await whoami(served, tls_certs, "bob") == ""
    [error] = served.outcomes
    assert str(error) == (
        "client certificate 'CN=bob': no principal mapping rule applies "
        "(end listeners.tls.principal_mapping_rules with DEFAULT to use the whole DN)"
    )


def test_a_bad_rule_is_refused_when_built() -> None:
    with pytest.raises(MappingRuleError, match="rule 2"):
        CertificatePrincipals(["DEFAULT", "RULE:^CN=(.*$/$1/"])


def test_a_bad_rule_refuses_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream: {bootstrap_servers: ['127.0.0.1:9092']}\n"
        "listeners: {tls: {cert_file: c.pem, key_file: k.pem,"
        " principal_mapping_rules: ['RULE:^CN=(.*)$/$1/X']}}\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    assert "listeners.tls.principal_mapping_rules:" in str(refused.value)
    assert "principal mapping rule 1 ('RULE:^CN=(.*)$/$1/X')" in str(refused.value)


def test_context_is_tls_1_2_or_later(tls_certs: TlsCerts) -> None:
    assert server_context(tls_config(tls_certs)).minimum_version == ssl.TLSVersion.TLSv1_2


def test_unusable_files_are_named(tls_certs: TlsCerts, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not PEM\n")
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "cert_file": (
            {"cert_file": missing},
            f"listeners.tls.cert_file: {missing}: cannot read: No such file or directory",
        ),
        "cert_garbage": (
            {"cert_file": garbage},
            f"listeners.tls.cert_file: {garbage}: no PEM certificate found",
        ),
        "cert_empty": (
            {"cert_file": empty},
            f"listeners.tls.cert_file: {empty}: no PEM certificate found",
        ),
        "key_file": (
            {"key_file": missing},
            f"listeners.tls.key_file: {missing}: cannot read: No such file or directory",
        ),
        "key_mismatch": (
            {"key_file": tls_certs.key("alice")},
            f"listeners.tls.key_file: {tls_certs.key('alice')}: not a PEM private key matching "
            f"the certificate in {tls_certs.server_cert}",
        ),
        "ca_file": (
            {"ca_file": garbage},
            f"listeners.tls.ca_file: {garbage}: no PEM CA certificate found",
        ),
        "no_ca": (
            {"ca_file": None},
            "listeners.tls.ca_file: needed to verify client certificates "
            "(client_auth is 'required')",
        ),
    }
    for case, (overrides, message) in cases.items():
        with pytest.raises(TlsError) as refused:
            server_context(tls_config(tls_certs, **overrides))
        assert str(refused.value).startswith(message), case


def test_an_encrypted_key_is_refused_without_prompting(tls_certs: TlsCerts, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [
            "openssl",
            "pkey",
            "-in",
            tls_certs.server_key,
            "-out",
            encrypted,
            "-aes256",
            "-passout",
            "pass:x",
        ],
        check=True,
    )
    with pytest.raises(TlsError, match="encrypted"):
        server_context(tls_config(tls_certs, key_file=encrypted))


async def test_a_client_gone_before_the_handshake_is_logged_by_address(
    tls_certs: TlsCerts,
) -> None:
    with capture_logs() as logs:
        async with tls_server(tls_config(tls_certs, "required")) as served:
            # A plain-TCP probe: connects, says nothing, leaves.
            _, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.close()
            await writer.wait_closed()
            for _ in range(100):
                if any(e["event"] == "client TLS handshake not completed" for e in logs):
                    break
                await asyncio.sleep(0.01)
    [gone] = [e for e in logs if e["event"] == "client TLS handshake not completed"]
    assert gone["client"].startswith("127.0.0.1:")
    assert gone["reason"] == "ConnectionResetError"
    assert gone["log_level"] == "info"
