"""Reading a record's request back: every kind of record by its first key, and a topic request
cut at its keys gives exactly what `from_dict` gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.audit_data import (
    admin_events,
    broker_config_events,
    example_cluster,
    generate_events,
    refused_record,
)
from kafka_policy_proxy.policy.admin_apis import AdminRequest
from kafka_policy_proxy.policy.broker_configs import BrokerConfigRequest
from kafka_policy_proxy.policy.decision_reader import Refusal, RequestReader
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import TopicRequest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "policy.yaml"
POLICY = load_policy(EXAMPLE.read_text(), str(EXAMPLE))


def _compact(request: dict[str, Any]) -> str:
    # As Spark hands a JSON object read as a string to the replay: no spaces.
    return json.dumps(request, separators=(",", ":"))


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return list(generate_events(POLICY, example_cluster(), 1500, seed=7))


def test_a_topic_request_reads_as_from_dict_reads_it(events: list[dict[str, Any]]) -> None:
    reader = RequestReader(size=16)  # small, so the caches are cleared and refilled too
    texts = [_compact(e["request"]) for e in events]
    request = events[0]["request"]
    tricky = [
        # Keys that look like the cut points, inside the parts that are cut.
        {**request, "requested": {**request["requested"], "configs": {"a": "1", "current": "x"}}},
        {**request, "requested": {**request["requested"], "configs": {"b": "2", "requested": "y"}}},
        {**request, "record_offsets": [[0, 5]]},
        {"current": None, **request},  # another key order
        {**request, "extra": 1},
    ]
    texts += [_compact(t) for t in tricky]
    for text in texts + texts:
        assert reader.topic_request(text) == TopicRequest.from_dict(json.loads(text)), text
        assert reader.read(text) == TopicRequest.from_dict(json.loads(text)), text


def test_each_kind_of_record_is_read_by_its_first_key() -> None:
    (admin,) = admin_events(POLICY, [("CreateAcls", "User:ops")])
    change = ("User:alice", "broker", "1", [("num.io.threads", "SET", "8")])
    (config,) = broker_config_events(POLICY, [change], example_cluster())
    refused = refused_record()
    reader = RequestReader()
    for text in (json.dumps(admin["request"]), _compact(admin["request"])):
        assert reader.read(text) == AdminRequest.from_dict(admin["request"]), text
    for text in (json.dumps(config["request"]), _compact(config["request"])):
        assert reader.read(text) == BrokerConfigRequest.from_dict(config["request"]), text
    assert reader.read(json.dumps(refused["request"])) == Refusal(
        "AlterUserScramCredentials", "never started"
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"refused": "authentication-order", "api": "Produce"}', KeyError),
        ('{"topic": "x"}', KeyError),
        ("not json", ValueError),
    ],
)
def test_a_request_that_is_not_of_its_kind_raises(text: str, error: type[Exception]) -> None:
    # The replay reports it as an error with the exception's name and message.
    with pytest.raises(error):
        RequestReader().read(text)
