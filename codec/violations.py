"""Which error code and message a denied topic gets, by response version (KIP-201 rules)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

POLICY_VIOLATION = ErrorCode.policy_violation
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
DELETE_RECORDS_API_KEY = 21


_has_message: dict[type[Any], bool] = {}


def has_error_message(result_cls: type[Any]) -> bool:
    """Whether a kio result entity carries an `error_message` field in its version."""
    found = _has_message.get(result_cls)
    if found is None:
        fields = dataclasses.fields(result_cls)
        found = _has_message[result_cls] = any(f.name == "error_message" for f in fields)
    return found


def violation(
    result_cls: type[Any], message: str, legacy_error_code: int = -1
) -> tuple[ErrorCode, str | None]:
    """(error code, message) for a denied topic's result entity of this class.

    POLICY_VIOLATION with the message where the version has a message field. DeleteRecords
    has none in any version, yet gets POLICY_VIOLATION too: every client that sends it knows
    code 44 (DeleteRecords came after it) and raises PolicyViolationException, which says
    what happened, where UNKNOWN_SERVER_ERROR reads as a broker fault (Kafka Streams logs its
    purge failures by exception). Otherwise (DeleteTopics v1-4) `legacy_error_code`
    (UNKNOWN_SERVER_ERROR by default, so old clients are not surprised) and no message. The
    full reason is in the proxy's log and the audit record.
    """
    if has_error_message(result_cls):
        return POLICY_VIOLATION, message
    if getattr(result_cls, "__api_key__", None) == DELETE_RECORDS_API_KEY:
        return POLICY_VIOLATION, None
    return ErrorCode(legacy_error_code), None
