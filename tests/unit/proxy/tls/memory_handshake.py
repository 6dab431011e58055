"""A TLS handshake between two SSLObjects in memory: no sockets, no event loop."""

from __future__ import annotations

import ssl


def handshake(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext, server_name: str | None
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run the handshake to the end; raise the SSLError of the side that gave up."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_out, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(to_server, server_out, server_side=True)
    client = client_context.wrap_bio(to_client, client_out, server_hostname=server_name)
    done = {"server": False, "client": False}
    for _ in range(10):
        for side, tls, out, peer_in in (
            ("client", client, client_out, to_server),
            ("server", server, server_out, to_client),
        ):
            try:
                tls.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
            finally:
                peer_in.write(out.read())  # the alert too, when the handshake failed
        if all(done.values()):
            return server, client
    raise AssertionError("the handshake did not finish")
