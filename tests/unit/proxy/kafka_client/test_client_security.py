"""Kafka client properties -> ClientSecurity: config providers, PEM and PKCS#12 stores, refusals."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12

from harness.throwaway_ca import ThrowawayCa
from kafka_policy_proxy.proxy.kafka_client.properties import (
    ClientPropertiesError,
    read_properties,
    resolve_providers,
)
from kafka_policy_proxy.proxy.kafka_client.security import client_security
from kafka_policy_proxy.proxy.kafka_client.ssl_context import tls_context
from kafka_policy_proxy.proxy.tls.broker_side import explain

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCa:
    """A CA, a server certificate for 127.0.0.1 and a client one whose key has a password."""
    ca = ThrowawayCa(tmp_path_factory.mktemp("ca"))
    ca.issue("broker", server=True)
    ca.issue("client", server=False, key_password="key-pw")
    return ca


def p12(ca: ThrowawayCa, password: str) -> bytes:
    """The client's key and certificate chain as a PKCS#12 keystore."""
    key = serialization.load_pem_private_key((ca.directory / "client.key").read_bytes(), b"key-pw")
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = x509.load_pem_x509_certificate((ca.directory / "client.pem").read_bytes())
    chain = [x509.load_pem_x509_certificate(ca.cert.read_bytes())]
    return pkcs12.serialize_key_and_certificates(
        b"client",
        key,
        leaf,
        chain,
        serialization.BestAvailableEncryption(password.encode()),
    )


# -- config providers


def test_file_dir_and_env_providers(tmp_path: Path) -> None:
    (tmp_path / "secrets.properties").write_text("password = from-file\n")
    (tmp_path / "volume").mkdir()
    (tmp_path / "volume" / "jaas").write_text("from-dir\n")
    props = {
        "a": "${file:" + f"{tmp_path / 'secrets.properties'}:password" + "}",
        "b": "x ${dir:" + f"{tmp_path / 'volume'}:jaas" + "} y",
        "c": "${env:KPP_TEST_SECRET}",
        "d": "no reference",
    }
    assert resolve_providers(props, {"KPP_TEST_SECRET": "from-env"}) == {
        "a": "from-file",
        "b": "x from-dir\n y",  # a Secret volume's file as it is, as Kafka reads it
        "c": "from-env",
        "d": "no reference",
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("${env:KPP_NOT_SET}", "sasl.jaas.config: ${env:KPP_NOT_SET}: the environment has no"),
        ("${file:/nonexistent/s.properties:pw}", "sasl.jaas.config: ${file:/nonexistent/s."),
        ("${dir:/nonexistent:pw}", "sasl.jaas.config: ${dir:/nonexistent:pw}: cannot read"),
        ("${vault:secret/x:pw}", "sasl.jaas.config: unknown config provider 'vault'"),
    ],
)
def test_an_unresolvable_reference_names_the_key(value: str, message: str) -> None:
    with pytest.raises(ClientPropertiesError) as refused:
        resolve_providers({"sasl.jaas.config": value}, {})
    assert str(refused.value).startswith(message)


def test_a_missing_key_in_a_secrets_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "s.properties").write_text("other=1\n")
    with pytest.raises(ClientPropertiesError, match=r"^ssl.key.password: .* has no key pw$"):
        resolve_providers({"ssl.key.password": "${file:" + f"{tmp_path / 's.properties'}:pw" + "}"})


def test_declared_providers_as_java_clients_need_them(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("p")
    props = {
        "config.providers": "secrets",
        "config.providers.secrets.class": (
            "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
        ),
        "config.providers.secrets.param.allowed.paths": str(tmp_path),
        "ssl.key.password": "${secrets:" + f"{tmp_path}:pw" + "}",
    }
    assert resolve_providers(props)["ssl.key.password"] == "p"
    props["config.providers.secrets.param.allowed.paths"] = "/etc/elsewhere"
    with pytest.raises(ClientPropertiesError, match=r"^ssl.key.password: .* outside allowed"):
        resolve_providers(props)
    props["config.providers.secrets.class"] = "com.example.VaultConfigProvider"
    with pytest.raises(
        ClientPropertiesError, match=r"^config.providers.secrets.class: com.example.Vault"
    ):
        resolve_providers(props)


def test_a_file_with_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPP_TEST_PASSWORD", "alice-secret")
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM} required username="alice" '
        'password="${env:KPP_TEST_PASSWORD}";\n'
    )
    security = client_security(read_properties(path))
    assert (security.sasl_username, security.sasl_password) == ("alice", "alice-secret")
    assert "alice-secret" not in repr(security)


# -- TLS: PEM and PKCS#12


def test_pem_truststore_and_keystore_files(ca: ThrowawayCa, tmp_path: Path) -> None:
    keystore = tmp_path / "client.keystore.pem"
    keystore.write_bytes(
        (ca.directory / "client.key").read_bytes() + (ca.directory / "client.pem").read_bytes()
    )
    security = client_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.cert),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.key.password": "key-pw",
        }
    )
    assert security.tls is not None
    assert security.tls.ca_pem == ca.cert.read_text()
    assert security.tls.cert_chain_pem == (ca.directory / "client.pem").read_text()
    assert security.tls.key_pem is not None
    assert security.tls.key_pem.startswith("-----BEGIN PRIVATE KEY-----")  # decrypted
    assert security.tls.check_hostname


def test_inline_pem_and_no_hostname_check(ca: ThrowawayCa) -> None:
    security = client_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": ca.cert.read_text(),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": (ca.directory / "client.pem").read_text(),
            "ssl.keystore.key": (ca.directory / "client.key").read_text(),
            "ssl.key.password": "key-pw",
            "ssl.endpoint.identification.algorithm": "",
            "ssl.enabled.protocols": "TLSv1.3",
        }
    )
    assert security.tls is not None
    assert not security.tls.check_hostname
    assert security.tls.min_version == "TLSv1.3"


def test_pkcs12_stores_made_by_keytool_and_openssl(ca: ThrowawayCa, tmp_path: Path) -> None:
    truststore = tmp_path / "truststore.p12"
    keytool = shutil.which("keytool")
    assert keytool, "keytool (Java's, installed with the JDK by .ci/run) is needed on PATH"
    import_ca = ["-importcert", "-noprompt", "-storetype", "PKCS12", "-alias", "ca"]
    store = ["-keystore", str(truststore), "-storepass", "trust-pw", "-file", str(ca.cert)]
    subprocess.run(
        [keytool, *import_ca, *store],
        check=True,
        capture_output=True,
    )
    keystore = tmp_path / "keystore.p12"
    keystore.write_bytes(p12(ca, "store-pw"))
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": "trust-pw",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": "store-pw",
        "ssl.key.password": "store-pw",
    }
    security = client_security(props)
    assert security.tls is not None
    assert security.tls.ca_pem == ca.cert.read_text()
    assert security.tls.cert_chain_pem == (
        (ca.directory / "client.pem").read_text() + ca.cert.read_text()
    )
    with pytest.raises(ClientPropertiesError, match=r"^ssl.keystore.location: .*password opens"):
        client_security(props | {"ssl.keystore.password": "wrong"})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"ssl.truststore.location": "/t.jks"},
            "ssl.truststore.type: JKS (Kafka's default when unset) is not supported; convert it "
            "to PKCS12: keytool -importkeystore",
        ),
        (
            {"ssl.keystore.type": "jks", "ssl.keystore.location": "/k.jks"},
            "ssl.keystore.type: JKS is not supported; convert it to PKCS12",
        ),
        ({"ssl.truststore.type": "BKS"}, "ssl.truststore.type: BKS is not supported"),
        (
            {"ssl.truststore.type": "PEM", "ssl.truststore.location": "/nonexistent.pem"},
            "ssl.truststore.location: /nonexistent.pem: cannot read",
        ),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "ssl.cipher.suites: not supported"),
        ({"ssl.engine.factory.class": "com.example.E"}, "ssl.engine.factory.class: not supported"),
        (
            {"ssl.endpoint.identification.algorithm": "ldaps"},
            "ssl.endpoint.identification.algorithm: 'ldaps'",
        ),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.key": "x"},
            "ssl.keystore.certificate.chain and ssl.keystore.key go together",
        ),
    ],
)
def test_tls_settings_it_cannot_honour_are_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(ClientPropertiesError) as refused:
        client_security({"security.protocol": "SSL", **props})
    assert str(refused.value).startswith(message)


def test_a_wrong_key_password_names_the_key(ca: ThrowawayCa) -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": (ca.directory / "client.pem").read_text(),
        "ssl.keystore.key": (ca.directory / "client.key").read_text(),
        "ssl.key.password": "wrong",
    }
    with pytest.raises(ClientPropertiesError, match=r"^ssl.keystore.key: .* ssl.key.password"):
        client_security(props)


@pytest.mark.parametrize(
    "key",
    ["sasl.kerberos.service.name", "sasl.client.callback.handler.class", "security.providers"],
)
def test_security_keys_it_cannot_honour_are_refused(key: str) -> None:
    with pytest.raises(ClientPropertiesError, match=rf"^{key}: not supported"):
        client_security({"security.protocol": "PLAINTEXT", key: "x"})


def test_a_store_type_alone_means_no_store() -> None:
    security = client_security(
        {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.keystore.type": "PKCS12"}
    )
    assert security.tls is not None
    assert (security.tls.ca_pem, security.tls.cert_chain_pem) == (None, None)


def test_java_tuning_keys_are_ignored() -> None:
    props = {
        "client.id": "x",
        "request.timeout.ms": "1000",
        "ssl.trustmanager.algorithm": "PKIX",
        "sasl.login.refresh.window.factor": "0.8",
        "bootstrap.servers": "elsewhere:9092",
    }
    assert client_security(props).protocol == "PLAINTEXT"


# -- the ssl.SSLContext: a real handshake with a server that requires a client certificate


def handshake(ca: ThrowawayCa, client: ssl.SSLContext) -> dict[str, Any]:
    """The client certificate a TLS server for 127.0.0.1 saw, after `client` connected."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca.cert)
    server.load_cert_chain(ca.directory / "broker.pem", ca.directory / "broker.key")
    server.verify_mode = ssl.CERT_REQUIRED
    seen: dict[str, Any] = {}

    async def run() -> None:
        async def serve(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.update(writer.get_extra_info("peercert") or {})
            writer.close()

        listener = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
        port = listener.sockets[0].getsockname()[1]
        async with listener:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
            await reader.read()
            writer.close()

    asyncio.run(run())
    return seen


def test_the_context_trusts_the_ca_and_presents_the_client_certificate(ca: ThrowawayCa) -> None:
    security = client_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.cert),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": (ca.directory / "client.pem").read_text(),
            "ssl.keystore.key": (ca.directory / "client.key").read_text(),
            "ssl.key.password": "key-pw",
        }
    )
    assert security.tls is not None
    seen = handshake(ca, tls_context(security.tls))
    assert (("commonName", "client"),) in seen["subject"]


def test_without_the_ca_the_broker_is_not_trusted(ca: ThrowawayCa) -> None:
    security = client_security({"security.protocol": "SSL"})  # the system's CAs
    assert security.tls is not None
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        handshake(ca, tls_context(security.tls))
    # The explanation names the key to set in either spelling.
    explained = str(explain(refused.value, "127.0.0.1", 9093))
    assert "upstream.tls.ca_file" in explained and "ssl.truststore.*" in explained


def test_the_env_providers_allowlist_hides_other_variables() -> None:
    props = {
        "config.providers.env.param.allowlist.pattern": "KAFKA_.*",
        "a": "${env:KAFKA_PASSWORD}",
    }
    environ = {"KAFKA_PASSWORD": "p", "HOME": "/root"}
    assert resolve_providers(props, environ)["a"] == "p"
    with pytest.raises(ClientPropertiesError, match=r"^b: \$\{env:HOME\}: the environment has no"):
        resolve_providers({**props, "b": "${env:HOME}"}, environ)
