"""Metadata (key 3) responses: which topics the broker shows as there or being created."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.registry import decode_exact, response_class

METADATA = 3
# An auto-created topic is answered LEADER_NOT_AVAILABLE while its partitions get leaders.
_CREATED = frozenset({ErrorCode.none, ErrorCode.leader_not_available})


def shown_topics(api_version: int, body: bytes) -> set[str]:
    """The names a response body shows without an error, or as being created; CodecError."""
    response: Any = decode_exact(response_class(METADATA, api_version), body)
    return {t.name for t in response.topics if t.name is not None and t.error_code in _CREATED}
