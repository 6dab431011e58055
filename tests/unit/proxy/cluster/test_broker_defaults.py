"""Broker configs become the topic defaults a new topic would get."""

from __future__ import annotations

from kafka_policy_proxy.policy.config_synonyms import TOPIC_CONFIG_SYNONYMS
from kafka_policy_proxy.proxy.cluster.broker_defaults import TOPIC_ONLY_DEFAULTS, topic_defaults


def test_retention_ms_prefers_ms_then_minutes_then_hours() -> None:
    hours = {"log.retention.hours": "168", "log.retention.minutes": None}
    assert topic_defaults(hours)["retention.ms"] == "604800000"
    minutes = {**hours, "log.retention.minutes": "90"}
    assert topic_defaults(minutes)["retention.ms"] == "5400000"
    millis = {**minutes, "log.retention.ms": "1234"}
    assert topic_defaults(millis)["retention.ms"] == "1234"


def test_negative_retention_means_forever() -> None:
    assert topic_defaults({"log.retention.hours": "-1"})["retention.ms"] == "-1"
    assert topic_defaults({"log.retention.minutes": "-5"})["retention.ms"] == "-1"


def test_roll_hours_and_flush_scheduler_fill_in_for_unset_millis() -> None:
    defaults = topic_defaults(
        {
            "log.roll.ms": None,
            "log.roll.hours": "2",
            "log.roll.jitter.hours": "1",
            "log.flush.interval.ms": None,
            "log.flush.scheduler.interval.ms": "3000",
        }
    )
    assert defaults["segment.ms"] == "7200000"
    assert defaults["segment.jitter.ms"] == "3600000"
    assert defaults["flush.ms"] == "3000"


def test_broker_names_become_topic_names_and_others_are_dropped() -> None:
    defaults = topic_defaults(
        {
            "log.cleanup.policy": "compact,delete",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "message.max.bytes": "2000000",
            "min.insync.replicas": "2",
            "num.partitions": "6",
            "default.replication.factor": "3",
            "log.dirs": "/data",
            "num.io.threads": "8",
        }
    )
    assert defaults == {
        **TOPIC_ONLY_DEFAULTS,
        "cleanup.policy": "compact,delete",
        "min.cleanable.dirty.ratio": "0.25",
        "max.message.bytes": "2000000",
        "min.insync.replicas": "2",
        "num.partitions": "6",
        "default.replication.factor": "3",
    }


def test_every_broker_synonym_belongs_to_one_topic_config() -> None:
    owners = [broker for synonyms in TOPIC_CONFIG_SYNONYMS.values() for broker, _ in synonyms]
    assert len(owners) == len(set(owners))
    assert not set(TOPIC_ONLY_DEFAULTS) & set(TOPIC_CONFIG_SYNONYMS)
