"""Attack: blow up /metrics with request labels a client chooses.

Request counters used to be labelled with the key and version a request named, before the
version check: 32,000 ApiVersions requests with random versions and 3,000 unknown API keys
made 35,000 permanent label sets, a 6.0 MB /metrics and a 1.27 s scrape on the proxy's event
loop. The same flood, through a real proxy in front of the real cluster, must leave /metrics
within a few kilobytes of where it started, and its scrape quick.
"""

from __future__ import annotations

import random
import socket
import statistics
import struct
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.api_versions import proxy_range
from kafka_policy_proxy.codec.registry import request_class

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 18000, 18010, 18020
# The flood was 32,000 versions and 3,000 unknown keys (measured so, see
# docs/benchmarks.md); a quarter of each is enough to add thousands of label sets to the old
# proxy, and keeps the suite's flood short.
VERSIONS, UNKNOWN_KEYS = 8_000, 800
# What the flood may add to /metrics: a label set per version the proxy handles, one `other`
# per key and one for unknown keys; the flood added 6 MB.
GROWTH_BOUND = 16 * 1024
SCRAPE_BOUND_S = 0.5  # the issue measured 1.27 s after the flood


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("cardinality")
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={"admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT}},
    )
    try:
        yield process
    finally:
        assert process.stop() == 0


def metrics_page() -> tuple[bytes, float]:
    """/metrics and how long it took to fetch."""
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/metrics", timeout=30) as answer:
        body = answer.read()
    return body, time.perf_counter() - start


def api_versions_frame(version: int, correlation_id: int) -> bytes:
    """An ApiVersions request of any version: header v1 (KIP-511 asks brokers to read an
    unknown version's header that way), no body."""
    header = struct.pack(">hhih", 18, version, correlation_id, 1) + b"t"
    return struct.pack(">i", len(header)) + header


def flood_versions(bootstrap: str, rng: random.Random, low: int) -> None:
    """Pipelined ApiVersions with random versions from `low` up (ones the proxy does not
    handle: any other would need a well-formed body), each answered."""
    host, port = bootstrap.split(":")
    wire = WireClient(host, int(port), timeout=30)
    try:
        for start in range(0, VERSIONS, 500):
            batch = range(start, min(start + 500, VERSIONS))
            frames = (api_versions_frame(rng.randrange(low, 32_768), i) for i in batch)
            wire.send_raw(b"".join(frames))
            for i in batch:
                assert struct.unpack_from(">i", wire.read_frame())[0] == i
    finally:
        wire.close()


def flood_unknown_keys(rng: random.Random) -> None:
    """Requests with API keys the proxy does not know, one connection each (each is closed)."""
    for i in range(UNKNOWN_KEYS):
        key = rng.choice([rng.randrange(93, 32_768), -rng.randrange(1, 32_769)])
        header = struct.pack(">hhih", key, rng.randrange(32_768), i, 1) + b"t"
        with socket.create_connection(("127.0.0.1", BOOTSTRAP_PORT), timeout=10) as sock:
            sock.sendall(struct.pack(">i", len(header)) + header)
            sock.settimeout(10)
            assert sock.recv(1) == b""  # closed, as a broker closes on a key it lacks


def test_random_versions_and_unknown_keys_leave_metrics_bounded(proxy: ProxyProcess) -> None:
    rng = random.Random(31)
    span = proxy_range(18)
    assert span is not None
    # The label sets the flood may legitimately make, made first: every version the proxy
    # handles (well formed: the broker closes on a malformed one), and one it does not.
    host, port = proxy.bootstrap.split(":")
    wire = WireClient(host, int(port))
    try:
        for version in range(span[0], span[1] + 1):
            cls = request_class(18, version)
            request = build(cls, client_software_name="t", client_software_version="1")
            assert int(wire.request(request).error_code) == 0
        wire.send_raw(api_versions_frame(span[1] + 1, 99))
        assert struct.unpack_from(">i", wire.read_frame())[0] == 99
    finally:
        wire.close()
    before, _ = metrics_page()
    flood_versions(proxy.bootstrap, rng, span[1] + 1)
    flood_unknown_keys(rng)
    after, _ = metrics_page()
    times = [metrics_page()[1] for _ in range(5)]
    assert proxy.alive()
    print(f"/metrics {len(before)} -> {len(after)} bytes, scrape median {statistics.median(times)}")
    assert len(after) - len(before) < GROWTH_BOUND, (len(before), len(after))
    assert b'api_version="other"' in after
    assert statistics.median(times) < SCRAPE_BOUND_S, times
