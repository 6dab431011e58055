"""TLS contexts rebuilt from their files: new connections get the new files, bad ones are
refused and the context in use stays."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from harness.secret_volume import SecretVolume
from harness.throwaway_ca import Issued, ThrowawayCa
from kafka_policy_proxy.proxy.config import TlsConfig
from kafka_policy_proxy.proxy.tls.client_side import server_context
from kafka_policy_proxy.proxy.tls.reloading import ReloadingContext
from tests.unit.proxy.tls.memory_handshake import handshake


def files(issued: Issued) -> dict[str, bytes]:
    return {"tls.crt": issued.cert.read_bytes(), "tls.key": issued.key.read_bytes()}


def serial(issued: Issued) -> int:
    return x509.load_pem_x509_certificate(issued.cert.read_bytes()).serial_number


def reloads(result: str) -> float:
    value = REGISTRY.get_sample_value(
        "kpp_tls_reloads_total", {"side": "listener", "result": result}
    )
    return value or 0.0


@pytest.fixture
def ca(tmp_path: Path) -> ThrowawayCa:
    return ThrowawayCa(tmp_path / "ca")


@pytest.fixture
def volume(tmp_path: Path, ca: ThrowawayCa) -> SecretVolume:
    return SecretVolume(tmp_path / "secret", files(ca.issue("first", server=True)))


@pytest.fixture
def live(volume: SecretVolume) -> ReloadingContext:
    tls = TlsConfig(cert_file=volume.path("tls.crt"), key_file=volume.path("tls.key"))
    paths = [volume.path("tls.crt"), volume.path("tls.key")]
    return ReloadingContext(
        "listener", lambda: server_context(tls), paths, tls.cert_file.read_bytes
    )


def served_serial(live: ReloadingContext, ca: ThrowawayCa) -> int:
    client = ssl.create_default_context(cafile=ca.cert)
    _, seen = handshake(live.context, client, "127.0.0.1")
    der = seen.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_swapped_secret_is_seen_and_served_to_new_connections(
    live: ReloadingContext, volume: SecretVolume, ca: ThrowawayCa
) -> None:
    first = served_serial(live, ca)
    assert not live.changed()
    renewed = ca.issue("renewed", server=True)
    volume.update(files(renewed))  # the kubelet's ..data swap: the paths stay the same
    assert live.changed()
    ok = reloads("ok")
    assert live.reload()
    assert reloads("ok") == ok + 1
    assert not live.changed()
    assert served_serial(live, ca) == serial(renewed) != first
    expiry = REGISTRY.get_sample_value(
        "kpp_tls_certificate_expiry_timestamp_seconds", {"side": "listener"}
    )
    not_after = x509.load_pem_x509_certificate(renewed.cert.read_bytes()).not_valid_after_utc
    assert expiry == not_after.timestamp()


def test_a_connection_opened_before_keeps_its_context(
    live: ReloadingContext, volume: SecretVolume, ca: ThrowawayCa
) -> None:
    client = ssl.create_default_context(cafile=ca.cert)
    before, _ = handshake(live.context, client, "127.0.0.1")
    volume.update(files(ca.issue("renewed", server=True)))
    live.reload()
    after, _ = handshake(live.context, client, "127.0.0.1")
    assert before.context is not after.context
    assert after.context is live.current


@pytest.mark.parametrize("bad", ["mismatched key", "expired", "empty certificate"])
def test_bad_new_files_are_refused_and_the_old_context_stays(
    bad: str, live: ReloadingContext, volume: SecretVolume, ca: ThrowawayCa
) -> None:
    in_use, first = live.current, served_serial(live, ca)
    if bad == "mismatched key":
        new = files(ca.issue("a", server=True)) | {
            "tls.key": ca.issue("b", server=True).key.read_bytes()
        }
    elif bad == "expired":
        new = files(ca.issue("old", server=True, expired=True))
    else:
        new = files(ca.issue("c", server=True)) | {"tls.crt": b""}
    volume.update(new)
    failed = reloads("failed")
    with capture_logs() as logs:
        assert not live.reload()
    assert reloads("failed") == failed + 1
    assert live.current is in_use
    assert served_serial(live, ca) == first
    assert logs[0]["log_level"] == "error"
    assert str(volume.directory) in logs[0]["detail"]  # the file is named
    # Not retried, and not logged again, until a file changes again.
    assert not live.changed()


def test_a_file_missing_for_a_moment_is_refused_then_taken_when_back(
    live: ReloadingContext, volume: SecretVolume, ca: ThrowawayCa
) -> None:
    volume.path("tls.key").rename(volume.directory / "moved")
    assert live.changed()
    assert not live.reload()
    (volume.directory / "moved").rename(volume.path("tls.key"))
    volume.update(files(renewed := ca.issue("renewed", server=True)))
    assert live.changed() and live.reload()
    assert served_serial(live, ca) == serial(renewed)
