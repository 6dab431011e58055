"""The SASL principal tracker: who a client is once the broker accepts its credentials.

Pure code in the sans-IO manner: the connection feeds decoded messages in and acts on the
events and exceptions that come out. Every `SaslError` (parse, sequence, or a mechanism the
proxy cannot attribute) means the exchange must not be forwarded and the connection should be
closed; the tracker stays failed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import NoReturn, Protocol

from kio.schema.sasl_handshake import v0 as handshake_v0
from kio.schema.sasl_handshake import v1 as handshake_v1

from kafka_policy_proxy.codec.sasl import (
    MECHANISMS,
    OAUTHBEARER,
    PLAIN,
    SCRAM_MECHANISMS,
    ClientIdentity,
    SaslError,
    parse_client_first,
)
from kafka_policy_proxy.proxy.identity.principal import ANONYMOUS, user_principal


class SaslStateError(SaslError):
    """A SASL message arrived out of order, or after the exchange had already failed."""


class AuthenticateRequest(Protocol):
    """Any SaslAuthenticateRequest version (v0-v2)."""

    @property
    def auth_bytes(self) -> bytes: ...


class AuthenticateResponse(Protocol):
    """Any SaslAuthenticateResponse version (v0-v2)."""

    @property
    def error_code(self) -> int: ...

    @property
    def error_message(self) -> str | None: ...

    @property
    def auth_bytes(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The broker accepted the credentials: `principal` is now trusted for this connection."""

    principal: str
    mechanism: str
    reauthentication: bool
    previous_principal: str
    # A re-authentication that names a different user. Kafka refuses this itself; if a broker
    # accepts it anyway we keep its verdict, and the proxy should log it and may close.
    principal_changed: bool


@dataclass(frozen=True, slots=True)
class AuthenticationFailed:
    """The broker refused the handshake or the credentials; the principal did not change."""

    mechanism: str
    error_code: int
    error_message: str | None
    # What the client claimed, for the audit log only: it was never verified.
    claimed_principal: str | None


class _State(Enum):
    IDLE = auto()  # no exchange yet, or the last one succeeded
    HANDSHAKE_SENT = auto()
    MECHANISM_AGREED = auto()
    AWAITING_RESPONSE = auto()
    AWAITING_CLIENT = auto()  # SCRAM client-final, or OAUTHBEARER's ^A after an error
    FAILED = auto()


class SaslPrincipalTracker:
    """Follow one connection's SASL exchanges and name its principal once the broker agrees.

    Transitions (anything else raises `SaslStateError`):

    - IDLE --handshake_request--> HANDSHAKE_SENT (from IDLE after a success: KIP-368 re-auth)
    - HANDSHAKE_SENT --handshake_response ok--> MECHANISM_AGREED; error --> FAILED
    - MECHANISM_AGREED --authenticate_request (client-first parsed)--> AWAITING_RESPONSE
    - AWAITING_RESPONSE --authenticate_response:
        error_code != 0 --> FAILED (`AuthenticationFailed`);
        PLAIN ok, SCRAM final ok with `v=`, OAUTHBEARER ok with empty bytes --> IDLE
        (`Authenticated`); SCRAM first ok, OAUTHBEARER error challenge --> AWAITING_CLIENT
    - AWAITING_CLIENT --authenticate_request--> AWAITING_RESPONSE
    """

    def __init__(self, principal_claim: str = "sub") -> None:
        """Track a new connection; `principal_claim` names the OAUTHBEARER JWT claim to use."""
        self._principal_claim = principal_claim
        self._principal = ANONYMOUS
        self._authenticated = False
        self._state = _State.IDLE
        self._mechanism = ""
        self._claimed: ClientIdentity | None = None
        self._round = 0
        self._oauth_error = False

    @property
    def principal(self) -> str:
        """The trusted principal: 'User:ANONYMOUS' until the broker reports a success."""
        return self._principal

    @property
    def failed(self) -> bool:
        """Whether an exchange failed; the broker closes such connections and so should we."""
        return self._state is _State.FAILED

    @property
    def authenticated(self) -> bool:
        """Whether the broker has accepted credentials on this connection (a re-auth keeps it)."""
        return self._authenticated and self._state is not _State.FAILED

    @property
    def state(self) -> str:
        """Where the exchange stands, for logs: IDLE, HANDSHAKE_SENT, ..., FAILED."""
        return self._state.name

    def handshake_request(
        self, request: handshake_v0.SaslHandshakeRequest | handshake_v1.SaslHandshakeRequest
    ) -> None:
        """Feed the client's SaslHandshake request; v0 (SASL outside Kafka frames) is refused."""
        self._expect(_State.IDLE, "SaslHandshake request")
        if request.__version__ != 1:
            self._fail_with(SaslStateError(f"SaslHandshake v{request.__version__} is refused"))
        if request.mechanism not in MECHANISMS:
            self._fail_with(
                SaslError(f"{request.mechanism}: the proxy cannot learn the principal it yields")
            )
        self._mechanism = request.mechanism
        self._claimed = None
        self._round = 0
        self._oauth_error = False
        self._state = _State.HANDSHAKE_SENT

    def handshake_response(
        self, response: handshake_v1.SaslHandshakeResponse
    ) -> AuthenticationFailed | None:
        """Feed the broker's SaslHandshake response; an error fails the exchange."""
        self._expect(_State.HANDSHAKE_SENT, "SaslHandshake response")
        if response.error_code != 0:
            return self._failure(int(response.error_code), None)
        self._state = _State.MECHANISM_AGREED
        return None

    def authenticate_request(self, request: AuthenticateRequest) -> None:
        """Feed a client SaslAuthenticate request; a `SaslError` means: do not forward it."""
        if self._state is _State.MECHANISM_AGREED:
            try:
                claimed = parse_client_first(
                    self._mechanism, request.auth_bytes, self._principal_claim
                )
            except SaslError as exc:
                self._fail_with(exc)
            if claimed.delegation_token:
                self._fail_with(
                    SaslError(
                        f"{self._mechanism}: a delegation token's owner is known only to the broker"
                    )
                )
            self._claimed = claimed
        else:
            self._expect(_State.AWAITING_CLIENT, "SaslAuthenticate request")
        self._round += 1
        self._state = _State.AWAITING_RESPONSE

    def authenticate_response(
        self, response: AuthenticateResponse
    ) -> Authenticated | AuthenticationFailed | None:
        """Feed the broker's SaslAuthenticate response; return the outcome once it is known."""
        self._expect(_State.AWAITING_RESPONSE, "SaslAuthenticate response")
        if response.error_code != 0:
            return self._failure(int(response.error_code), response.error_message)
        if self._mechanism in SCRAM_MECHANISMS and self._round == 1:
            self._state = _State.AWAITING_CLIENT  # server-first; the proof is still to come
            return None
        if self._mechanism == OAUTHBEARER and response.auth_bytes and not self._oauth_error:
            # Kafka sends a JSON error as a challenge with error_code 0; the client answers ^A.
            self._oauth_error = True
            self._state = _State.AWAITING_CLIENT
            return None
        succeeded = (
            self._mechanism == PLAIN
            or (self._mechanism in SCRAM_MECHANISMS and response.auth_bytes.startswith(b"v="))
            or (self._mechanism == OAUTHBEARER and not self._oauth_error)
        )
        if not succeeded:
            return self._failure(0, response.error_message)
        assert self._claimed is not None  # set before the first response can arrive
        principal = user_principal(self._claimed.username)
        previous, reauth = self._principal, self._authenticated
        self._principal, self._authenticated = principal, True
        self._state = _State.IDLE
        return Authenticated(
            principal=principal,
            mechanism=self._mechanism,
            reauthentication=reauth,
            previous_principal=previous,
            principal_changed=reauth and principal != previous,
        )

    def _expect(self, state: _State, what: str) -> None:
        if self._state is not state:
            self._fail_with(SaslStateError(f"unexpected {what} in state {self._state.name}"))

    def _fail_with(self, exc: SaslError) -> NoReturn:
        self._state = _State.FAILED
        raise exc

    def _failure(self, error_code: int, error_message: str | None) -> AuthenticationFailed:
        self._state = _State.FAILED
        claimed = self._claimed
        return AuthenticationFailed(
            mechanism=self._mechanism,
            error_code=error_code,
            error_message=error_message,
            claimed_principal=None if claimed is None else user_principal(claimed.username),
        )
