"""A test identity provider: the OAuth 2 client-credentials grant, RS256 JWTs and a JWKS.

POST /token issues a signed JWT (sub and azp: the client id) to a client that presents its id and
secret (HTTP Basic, or client_id/client_secret in the form); GET /jwks serves the public key,
which a broker's OAuthBearerValidatorCallbackHandler fetches to check the signature. Every
token request is recorded, so a test can tell when tokens were fetched and how long each was
good for. Dev and tests only.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "https://idp.kpp.test"
AUDIENCE = "kafka"


@dataclass(frozen=True)
class TokenRequest:
    """One request to /token: who asked (and with what HTTP client), when, and the token's
    expiry (None: refused)."""

    client_id: str
    at: float
    expiry: float | None
    agent: str = ""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(number: int) -> str:
    return _b64url(number.to_bytes((number.bit_length() + 7) // 8, "big"))


class OAuthProvider:
    """The provider on host:port, issuing tokens valid for `lifetime_s` to `clients`."""

    def __init__(
        self,
        host: str,
        port: int,
        clients: dict[str, str],
        *,
        lifetime_s: float = 3600.0,
        scope: str = "kafka",
        sub_prefix: str = "",
    ) -> None:
        self.clients = dict(clients)
        self.lifetime_s = lifetime_s
        self.scope = scope
        # sub = prefix + client id; azp = the client id (a broker may name either as its
        # sasl.oauthbearer.sub.claim.name).
        self.sub_prefix = sub_prefix
        self.requests: list[TokenRequest] = []
        self._lock = threading.Lock()
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:12]
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """http://host:port of the provider."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token_url(self) -> str:
        """The token endpoint (sasl.oauthbearer.token.endpoint.url)."""
        return f"{self.base_url}/token"

    @property
    def jwks_url(self) -> str:
        """The JWKS endpoint (sasl.oauthbearer.jwks.endpoint.url)."""
        return f"{self.base_url}/jwks"

    def start(self) -> OAuthProvider:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def issued(self, client_id: str | None = None) -> list[TokenRequest]:
        """The token requests so far (of one client, if named)."""
        with self._lock:
            return [r for r in self.requests if client_id in (None, r.client_id)]

    def token_for(self, client_id: str, lifetime_s: float | None = None) -> str:
        """A signed JWT for `client_id` (also what /token issues)."""
        return self._issue(client_id, lifetime_s)[0]

    def _issue(self, client_id: str, lifetime_s: float | None = None) -> tuple[str, int]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": self.sub_prefix + client_id,
            "azp": client_id,
            "iat": now,
            "exp": now + int(lifetime_s if lifetime_s is not None else self.lifetime_s),
            "scope": self.scope,
            "jti": uuid.uuid4().hex,
        }
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = (
            f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        )
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}", claims["exp"]

    def jwks(self) -> dict[str, Any]:
        """The public key as a JSON Web Key Set."""
        public = self._key.public_key().public_numbers()
        key = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid}
        return {"keys": [key | {"n": _uint(public.n), "e": _uint(public.e)}]}

    def _grant(self, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        form = {k: v[0] for k, v in parse_qs(body.decode("ascii", "replace")).items()}
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        auth = headers.get("Authorization", "")
        if auth.startswith("Basic "):
            decoded = base64.b64decode(auth[6:]).decode()
            client_id, _, secret = (unquote(part) for part in decoded.partition(":"))
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        good = self.clients.get(client_id) == secret and bool(client_id)
        token, expiry = self._issue(client_id) if good else (None, None)
        with self._lock:
            agent = headers.get("User-Agent", "")
            self.requests.append(TokenRequest(client_id, time.time(), expiry, agent))
        if token is None:
            return 401, {"error": "invalid_client", "error_description": "bad client credentials"}
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(self.lifetime_s),
            "scope": self.scope,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/jwks":
                    self._send(200, provider.jwks())
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path.split("?")[0] != "/token":
                    self._send(404, {"error": "not_found"})
                    return
                self._send(*provider._grant(self.headers, body))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler
