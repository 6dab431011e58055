"""Kafka's principal strings, as SASL and TLS authentication name a client."""

from __future__ import annotations

ANONYMOUS = "User:ANONYMOUS"


def user_principal(name: str) -> str:
    """Return Kafka's principal string for a user name, e.g. 'User:alice'."""
    return f"User:{name}"
