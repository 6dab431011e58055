"""Denial messages as clients see them: the reason, then ` (decision <UUIDv7>)`."""

from __future__ import annotations

import re

CITED = re.compile(
    r"(?P<reason>.*) \(decision (?P<id>[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}"
    r"-[0-9a-f]{12})\)",
    re.DOTALL,
)


def cited(message: str | None) -> tuple[str, str]:
    """(the reason, the decision id) of a denial message; AssertionError if it does not end
    with a decision id."""
    found = CITED.fullmatch(message or "")
    assert found is not None, f"no decision id at the end of {message!r}"
    return found.group("reason"), found.group("id")


def reason(message: str | None) -> str:
    """A denial message without the decision id it must end with."""
    return cited(message)[0]
