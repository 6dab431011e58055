"""One line of an audit log: a good event, a blank line, an unknown schema version, or malformed.

The one definition of a bad line, used by every job (ingest, report, replay) so that they count
alike. The record's owner (`policy.decision_log.json_schema()`) decides every type, exactly:
nothing is coerced (a string `"true"` is not a boolean, a number is not a time), and a reason
names the field. Pure Python: Spark calls it per batch (`pipeline.sources.audit_events`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from kafka_policy_proxy.policy.decision_log import (
    NOT_TOPIC_ACTIONS,
    READABLE_VERSIONS,
    RESOURCE_FIELDS,
    SUMMARY_SCHEMA_VERSION,
    TRACE_FIELDS,
    ResourceType,
    json_schema,
)

BLANK = "blank"
MALFORMED = "malformed"
UNKNOWN_VERSION = "unknown_version"
KINDS = (BLANK, MALFORMED, UNKNOWN_VERSION)
SAMPLE_BYTES = 200
# The time as the proxy writes it and Spark parses it (`TIME_FORMAT`): microseconds, an offset.
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
_LONG = 2**63
# Python reads offsets up to ±23:59, Spark (java.time) up to ±18:00: the narrower decides.
_MAX_OFFSET = timedelta(hours=18)
_V1_ABSENT = (*TRACE_FIELDS, *RESOURCE_FIELDS)
_NOT_TOPIC_ACTIONS = frozenset(a.value for a in NOT_TOPIC_ACTIONS)
_TOPIC = ResourceType.TOPIC.value
_TOPICS = ResourceType.TOPICS.value  # a summary record: one request's many topics

# orjson gives exactly these types.
_JSON_TYPES = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}
_PYTHON_TYPES = {name: kind for kind, name in _JSON_TYPES.items()}

Check = Callable[[Any], str | None]
# A value's exact Python type, whether null is allowed, the allowed values, a deeper check.
_Spec = tuple[type, bool, frozenset[Any] | None, Check | None]


@dataclass(frozen=True)
class Problem:
    """Why a line is not a good event: its kind (one of KINDS) and a reason naming the field."""

    kind: str
    reason: str


def classify(line: str | bytes) -> Problem | None:
    """None for a good event of a readable schema version, else the line's problem."""
    event = _json(line, "blank line")
    if isinstance(event, Problem):
        return event
    if not isinstance(event, dict):
        return Problem(MALFORMED, f"not a JSON object: {_kind(event)}")
    return _event(event)


def classify_envelope(value: str | bytes | None) -> Problem | None:
    """`classify` for a record of the audit topic: the event is the `data` of a CloudEvents
    1.0 envelope (JSON structured mode, docs/operations.md#the-audit-topic)."""
    if value is None:
        return Problem(MALFORMED, "record with no value")  # a tombstone
    envelope = _json(value, "blank record")
    if isinstance(envelope, Problem):
        return envelope
    if not isinstance(envelope, dict) or envelope.get("specversion") != "1.0":
        return Problem(MALFORMED, "not a CloudEvents 1.0 envelope")
    data = envelope.get("data")
    if not isinstance(data, dict):
        return Problem(MALFORMED, f"envelope data: not a JSON object: {_kind(data)}")
    return _event(data)


def _json(text: str | bytes, blank: str) -> Any:
    # The parsed value, or the problem of a blank text or of text that is not JSON.
    if isinstance(text, bytes):
        # Logs are bytes: one line that is not UTF-8 is a bad line, not a failed job.
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            return Problem(MALFORMED, "not valid UTF-8")
    if not text.strip():
        return Problem(BLANK, blank)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return Problem(MALFORMED, "not valid JSON")


def _event(event: dict[str, Any]) -> Problem | None:
    version = event.get("schema")
    if type(version) is not int:
        if "schema" not in event:
            return Problem(MALFORMED, "missing field schema")
        return Problem(MALFORMED, f"field schema: expected integer, got {_kind(version)}")
    if version not in READABLE_VERSIONS:
        return Problem(UNKNOWN_VERSION, f"schema version {version}")
    reason = _fields(event, version) or _resource(event)
    return None if reason is None else Problem(MALFORMED, reason)


def sample(line: str | bytes) -> str:
    """The first SAMPLE_BYTES bytes of a line, a character cut in two dropped; bytes that
    are not UTF-8 are shown escaped (`\\xff`)."""
    raw = line if isinstance(line, bytes) else line.encode("utf-8")
    end = min(len(raw), SAMPLE_BYTES)
    # Back to the first byte of a character the cut would split (UTF-8: at most 3 back).
    while end < len(raw) and end > SAMPLE_BYTES - 3 and 0x80 <= raw[end] < 0xC0:
        end -= 1
    return raw[:end].decode("utf-8", "backslashreplace")


def _fields(event: dict[str, Any], version: int) -> str | None:
    names = event.keys()
    if not names <= _SPECS.keys():
        return f"unknown field {min(names - _SPECS.keys())}"  # not in the schema: by name
    if not _REQUIRED[version] <= names:
        return f"missing field {_first(_SPECS, _REQUIRED[version] - names)}"
    if version == 1 and not names.isdisjoint(_V1_ABSENT):
        return f"field {_first(_V1_ABSENT, names)} is not in schema 1"
    for name, value in event.items():
        # _check inlined: this loop runs for every field of every event.
        python_type, nullable, allowed, deep = _SPECS[name]
        if type(value) is python_type:
            if (allowed is None or value in allowed) and (deep is None or deep(value) is None):
                continue
        elif value is None and nullable:
            continue
        return f"field {name}: {_check(_SPECS[name], value)}"
    return None


def _first(order: Iterable[str], names: Collection[str]) -> str:
    """The first of `names` in the schema's order: the same reason for the same fault."""
    return next(name for name in order if name in names)


def _resource(event: Mapping[str, Any]) -> str | None:
    # As the record's owner has it: a topic is named exactly by topic records, admin_api and
    # alter_broker_config are exactly the records of neither a topic nor a summary of topics,
    # and schema 3 is exactly the summary's. A v1 record is a topic's.
    kind = event.get("resource_type") or _TOPIC
    is_topic = kind == _TOPIC
    is_summary = kind == _TOPICS
    if is_topic and event["topic"] is None:
        return "field topic: null in a topic record"
    if not is_topic and event["topic"] is not None:
        return f"field topic: set in a record of resource type {kind}"
    if (is_topic or is_summary) == (event["action"] in _NOT_TOPIC_ACTIONS):
        return f"action {event['action']} on resource type {kind}"
    if is_summary != (event["schema"] == SUMMARY_SCHEMA_VERSION) or is_summary != (
        event.get("summary") is not None
    ):
        return "field summary: exactly in schema 3 records, of resource type topics"
    return None


def _kind(value: Any) -> str:
    return _JSON_TYPES[type(value)]


def _compile(node: Mapping[str, Any], defs: Mapping[str, Any]) -> _Spec:
    """How to check a value against one node of the record's JSON Schema."""
    if "$ref" in node:
        node = {**defs[node["$ref"].removeprefix("#/$defs/")], **node}
        node.pop("$ref")
    if "anyOf" in node:
        (kind,) = [n for n in node["anyOf"] if n.get("type") != "null"]
        inner = _compile({**kind, **{k: v for k, v in node.items() if k != "anyOf"}}, defs)
        return inner[0], True, inner[2], inner[3]
    expected = node["type"]
    enum = node.get("enum", [node["const"]] if "const" in node else None)
    allowed = None if enum is None else frozenset(enum)
    deep: Check | None = None
    if expected == "string" and node.get("format") == "date-time":
        deep = _time
    elif expected == "integer":
        deep = _range(node.get("minimum", -_LONG), node.get("maximum", _LONG - 1))
    elif expected == "array":
        deep = _items(_compile(node["items"], defs))
    elif expected == "object" and "properties" in node:
        deep = _object(node, defs)
    return _PYTHON_TYPES[expected], False, allowed, deep


def _check(spec: _Spec, value: Any) -> str | None:
    python_type, nullable, allowed, deep = spec
    # The exact type: bool is not int here, and int is not float.
    if type(value) is not python_type:
        if value is None and nullable:
            return None
        return f"expected {_JSON_TYPES[python_type]}, got {_kind(value)}"
    if allowed is not None and value not in allowed:
        return f"unknown value {value!r}"
    return None if deep is None else deep(value)


def _range(low: int, high: int) -> Check:
    return lambda value: None if low <= value <= high else f"{value} is out of range"


def _items(item: _Spec) -> Check:
    def each(values: list[Any]) -> str | None:
        for index, value in enumerate(values):
            problem = _check(item, value)
            if problem is not None:
                return f"[{index}] {problem}"
        return None

    return each


def _object(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Check:
    fields = {name: _compile(prop, defs) for name, prop in node["properties"].items()}
    required = frozenset(node.get("required", ()))

    def whole(value: dict[str, Any]) -> str | None:
        names = value.keys()
        if not names <= fields.keys():
            return f"unknown field {min(names - fields.keys())}"
        if not required <= names:
            return f"missing field {_first(fields, required - names)}"
        for name, item in value.items():
            problem = _check(fields[name], item)
            if problem is not None:
                return f"{name}: {problem}"
        return None

    return whole


def _time(value: str) -> str | None:
    if _TIME.fullmatch(value) is None:
        return f"{value[:40]!r} is not an RFC 3339 time with microseconds"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return f"{value[:40]!r} is not a valid time"
    offset = moment.utcoffset()
    if offset is not None and abs(offset) > _MAX_OFFSET:
        return f"{value[:40]!r} has an offset beyond ±18:00"
    return None


_SCHEMA = json_schema()
_SPECS = {
    name: _compile(prop, _SCHEMA.get("$defs", {})) for name, prop in _SCHEMA["properties"].items()
}
_REQUIRED = {
    1: frozenset(_SCHEMA["required"]),
    2: frozenset((*_SCHEMA["required"], *_V1_ABSENT)),
    3: frozenset((*_SCHEMA["required"], *_V1_ABSENT, "summary")),
}
