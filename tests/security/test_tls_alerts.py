"""A client the TLS listener refuses gets the alert a broker sends, and the proxy says why.

With `client_auth: required`, a client without a certificate used to see the connection just
close: Kafka's Java client took that for a network error and retried until its timeout,
where against a broker it fails at once with an SSL authentication error. The proxy logged
nothing. Checked with openssl s_client and Kafka's own Java tools.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.proxy_process import ProxyProcess
from tests.unit.proxy.tls_certs import TlsCerts, tls_certs_fixture  # noqa: F401

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE = 18300, 18310
# Against the proxy before this change, the Java client retried for its whole API timeout.
JAVA_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def tls_proxy(
    kafka: Any, tls_certs: TlsCerts, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("tls-alerts")
    tls = {
        "cert_file": str(tls_certs.server_cert),
        "key_file": str(tls_certs.server_key),
        "ca_file": str(tls_certs.ca),
        "client_auth": "required",
    }
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "listeners": {
                "tls": tls,
            }
        },
    )
    try:
        yield process
    finally:
        assert process.stop() == 0


def refusals(proxy: ProxyProcess) -> list[dict[str, Any]]:
    """The proxy's log lines for refused client handshakes."""
    lines = [json.loads(line) for line in proxy.log_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "client TLS handshake refused"]


def s_client(certs: TlsCerts, version: str) -> str:
    """openssl s_client without a client certificate, sending a line once connected."""
    done = subprocess.run(
        [
            *("openssl", "s_client", "-connect", f"127.0.0.1:{BOOTSTRAP_PORT}"),
            *("-CAfile", str(certs.ca), version, "-ign_eof"),  # read until the proxy closes
        ],
        check=False,
        input=b"\x00\x00\x00\x01x\n",
        capture_output=True,
        timeout=30,
    )
    return (done.stdout + done.stderr).decode(errors="replace")


@pytest.mark.parametrize(
    ("version", "alert"),
    [("-tls1_3", "alert certificate required"), ("-tls1_2", "alert handshake failure")],
)
def test_openssl_sees_the_alert_and_the_proxy_logs_it(
    tls_proxy: ProxyProcess, tls_certs: TlsCerts, version: str, alert: str
) -> None:
    before = len(refusals(tls_proxy))
    assert alert in s_client(tls_certs, version)
    # The proxy logs the refusal before it sends the alert: the line is there by now.
    new = refusals(tls_proxy)[before:]
    assert [line["reason"] for line in new] == ["PEER_DID_NOT_RETURN_A_CERTIFICATE"]
    assert new[0]["client"].startswith("127.0.0.1:")


def test_the_java_client_fails_with_an_ssl_error_instead_of_retrying(
    kafka: Any, tls_proxy: ProxyProcess, tls_certs: TlsCerts, tmp_path: Path
) -> None:
    settings = tmp_path / "client-ssl.properties"
    settings.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={tls_certs.ca}\n"
        f"default.api.timeout.ms={JAVA_TIMEOUT_MS}\n"
        f"request.timeout.ms={JAVA_TIMEOUT_MS}\n"
    )
    command = kafka.tool_command(
        "kafka-topics",
        *("--bootstrap-server", tls_proxy.bootstrap, "--list"),
        *("--command-config", str(settings)),
    )
    started = time.monotonic()
    limit = JAVA_TIMEOUT_MS / 1000 + 60
    done = subprocess.run(command, check=False, capture_output=True, timeout=limit)
    took = time.monotonic() - started
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode != 0
    assert "SslAuthenticationException" in output, output[-2000:]
    assert took < JAVA_TIMEOUT_MS / 1000, took  # failed on the alert, not on the timeout
