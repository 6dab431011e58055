"""Who a SASL client says it is: pure parsing of the client's first SaslAuthenticate auth bytes.

Nothing here is trusted: the proxy passes SASL through, the broker verifies the credentials,
and only a success reported by the broker turns a claimed name into a principal (see
`proxy.identity.sasl.SaslPrincipalTracker`). Error messages never quote the auth bytes, which
may hold a password or a bearer token.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
SCRAM_MECHANISMS = frozenset({SCRAM_SHA_256, SCRAM_SHA_512})
MECHANISMS = frozenset({PLAIN, OAUTHBEARER}) | SCRAM_MECHANISMS


class SaslError(Exception):
    """A SASL exchange the proxy cannot attribute to a principal: do not forward it."""


class SaslParseError(SaslError):
    """Auth bytes that do not parse for their mechanism (the message never quotes the bytes)."""

    def __init__(self, mechanism: str, reason: str) -> None:
        self.mechanism = mechanism
        self.reason = reason
        super().__init__(f"{mechanism}: {reason}")


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """The name a client claims in its first auth message; unverified until the broker agrees."""

    username: str
    # SCRAM `tokenauth=true`: `username` is a delegation-token id and the principal is the
    # token's owner, which only the broker knows.
    delegation_token: bool = False


# RFC 5802 saslname: UTF-8 except NUL, "," and "=", with "=2C" and "=3D" as escapes.
_SASLNAME = r"(?:[^\x00=,]|=2C|=3D)+"
# Kafka only accepts the "n" flag; "y" and "p=<cb-name>" are valid RFC 5802/7628 gs2 headers
# whose username is just as readable, so the broker, not the proxy, gets to refuse them.
_GS2_HEADER = rf"(?:n|y|p=[A-Za-z0-9.\-]+),(?:a=(?P<authzid>{_SASLNAME}))?,"
_SCRAM_CLIENT_FIRST = re.compile(
    _GS2_HEADER
    + r"(?:m=[^\x00,]+,)?"
    + rf"n=(?P<saslname>{_SASLNAME}),r=[\x21-\x2b\x2d-\x7e]+"
    + r"(?P<extensions>(?:,[A-Za-z]+=[^\x00,]+)*)"
)
_OAUTH_CLIENT_FIRST = re.compile(
    _GS2_HEADER + r"\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01"
)
_BEARER = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_.A-Za-z0-9]+)")


def _text(mechanism: str, auth_bytes: bytes) -> str:
    try:
        return auth_bytes.decode("utf-8")
    except UnicodeDecodeError:
        # Java would substitute U+FFFD; a name we cannot reproduce exactly is no name.
        raise SaslParseError(mechanism, "auth bytes are not valid UTF-8") from None


def parse_plain(auth_bytes: bytes) -> ClientIdentity:
    """Parse `[authzid] NUL authcid NUL passwd`; the principal name is authcid, as in Kafka."""
    parts = _text(PLAIN, auth_bytes).split("\x00", 3)
    # Kafka reads at most three fields and ignores a fourth, so we do too.
    authzid, username, password = [*parts, "", ""][:3]
    if not username:
        raise SaslParseError(PLAIN, "username not specified")
    if not password:
        raise SaslParseError(PLAIN, "password not specified")
    if authzid and authzid != username:
        raise SaslParseError(PLAIN, "authorization id differs from the username (Kafka refuses)")
    return ClientIdentity(username)


def scram_escape(username: str) -> str:
    """Escape a username as a SCRAM saslname ("," -> "=2C", "=" -> "=3D")."""
    return username.replace("=", "=3D").replace(",", "=2C")


def scram_unescape(saslname: str) -> str:
    """Undo `scram_escape`; the input must be a well-formed saslname."""
    return re.sub("=2C|=3D", lambda m: "," if m.group() == "=2C" else "=", saslname)


def parse_scram_client_first(auth_bytes: bytes, mechanism: str = SCRAM_SHA_256) -> ClientIdentity:
    """Parse a SCRAM client-first message `gs2-header n=<saslname>,r=<nonce>[,extensions]`."""
    match = _SCRAM_CLIENT_FIRST.fullmatch(_text(mechanism, auth_bytes))
    if match is None:
        raise SaslParseError(mechanism, "not a SCRAM client-first message")
    username = scram_unescape(match["saslname"])
    authzid = match["authzid"]
    if authzid is not None and scram_unescape(authzid) != username:
        raise SaslParseError(mechanism, "authorization id differs from the username")
    extensions = dict(item.split("=", 1) for item in match["extensions"].split(",") if item)
    # Kafka's Boolean.parseBoolean: "true" in any case.
    token = extensions.get("tokenauth", "").lower() == "true"
    return ClientIdentity(username, delegation_token=token)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        # Parsers disagree on which duplicate wins; the broker might read another `sub`.
        raise ValueError("duplicate JSON key")
    return dict(pairs)


def _jwt_claim(token: str, claim: str) -> str:
    parts = token.split(".")
    if len(parts) != 3:
        raise SaslParseError(OAUTHBEARER, "token is not a compact JWS (header.payload.signature)")
    payload = parts[1]
    try:
        raw = base64.b64decode(payload + "=" * (-len(payload) % 4), altchars=b"-_", validate=True)
        claims = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (binascii.Error, ValueError, RecursionError):
        raise SaslParseError(
            OAUTHBEARER, "JWT payload is not base64url JSON without duplicate keys"
        ) from None
    value = claims.get(claim) if isinstance(claims, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise SaslParseError(OAUTHBEARER, f"JWT has no non-blank string claim {claim!r}")
    if value != value.strip():
        # Kafka's JWKS validator trims the claim and its unsecured validator does not.
        raise SaslParseError(OAUTHBEARER, f"JWT claim {claim!r} has surrounding whitespace")
    return value


def parse_oauthbearer(auth_bytes: bytes, principal_claim: str = "sub") -> ClientIdentity:
    """Parse `gs2-header ^A auth=Bearer <jws> ^A [k=v ^A]... ^A` and read the JWT's claim.

    The JWT is *not* verified here: its signature, expiry and audience are the broker's
    business. The name read from `principal_claim` (Kafka's `sasl.oauthbearer.sub.claim.name`,
    default `sub`) is only a claim, and the proxy may trust it only after the broker reports
    that this SaslAuthenticate succeeded.
    """
    match = _OAUTH_CLIENT_FIRST.fullmatch(_text(OAUTHBEARER, auth_bytes))
    if match is None:
        raise SaslParseError(OAUTHBEARER, "not an OAUTHBEARER client initial response")
    auth = [
        pair[len("auth=") :] for pair in match["kvpairs"].split("\x01") if pair.startswith("auth=")
    ]
    if len(auth) != 1:
        raise SaslParseError(OAUTHBEARER, "expected exactly one 'auth' key")
    bearer = _BEARER.fullmatch(auth[0])
    if bearer is None or bearer["scheme"].lower() != "bearer":
        raise SaslParseError(OAUTHBEARER, "'auth' is not 'Bearer <token>'")
    username = _jwt_claim(bearer["token"], principal_claim)
    authzid = match["authzid"]
    if authzid is not None and scram_unescape(authzid) != username:
        raise SaslParseError(OAUTHBEARER, "authorization id differs from the token's principal")
    return ClientIdentity(username)


def parse_client_first(
    mechanism: str, auth_bytes: bytes, principal_claim: str = "sub"
) -> ClientIdentity:
    """Parse the first client SaslAuthenticate auth bytes of any mechanism the proxy supports."""
    if mechanism == PLAIN:
        return parse_plain(auth_bytes)
    if mechanism in SCRAM_MECHANISMS:
        return parse_scram_client_first(auth_bytes, mechanism)
    if mechanism == OAUTHBEARER:
        return parse_oauthbearer(auth_bytes, principal_claim)
    raise SaslParseError(mechanism, "mechanism not supported by the proxy")
