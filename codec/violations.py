"""Which error code and message a denied topic gets, by response version (KIP-201 rules)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

POLICY_VIOLATION = ErrorCode.policy_violation
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error


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

    POLICY_VIOLATION with the message where the version has a message field; otherwise
    `legacy_error_code` (UNKNOWN_SERVER_ERROR by default, so old clients are not surprised)
    and no message: the full reason only goes to the audit log.
    """
    if has_error_message(result_cls):
        return POLICY_VIOLATION, message
    return ErrorCode(legacy_error_code), None
