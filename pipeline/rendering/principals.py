"""Principals as pages show them: an unauthenticated one is called out, never listed as if it
were a team's."""

from __future__ import annotations

from kafka_policy_proxy.pipeline.rendering.html_page import Cell, Text

# The proxy's principal of a client that did not authenticate, and the audit record's empty
# one of a request refused before SASL completed (`decision_log.UNAUTHENTICATED`): the
# rendering room imports nothing of the policy's.
_UNAUTHENTICATED = {
    "User:ANONYMOUS": "User:ANONYMOUS (unauthenticated)",
    "": "(none: refused before authentication)",
}


def unauthenticated(principal: str | None) -> bool:
    """Whether `principal` is a client that did not authenticate."""
    return (principal or "") in _UNAUTHENTICATED


def principal_cell(principal: str | None) -> Cell:
    """A principal for a cell: an unauthenticated one marked as such."""
    if unauthenticated(principal):
        return Text(_UNAUTHENTICATED[principal or ""], "warn")
    return principal


def principal_name(principal: str | None) -> str:
    """A principal for a chart label: an unauthenticated one marked as such."""
    return _UNAUTHENTICATED.get(principal or "", principal or "")
