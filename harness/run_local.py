"""`make run`: a local 3-broker Kafka cluster plus the proxy with the example config.

Run as `python -m harness.run_local` from the checkout. Prints the bootstrap.servers to use
on a line of its own, stays in the foreground, and on Ctrl-C or SIGTERM stops the proxy and
the cluster it started.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

from harness import REPO
from harness.local_kafka import LocalKafka, LocalKafkaError

CONFIG = REPO / "examples" / "proxy.yaml"
PROXY_BOOTSTRAP = "127.0.0.1:9192"


def main() -> int:
    """Start the cluster and the proxy; stop both on a signal."""
    cluster = LocalKafka(REPO / ".kafka", brokers=3, port_base=19092)
    started_cluster = not cluster.is_running()
    try:
        cluster.up(timeout=180)
    except LocalKafkaError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return exc.exit_code
    proxy = subprocess.Popen(
        [str(Path(sys.executable).parent / "kafka-policy-proxy"), "run", "--config", str(CONFIG)]
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"Kafka {cluster.kafka_version} brokers: {cluster.bootstrap_servers}", file=sys.stderr)
    print("Point clients at the proxy (Ctrl-C stops the proxy and the cluster):", file=sys.stderr)
    print(PROXY_BOOTSTRAP, flush=True)
    while not stop.wait(0.5):
        if proxy.poll() is not None:
            print(f"run: the proxy exited with {proxy.returncode}", file=sys.stderr)
            break
    if proxy.poll() is None:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(60)
    if started_cluster:
        cluster.down()
    return 0 if stop.is_set() else 1


if __name__ == "__main__":
    sys.exit(main())
