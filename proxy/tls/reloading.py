"""TLS contexts that follow their files: rebuilt when a file changes or on SIGHUP.

Each side (the client listener, the connections to the brokers) keeps a function that builds
its SSLContext from files. The context handed to asyncio is a `LiveContext`: a real
SSLContext whose `wrap_bio` and `wrap_socket` delegate to the context built last, so every
new connection, the proxy's own cluster-state and discovery connections included, uses the
new files, while a connection already open keeps the TLS session it has. A build that fails
(an unreadable file, a key that does not match its certificate, an expired certificate) keeps
the context in force, logs the error naming the file, and counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import structlog
from cryptography import x509

from kafka_policy_proxy.proxy.config import ConfigError
from kafka_policy_proxy.proxy.metrics import TLS_CERTIFICATE_EXPIRY, TLS_RELOADS

log = structlog.get_logger("proxy.tls")

Side = Literal["listener", "sni", "upstream"]
# (inode, mtime, size) of each file, following symlinks: a Kubernetes Secret volume swaps its
# `..data` link to a new directory, so the resolved file changes even when the path does not.
_Stamp = tuple[tuple[int, int, int] | None, ...]


class LiveContext(ssl.SSLContext):
    """An SSLContext that wraps each new connection with the context its owner built last."""

    owner: ReloadingContext

    def wrap_bio(  # same parameters, passed on as given
        self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, *args: Any, **kwargs: Any
    ) -> ssl.SSLObject:
        """Wrap with the current context (asyncio's and uvloop's TLS layers call this)."""
        return self.owner.current.wrap_bio(incoming, outgoing, *args, **kwargs)

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        """Wrap with the current context."""
        return self.owner.current.wrap_socket(sock, *args, **kwargs)


class ReloadingContext:
    """The context one side uses now, rebuilt from its files when they change."""

    def __init__(
        self,
        side: Side,
        build: Callable[[], ssl.SSLContext],
        files: Sequence[Path],
        certificate: Callable[[], bytes | None] | None = None,
    ) -> None:
        """Build it now; a ConfigError from `build` stops the start, as before.

        `files`: the files `build` reads; `certificate`: reads the PEM of the certificate this
        side presents (its notAfter is exported, and an expired one refused on reload).
        """
        self.side = side
        self._build = build
        self._files = tuple(files)
        self._certificate = certificate
        self._stamp = self._stamps()
        self.current = build()
        self._export_expiry()
        self.context = LiveContext(self.current.protocol)
        self.context.owner = self

    def reload(self) -> bool:
        """Rebuild from the files; on any error keep the context in force and say why."""
        stamp = self._stamps()
        try:
            self._refuse_expired()
            context = self._build()
        except (ConfigError, ssl.SSLError, OSError, ValueError) as exc:
            self._stamp = stamp  # not retried until a file changes again
            TLS_RELOADS.labels(side=self.side, result="failed").inc()
            log.error(
                "TLS files refused; the certificates in use stay in force",
                side=self.side,
                detail=str(exc),
            )
            return False
        self._stamp, self.current = stamp, context
        self._export_expiry()
        TLS_RELOADS.labels(side=self.side, result="ok").inc()
        log.info("TLS files reloaded", side=self.side, files=[str(f) for f in self._files])
        return True

    def changed(self) -> bool:
        """Whether a file's inode, modification time or size differs from the last build."""
        return self._stamps() != self._stamp

    async def watch(self, interval: float) -> None:
        """Reload whenever one of the files changes."""
        while True:
            await asyncio.sleep(interval)
            if self.changed():
                self.reload()

    def _stamps(self) -> _Stamp:
        stamps: list[tuple[int, int, int] | None] = []
        for path in self._files:
            try:
                stat = path.stat()
            except OSError:
                stamps.append(None)  # a file being replaced; the build will say what is wrong
            else:
                stamps.append((stat.st_ino, stat.st_mtime_ns, stat.st_size))
        return tuple(stamps)

    def _presented(self) -> x509.Certificate | None:
        pem = None if self._certificate is None else self._certificate()
        if not pem:
            return None
        try:
            return x509.load_pem_x509_certificate(pem)
        except ValueError as exc:
            raise ValueError(f"{self._where()}: no PEM certificate found") from exc

    def _where(self) -> str:
        return ", ".join(str(f) for f in self._files)

    def _refuse_expired(self) -> None:
        # At start an expired listener certificate is served (clients say why they refuse
        # it); replacing a working one with it would be a mistake, so a reload refuses it.
        cert = self._presented()
        if cert is not None and cert.not_valid_after_utc < datetime.datetime.now(datetime.UTC):
            when = f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
            raise ValueError(f"{self._where()}: the certificate expired on {when}")

    def _export_expiry(self) -> None:
        with contextlib.suppress(OSError, ValueError, ConfigError):
            cert = self._presented()
            if cert is not None:
                expiry = cert.not_valid_after_utc.timestamp()
                TLS_CERTIFICATE_EXPIRY.labels(side=self.side).set(expiry)
