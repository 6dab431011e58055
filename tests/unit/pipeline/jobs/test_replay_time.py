"""Replay judges each event at its recorded time: an exception waives what it waived then."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa  # type: ignore[import-untyped]

from kafka_policy_proxy.pipeline.jobs.replay_batches import EPOCH, BatchJudge
from kafka_policy_proxy.pipeline.jobs.replay_evaluation import replay_batch
from kafka_policy_proxy.pipeline.jobs.replayer import Replayer
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal

EXPIRES = datetime(2026, 12, 1, tzinfo=UTC)
POLICY = load_policy(
    {
        "rules": [{"name": "small", "partitions": {"max": 10}}],
        "exceptions": [
            {
                "name": "wide",
                "match": {"principals": ["User:alice"]},
                "waive": ["small"],
                "reason": "r",
                "expires": "2026-12-01T00:00:00Z",
            }
        ],
    },
    "replay",
)
TEXT = json.dumps(create_request("t", 96, 3, principal=Principal("User:alice")).to_dict())


def micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def test_an_event_is_replayed_at_its_recorded_time() -> None:
    replayer = Replayer(POLICY, InMemoryCluster())
    before = EXPIRES - timedelta(microseconds=1)
    assert replayer.replay(TEXT, before)[:2] == ("allowed", [])
    assert replayer.replay(TEXT, EXPIRES)[:2] == ("denied", ["small"])
    assert replayer.replay(TEXT)[:2] == ("denied", ["small"])  # no time: nothing waived


def test_the_udf_batch_takes_each_events_time_in_epoch_microseconds() -> None:
    times = pa.array([micros(EXPIRES - timedelta(microseconds=1)), micros(EXPIRES)], pa.int64())
    judge = BatchJudge(Replayer(POLICY, InMemoryCluster()))
    result = replay_batch(judge, None, pa.array([TEXT, TEXT]), times)
    assert result.field("decision").to_pylist() == ["allowed", "denied"]
