"""Reading a decision record's `request` back, fast: what replay does for every recorded event.

The writer is `policy.decision_log`: a record's `request` is a topic request
(`TopicRequest.to_dict()`), an admin API call (`AdminRequest.to_dict()`, first key `api`), a
change of a config resource that is not a topic (`BrokerConfigRequest.to_dict()`, first key
`config_resource`), a request refused before any judgement (`refusal_record`, first key
`refused`) or a summary of a request's many topics (`summary_record`, first key
`summarised`). `RequestReader.read` tells them apart by that first key and gives the request
`from_dict` gives, parsing the parts that recur across events once. `RequestReader.topic`
builds the same topic request from the lake's typed columns
(`pipeline.sources.typed_requests`), whose requested and current states are JSON text. Pure:
no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka_policy_proxy.policy.admin_apis import AdminRequest
from kafka_policy_proxy.policy.broker_configs import BrokerConfigRequest
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    Principal,
    RequestedState,
    TopicRequest,
    TopicState,
)

_REQUESTED = ',"requested":'
_CURRENT = ',"current":'
_NO_OFFSETS = ',"record_offsets":[]}'
# Enum lookups by value without EnumType.__call__, which costs more than the rest of a field.
_ACTIONS = {a.value: a for a in Action}
_ALTER_KINDS = {k.value: k for k in AlterKind}
_ADMIN_API = '{"api":'  # an admin API call's request (`AdminRequest.to_dict()`)
_REFUSED = '{"refused":'  # a request refused before any judgement (`refusal_record`)
_SUMMARISED = '{"summarised":'  # a request's many topics, summarised (`summary_record`)
# A non-topic config resource's request (`BrokerConfigRequest.to_dict()`, then rules, outside).
_BROKER_CONFIG = '{"config_resource":'

_Value = TypeVar("_Value")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the proxy refused before any judgement: its SASL exchange was unfinished."""

    api: str
    sasl_state: str


@dataclass(frozen=True, slots=True)
class Summarised:
    """A request's topic decisions recorded as counts only: its topics cannot be replayed."""

    api: str
    topics: int


# A topic request's typed fields: topic, topic_id, action, alter_kind, principal (name,
# client_id, address), validate_only, requested and current (JSON text), record_offsets.
TopicFields = tuple[
    str | None,
    str | None,
    str,
    str | None,
    tuple[str, str, str],
    bool,
    str,
    str | None,
    tuple[tuple[int, int], ...],
]
RecordedRequest = TopicRequest | AdminRequest | BrokerConfigRequest | Refusal | Summarised


class RequestReader:
    """Request JSON text -> the request, parsing each distinct requested and current state once.

    Most of a topic request's text is its requested and current states, and few distinct ones
    recur across many events. The proxy writes the keys in `TopicRequest.to_dict()` order, so
    these parts are cut out of the text at their keys and parsed once per distinct text
    (bounded caches). A cut is trusted only if each part parses as exactly one JSON object (a
    cut inside a value leaves unbalanced braces); anything else (another key order, extra
    keys, record offsets) is parsed whole by `TopicRequest.from_dict`, which gives the same
    request.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._requested: dict[str, RequestedState] = {}
        self._current: dict[str, TopicState | None] = {"null": None}

    def read(self, text: str) -> RecordedRequest:
        """One recorded request's JSON text, of whichever kind its first key says."""
        if text.startswith(_REFUSED):
            refused = json_object(text)
            return Refusal(refused["api"], refused["sasl_state"])
        if text.startswith(_SUMMARISED):
            summarised = json_object(text)
            return Summarised(summarised["api"], summarised["summarised"])
        if text.startswith(_ADMIN_API):
            return AdminRequest.from_dict(json_object(text))
        if text.startswith(_BROKER_CONFIG):
            return BrokerConfigRequest.from_dict(json_object(text))
        return self.topic_request(text)

    def topic_request(self, text: str) -> TopicRequest:
        """A topic request's JSON text."""
        if text.endswith(_NO_OFFSETS):
            end = len(text) - len(_NO_OFFSETS)
            at_current = text.rfind(_CURRENT, 0, end)
            at_requested = text.rfind(_REQUESTED, 0, at_current)
            if at_requested > 0:
                try:
                    head = json_object(text[:at_requested] + "}")
                    requested = self._requested_state(
                        text[at_requested + len(_REQUESTED) : at_current]
                    )
                    current = self._current_state(text[at_current + len(_CURRENT) : end])
                    # The other fields as TopicRequest.from_dict reads them.
                    kind = head.get("alter_kind")
                    return TopicRequest(
                        topic=head.get("topic"),
                        action=_ACTIONS[head["action"]],
                        principal=Principal.from_dict(head.get("principal") or {}),
                        topic_id=head.get("topic_id"),
                        alter_kind=None if kind is None else _ALTER_KINDS[kind],
                        validate_only=head.get("validate_only", False),
                        requested=requested,
                        current=current,
                    )
                except (ValueError, TypeError, AttributeError, KeyError):
                    pass  # not cut at the top-level keys, or not valid: parse it whole
        return TopicRequest.from_dict(json.loads(text))

    def topic(self, fields: TopicFields) -> TopicRequest:
        """A topic request from its typed fields, as `topic_request` reads its text."""
        topic, topic_id, action, alter_kind, principal, validate_only, requested, current, spots = (
            fields
        )
        kind = None
        if alter_kind is not None:
            kind = _ALTER_KINDS[alter_kind] if alter_kind in _ALTER_KINDS else AlterKind(alter_kind)
        return TopicRequest(
            topic=topic,
            action=_ACTIONS[action] if action in _ACTIONS else Action(action),
            principal=Principal(*principal),
            topic_id=topic_id,
            alter_kind=kind,
            validate_only=validate_only,
            requested=self._requested_state(requested),
            current=None if current is None else self._current_state(current),
            record_offsets=tuple((int(p), int(o)) for p, o in spots),
        )

    def _requested_state(self, text: str) -> RequestedState:
        requested = self._requested.get(text)
        if requested is None:
            requested = RequestedState.from_dict(json_object(text))
            self._store(self._requested, text, requested)
        return requested

    def _current_state(self, text: str) -> TopicState | None:
        try:
            return self._current[text]
        except KeyError:
            current = TopicState.from_dict(json_object(text))
            self._store(self._current, text, current)
            return current

    def _store(self, cache: dict[str, _Value], key: str, value: _Value) -> None:
        if len(cache) >= self._size:
            cache.clear()  # a new working set: start over rather than track recency
        cache[key] = value


def json_object(text: str) -> dict[str, Any]:
    """The JSON object `text` holds; TypeError if it holds anything else."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    return data
