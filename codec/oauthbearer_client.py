"""The client side of SASL OAUTHBEARER (RFC 7628) as Kafka speaks it: bytes in, bytes out.

The initial response is the GS2 header `n,,` (no channel binding, no authorisation identity),
then `auth=Bearer <token>` and any SASL extensions, each ended by ^A, and a final ^A. A broker
that refuses the token answers with a JSON error challenge; the client must then send a lone ^A,
after which the broker fails the exchange (RFC 7628 section 3.2.3).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

SEPARATOR = "\x01"
# RFC 7628: key = 1*(ALPHA); value = *(VCHAR / SP / HTAB / CR / LF); the token is b64token.
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]*")
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
ERROR_ACKNOWLEDGEMENT = SEPARATOR.encode()


def initial_response(token: str, extensions: Mapping[str, str] | None = None) -> bytes:
    """The client's first (and, on success, only) message for `token` and `extensions`."""
    if not _TOKEN.fullmatch(token):
        raise ValueError("the bearer token is not an RFC 6750 b64token")
    pairs = [f"auth=Bearer {token}"]
    for key, value in (extensions or {}).items():
        if key == "auth" or not _KEY.fullmatch(key):
            raise ValueError(f"SASL extension name {key!r} must be letters only, and not 'auth'")
        if not _VALUE.fullmatch(value):
            raise ValueError(f"SASL extension {key}'s value has characters RFC 7628 forbids")
        pairs.append(f"{key}={value}")
    return f"n,,{SEPARATOR}{SEPARATOR.join(pairs)}{SEPARATOR}{SEPARATOR}".encode("ascii")


def error_status(challenge: bytes) -> str:
    """The reason in a broker's error challenge (its JSON `status`, and `scope` if named)."""
    try:
        error = json.loads(challenge)
    except ValueError:
        return "the broker refused the token"
    if not isinstance(error, dict):
        return "the broker refused the token"
    status = str(error.get("status", "invalid_token"))
    scope = error.get("scope")
    return f"{status} (scope {scope})" if scope else status
