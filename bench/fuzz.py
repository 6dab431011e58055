"""Fuzz bench: mutated golden frames and random frames through a proxy that denies every mutation.

Usage: python -m bench.fuzz [--cases N] [--concurrency C] [--batch K] [--seed S]
       python -m bench.fuzz --replay fuzz-hangs/hangs-0.bin ...  (one saved batch at a time)
       python -m bench.fuzz --shapes [--shape-connections N] [--shape-frame-mib M]
Starts its own cluster (ports 25092+) and proxy (25400+; node N on 25500 + N) with a policy
that denies every topic mutation (admin APIs are denied by default). Each connection carries a
batch of cases and then a sentinel Metadata request: the batch is over when the sentinel is
answered or the proxy closes the connection (a malformed case does); cases after the one that
closed it go again on a new connection. Counted: proxy crashes (process exit), hangs (neither
an answer nor a close within --timeout; the batch is saved), and mutations that reached the
broker (read directly before and after: topics, partition counts, topic and broker configs,
ACLs). The proxy's RSS is sampled throughout. Not run in CI.

`--shapes` instead sends the fixed hostile shapes of bench/fuzz_shapes.py (issue 31: N
connections stalled in large frames; DeleteTopics v5 of 1,048,576 empty names; CreateTopics of
100,000 topics; DeleteTopics v6 of 2,000 random ids) to a proxy with the default limits
(frames up to 100 MiB), beside a canary, and reports how each was dealt with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import struct
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from bench.fuzz_shapes import run_shapes
from harness.local_kafka import LocalKafka
from harness.messages import metadata_request
from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import encode

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "golden"
CLUSTER_PORT_BASE, PROXY_PORT, NODE_PORT_BASE = 25092, 25400, 25500
MAX_FRAME = 1 << 20
DENY_ALL = """\
version: 1
rules:
  - name: deny-everything
    deny: true
    message: the fuzz bench allows no mutation
"""
# Topics the golden frames alter or delete exist, so that a mutation that got through shows.
SEED_TOPICS = ["ck-plain", "ck-configs", "java-plain", "java-configs", "kp-plain", "kp-configs"]
SENTINEL_ID = 0x7FFF_FFF0
INTERESTING_16 = [0, 1, -1, 0x7FFF, -0x8000, 0xFF]
INTERESTING_32 = [0, 1, -1, 0x7FFF_FFFF, -0x8000_0000, 0xFFFF, 1 << 20]


def golden_frames() -> list[bytes]:
    """The recorded client requests (header and body, no size prefix)."""
    manifest = json.loads((GOLDEN / "manifest.json").read_text())
    return [(GOLDEN / entry["request"]).read_bytes() for entry in manifest]


def mutate(rng: random.Random, frames: list[bytes]) -> bytes:
    """One case: a golden frame mutated, or a random frame; the size prefix included."""
    kind = rng.randrange(10)
    if kind == 9:
        body = rng.randbytes(rng.randrange(200))
        # Header v1 or v2 (an empty tag buffer), for any API key and version, known or not.
        header = struct.pack(">hhih", rng.randrange(90), rng.randrange(20), 1, 4) + b"fuzz"
        data = bytearray(header + b"\0" * rng.randrange(2) + body)
    else:
        # Most cases change one value and keep the frame's structure, so that they reach the
        # judge; the rest change the structure too (and mostly close the connection).
        data = bytearray(rng.choice(frames))
        if kind < 6:
            _mutate_once(rng, data, frames, ops=4)
        else:
            for _ in range(rng.randrange(1, 4)):
                _mutate_once(rng, data, frames)
    if len(data) >= 8:
        data[4:8] = b"\0\0\0\0"  # the correlation id is set per connection
    if rng.randrange(200) == 0:  # a bad size: the connection must close
        size = rng.choice([-1, -0x8000_0000, MAX_FRAME + 1, 0x7FFF_FFFF])
        return struct.pack(">i", size) + bytes(data)
    return struct.pack(">i", len(data)) + bytes(data)


def _mutate_once(rng: random.Random, data: bytearray, frames: list[bytes], ops: int = 8) -> None:
    n = len(data)
    op = rng.randrange(ops)
    at = rng.randrange(n) if n else 0
    if op == 0 and n:
        data[at] ^= 1 << rng.randrange(8)
    elif op == 1 and n:
        data[at] = rng.choice((0, 0xFF, 0x7F, 0x80))
    elif op == 2 and n >= 2:
        at = min(at, n - 2)
        data[at : at + 2] = struct.pack(">h", rng.choice(INTERESTING_16))
    elif op == 3 and n >= 4:
        at = min(at, n - 4)
        data[at : at + 4] = struct.pack(">i", rng.choice(INTERESTING_32))
    elif op == 4:
        del data[at:]
    elif op == 5:
        data[at:at] = rng.randbytes(rng.randrange(1, 16))
    elif op == 6 and n:
        other = rng.choice(frames)
        cut = rng.randrange(len(other))
        data[at:] = other[cut:]
    elif op == 7 and n >= 4:
        data[2:4] = struct.pack(">h", rng.randrange(-1, 20))  # another api version


def numbered(frame: bytes, correlation_id: int) -> bytes:
    """The case with its correlation id (when it is long enough to have one)."""
    if len(frame) >= 12:
        return frame[:8] + struct.pack(">i", correlation_id) + frame[12:]
    return frame


class Fuzzer:
    """Sends cases over many connections at once; counts what happened."""

    def __init__(self, cases: Iterator[bytes], ports: list[int], timeout: float) -> None:
        body = request_header(3, 12, SENTINEL_ID, "fuzz") + encode(metadata_request(()))
        self.sentinel = struct.pack(">i", len(body)) + body  # Metadata for no topics
        self.cases = cases
        self.ports = ports
        self.timeout = timeout
        self.retry: list[bytes] = []
        self.done = 0
        self.connections = 0
        self.answered = 0
        self.closed = 0
        self.hangs: list[list[bytes]] = []
        # What a crash may have been caused by: the batches in flight, and those just closed.
        self.inflight: dict[int, list[bytes]] = {}
        self.recent: deque[list[bytes]] = deque(maxlen=256)
        self.connect_errors = 0

    def take(self, k: int) -> list[bytes]:
        batch = self.retry[:k]
        del self.retry[:k]
        while len(batch) < k:
            try:
                batch.append(next(self.cases))
            except StopIteration:
                break
        return batch

    async def worker(self, rng: random.Random, batch_size: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            batch = self.take(batch_size)
            if not batch:
                return
            await self.run_batch(rng.choice(self.ports), batch)

    async def run_batch(self, port: int, batch: list[bytes]) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            self.connect_errors += 1
            self.retry += batch
            await asyncio.sleep(0.1)
            return
        self.connections += 1
        self.inflight[id(batch)] = batch
        writer.writelines([numbered(f, i + 1) for i, f in enumerate(batch)] + [self.sentinel])
        last = 0  # the highest case answered
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    frame = await reader.readexactly(size)
                    correlation_id = struct.unpack_from(">i", frame)[0]
                    if correlation_id == SENTINEL_ID:
                        self.done += len(batch)
                        self.answered += len(batch)
                        return
                    last = max(last, correlation_id)
        except (asyncio.IncompleteReadError, ConnectionError):
            # Closed by the proxy: cases up to the one after the last answer were evaluated.
            evaluated = min(len(batch), last + 1)
            self.done += evaluated
            self.closed += 1
            self.recent.append(batch)
            self.retry += batch[evaluated:]
        except TimeoutError:
            self.hangs.append(batch)
            self.done += len(batch)
        finally:
            self.inflight.pop(id(batch), None)
            writer.close()


def broker_state(admin: AdminClient) -> dict[str, Any]:
    """What a mutation could change, read from the brokers directly."""
    metadata = admin.list_topics(timeout=30)
    topics = {
        name: len(t.partitions)
        for name, t in metadata.topics.items()
        if not name.startswith("__")  # internal topics appear on first use, not by request
    }
    names = {ConfigResource("topic", name): f"topic:{name}" for name in topics}
    batches = [list(names)]
    for broker in metadata.brokers:  # one broker resource per call
        resource = ConfigResource("broker", str(broker))
        names[resource] = f"broker:{broker}"
        batches.append([resource])
    configs = {}
    for batch in batches:
        for resource, future in admin.describe_configs(batch).items():
            entries = future.result(30)
            configs[names[resource]] = {k: v.value for k, v in entries.items() if not v.is_default}
    try:
        any_acl = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        acls: Any = sorted(str(a) for a in admin.describe_acls(any_acl).result(30))
    except Exception as exc:  # no authorizer configured: the broker refuses to list ACLs
        acls = f"unavailable: {type(exc).__name__}"
    return {"topics": topics, "configs": configs, "acls": acls}


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed on the broker, one line per topic, config resource or the ACL list."""
    changes = []
    for key in sorted(set(before["topics"]) | set(after["topics"])):
        if before["topics"].get(key) != after["topics"].get(key):
            was, now = before["topics"].get(key), after["topics"].get(key)
            changes.append(f"topic {key}: partitions {was} -> {now}")
    for resource in sorted(set(before["configs"]) | set(after["configs"])):
        was, now = before["configs"].get(resource, {}), after["configs"].get(resource, {})
        for key in sorted(set(was) | set(now)):
            if was.get(key, "(absent)") != now.get(key, "(absent)"):
                changes.append(
                    f"config {resource} {key!r}: {was.get(key, '(absent)')} -> "
                    f"{now.get(key, '(absent)')}"
                )
    if before["acls"] != after["acls"]:
        changes.append(f"acls: {before['acls']} -> {after['acls']}")
    return changes


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks


def rss(pid: int) -> int:
    """The process's resident set size, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def fuzz(
    args: argparse.Namespace, proxies: list[ProxyProcess], restart: Callable[[], ProxyProcess]
) -> dict[str, Any]:
    """Run the cases; sample RSS; restart the proxy after a crash (kept in `proxies`)."""
    rng = random.Random(args.seed)
    frames = golden_frames()
    cases = (mutate(rng, frames) for _ in range(args.cases))
    ports = [PROXY_PORT, *(NODE_PORT_BASE + n for n in range(1, args.brokers + 1))]
    fuzzer = Fuzzer(cases, ports, args.timeout)
    stop = asyncio.Event()
    samples: list[tuple[float, int, int]] = []
    crashes: list[list[bytes]] = []  # per crash, the cases in flight when it happened
    start, next_sample = time.monotonic(), 0.0

    async def watch() -> None:
        nonlocal next_sample
        while not stop.is_set():
            proxy = proxies[-1]
            if not proxy.alive():
                suspects = [*fuzzer.recent, *fuzzer.inflight.values()]
                crashes.append([case for batch in suspects for case in batch])
                fuzzer.recent.clear()
                print(f"  proxy exited ({proxy.process.returncode}) after {fuzzer.done} cases")
                if len(crashes) >= args.max_crashes:
                    stop.set()
                    return
                proxies.append(await asyncio.to_thread(restart))
                continue
            if time.monotonic() >= next_sample:
                now = round(time.monotonic() - start, 1)
                samples.append((now, fuzzer.done, rss(proxy.process.pid)))
                print(f"  {now:7.1f}s {fuzzer.done:9d} cases  RSS {samples[-1][2]} KiB")
                next_sample = time.monotonic() + args.sample_s
            await asyncio.sleep(0.2)

    watcher = asyncio.ensure_future(watch())
    workers = [
        asyncio.ensure_future(fuzzer.worker(random.Random(i), args.batch, stop))
        for i in range(args.concurrency)
    ]
    await asyncio.gather(*workers)
    elapsed = time.monotonic() - start
    stop.set()
    await watcher
    proxy = proxies[-1]
    proxy_cpu = 0.0
    if proxy.alive():
        samples.append((round(elapsed, 1), fuzzer.done, rss(proxy.process.pid)))
        proxy_cpu = cpu_seconds(proxy.process.pid)
    return {
        "cases": fuzzer.done,
        "seconds": round(elapsed, 1),
        "cases_per_s": round(fuzzer.done / elapsed),
        "connections": fuzzer.connections,
        "last_proxy_cpu_s": round(proxy_cpu, 1),
        "batches_answered_whole": fuzzer.answered // max(args.batch, 1),
        "connections_closed_by_proxy": fuzzer.closed,
        "connect_errors": fuzzer.connect_errors,
        "crashes": len(crashes),
        "crash_cases": [b"".join(cases) for cases in crashes],
        "hangs": [b"".join(batch) for batch in fuzzer.hangs],
        "rss_kib": samples,
    }


async def replay(paths: list[Path], wait_s: float) -> list[dict[str, Any]]:
    """Send each saved batch alone (as the proxy got it, then the sentinel); time the answer."""
    results = []
    for path in paths:
        fuzzer = Fuzzer(iter(()), [PROXY_PORT], wait_s)
        start = time.monotonic()
        await fuzzer.run_batch(PROXY_PORT, [path.read_bytes()])
        outcome = "hang" if fuzzer.hangs else "answered" if fuzzer.answered else "closed"
        seconds = round(time.monotonic() - start, 2)
        results.append({"file": str(path), "outcome": outcome, "seconds": seconds})
    return results


def main() -> None:
    """Start the cluster and the proxy, fuzz, compare the broker before and after, report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument(
        "--hangs", default="fuzz-hangs", help="where hanging batches and crash suspects go"
    )
    parser.add_argument("--max-crashes", type=int, default=20, help="stop after this many")
    parser.add_argument(
        "--work", type=Path, help="work directory; a cluster running there is reused"
    )
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster running")
    parser.add_argument(
        "--replay", type=Path, nargs="+", help="send these saved batches alone instead of fuzzing"
    )
    parser.add_argument("--shapes", action="store_true", help="the hostile shapes, not fuzzing")
    parser.add_argument("--shape-connections", type=int, default=200)
    parser.add_argument("--shape-frame-mib", type=int, default=50)
    parser.add_argument("--shape-timeout", type=float, default=120.0)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kpp-fuzz-"))
    kafka = LocalKafka(work / "cluster", brokers=args.brokers, port_base=CLUSTER_PORT_BASE)
    kafka.up(timeout=180)
    proxy = None
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
        existing = admin.list_topics(timeout=30).topics
        seeds = [NewTopic(t, 1, 1) for t in SEED_TOPICS if t not in existing]
        if seeds:
            for future in admin.create_topics(seeds).values():
                future.result(60)
        policy = work / "deny-all.yaml"
        policy.write_text(DENY_ALL)

        # The shapes run against the default limits: they are what a deployment has.
        limits = (
            {} if args.shapes else {"max_frame_bytes": MAX_FRAME, "max_buffered_bytes": 64 << 20}
        )

        def start_proxy() -> ProxyProcess:
            return ProxyProcess(
                work,
                kafka.bootstrap_servers,
                PROXY_PORT,
                NODE_PORT_BASE,
                extra={"policy": {"file": str(policy), "watch": False}, "limits": limits},
            )

        proxies = [start_proxy()]
        proxy = proxies[0]
        if args.shapes:
            sentinel = Fuzzer(iter(()), [], 0).sentinel
            results = asyncio.run(
                run_shapes(PROXY_PORT, lambda: proxies[-1].process.pid, sentinel, args)
            )
            for line in results:
                print(json.dumps(line))
            return
        if args.replay:
            for _ in range(3):
                for line in asyncio.run(replay(args.replay, args.timeout)):
                    print(json.dumps(line))
            return
        before = broker_state(admin)
        result = asyncio.run(fuzz(args, proxies, start_proxy))
        proxy = proxies[-1]
        for kind in ("hangs", "crash_cases"):
            saved = result.pop(kind)
            result[kind if kind == "hangs" else "crashes_saved"] = len(saved)
            for i, data in enumerate(saved):
                Path(args.hangs).mkdir(parents=True, exist_ok=True)
                (Path(args.hangs) / f"{kind}-{i}.bin").write_bytes(data)
        # A fence: once a topic created now is visible, every earlier change is too (KRaft).
        fence = f"fuzz.fence-{time.time_ns()}"
        for future in admin.create_topics([NewTopic(fence, 1, 1)]).values():
            future.result(60)
        after = broker_state(admin)
        after["topics"].pop(fence, None)
        after["configs"].pop(f"topic:{fence}", None)
        changes = differences(before, after)
        result["mutations_reached_broker"] = len(changes)
        # Broker and cluster-default configs: the class the proxy judged last (broker_configs).
        result["of_which_broker_configs"] = sum(c.startswith("config broker:") for c in changes)
        result["changes"] = changes
        result["proxy_exit_on_sigterm"] = proxy.stop()
    finally:
        if proxy is not None and proxy.alive():
            proxy.stop()
        if not args.keep_cluster:
            kafka.down()
    rss_values = [s[2] for s in result["rss_kib"]]
    print(
        f"{result['cases']} cases in {result['seconds']} s ({result['cases_per_s']}/s), "
        f"{result['connections']} connections; crashes {result['crashes']}, hangs "
        f"{result['hangs']}, mutations {result['mutations_reached_broker']} (broker configs "
        f"{result['of_which_broker_configs']}); RSS KiB "
        f"first {rss_values[0]} max {max(rss_values)} last {rss_values[-1]}"
    )
    for change in result["changes"]:
        print(f"  changed on the broker: {change}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
