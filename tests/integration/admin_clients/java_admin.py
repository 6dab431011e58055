"""The Java AdminClient, driven through one long-lived AdminOps.java process."""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.local_kafka import java_executable
from tests.integration.admin_clients.interface import AdminHarness
from tests.integration.admin_clients.model import (
    AdminHarnessError,
    ConfigOp,
    ConfigValue,
    NewTopicSpec,
    PartitionIncrease,
    TopicInfo,
    TopicOutcome,
    kafka_uuid,
    parse_kafka_uuid,
)

ADMIN_OPS = Path(__file__).resolve().parents[1] / "java" / "AdminOps.java"
# Above the Java AdminClient's default.api.timeout.ms (60 s), so that its own timeouts win.
JAVA_REPLY_TIMEOUT = 90.0
# Short-lived JVM: C1 only and the serial collector start about twice as fast.
JAVA_OPTS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class JavaAdmin(AdminHarness):
    """The Java AdminClient, through one long-lived AdminOps.java process."""

    name = "java"

    def __init__(
        self,
        bootstrap: str,
        classpath: str,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        java = java_executable()
        # Lives as long as the JVM; close() closes it.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            [java, *JAVA_OPTS, "-cp", classpath, str(ADMIN_OPS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        threading.Thread(target=self._read_replies, daemon=True).start()
        try:
            self._call("configure", bootstrap=bootstrap, properties=dict(properties or {}))
        except BaseException:
            self.close()
            raise

    def _read_replies(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._replies.put(line)
        self._replies.put(None)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def _call(self, op: str, **fields: Any) -> list[dict[str, Any]]:
        with self._lock:
            request_id = next(self._ids)
            stdin = self._process.stdin
            if stdin is None or self._process.poll() is not None:
                raise AdminHarnessError(f"AdminOps is not running:\n{self._stderr_tail()}")
            stdin.write(json.dumps({"id": request_id, "op": op, **fields}) + "\n")
            stdin.flush()
            deadline = time.monotonic() + JAVA_REPLY_TIMEOUT
            while True:
                try:
                    line = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise AdminHarnessError(
                        f"AdminOps gave no answer to {op} within {JAVA_REPLY_TIMEOUT:.0f} s"
                    ) from None
                if line is None:
                    raise AdminHarnessError(f"AdminOps exited during {op}:\n{self._stderr_tail()}")
                reply = json.loads(line)
                # A reply to an earlier call that timed out is skipped.
                if reply.get("id") == request_id:
                    break
        if not reply["ok"]:
            raise AdminHarnessError(f"{op}: {reply['error']}: {reply['message']}")
        results: list[dict[str, Any]] = reply["results"]
        return results

    @staticmethod
    def _outcomes(results: list[dict[str, Any]]) -> list[TopicOutcome]:
        return [
            TopicOutcome(r["topic"], True)
            if r["ok"]
            else TopicOutcome(r["topic"], False, r.get("kafka_error") or r["error"], r["message"])
            for r in results
        ]

    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""
        specs = [
            {
                "name": t.name,
                "partitions": t.partitions,
                "replication_factor": t.replication_factor,
                "assignment": None
                if t.assignment is None
                else {str(p): list(replicas) for p, replicas in enumerate(t.assignment)},
                "configs": dict(t.configs),
            }
            for t in topics
        ]
        return self._outcomes(
            self._call("create_topics", topics=specs, validate_only=validate_only)
        )

    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""
        specs = [
            {
                "name": i.topic,
                "total": i.total,
                "assignment": None if i.assignment is None else [list(r) for r in i.assignment],
            }
            for i in increases
        ]
        return self._outcomes(
            self._call("create_partitions", topics=specs, validate_only=validate_only)
        )

    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""
        resources = [
            {"topic": topic, "ops": [{"name": o.name, "op": o.op, "value": o.value} for o in ops]}
            for topic, ops in changes.items()
        ]
        return self._outcomes(
            self._call(
                "incremental_alter_configs", resources=resources, validate_only=validate_only
            )
        )

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[TopicOutcome]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas, or None to cancel."""
        partitions = [
            {"topic": t, "partition": p, "replicas": None if r is None else list(r)}
            for (t, p), r in reassignments.items()
        ]
        return self._outcomes(self._call("alter_partition_reassignments", partitions=partitions))

    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""
        return self._outcomes(self._call("delete_topics", names=list(names)))

    def delete_topics_by_id(self, ids: Sequence[uuid.UUID]) -> list[TopicOutcome]:
        """DeleteTopics by topic id; each outcome's `topic` is `str(id)`."""
        results = self._call("delete_topics", ids=[kafka_uuid(i) for i in ids])
        for result in results:
            result["topic"] = str(parse_kafka_uuid(result["topic"]))
        return self._outcomes(results)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""
        partitions = [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]
        return self._outcomes(self._call("delete_records", partitions=partitions))

    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""
        described: dict[str, TopicInfo] = {}
        for r in self._call("describe_topics", names=list(names)):
            if r["ok"]:
                described[r["topic"]] = TopicInfo(
                    r["topic"],
                    parse_kafka_uuid(r["topic_id"]),
                    {int(p): replicas for p, replicas in r["partitions"].items()},
                    {k: ConfigValue(v["value"], v["source"]) for k, v in r["configs"].items()},
                )
            elif r.get("kafka_error") != "UNKNOWN_TOPIC_OR_PARTITION":
                raise AdminHarnessError(f"describe {r['topic']}: {r['error']}: {r['message']}")
        return described

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic `name`, or None if it does not exist."""
        (result,) = self._call("topic_id", name=name)
        if result["ok"]:
            return parse_kafka_uuid(result["topic_id"])
        if result.get("kafka_error") == "UNKNOWN_TOPIC_OR_PARTITION":
            return None
        raise AdminHarnessError(f"topic_id {name}: {result['error']}: {result['message']}")

    def close(self) -> None:
        """Stop the JVM (closing stdin ends its loop); safe to call twice."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()
