"""An ssl.SSLContext for the proxy's asyncio connections, from TlsMaterial held in memory."""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Iterator

from kafka_policy_proxy.proxy.kafka_client.properties import ClientPropertiesError
from kafka_policy_proxy.proxy.kafka_client.tls_material import TlsMaterial


def tls_context(material: TlsMaterial) -> ssl.SSLContext:
    """A client context that verifies the brokers as the material says; refuses a bad key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion[material.min_version.replace(".", "_")]
    if material.ca_pem is None:
        context.load_default_certs()
    else:
        context.load_verify_locations(cadata=material.ca_pem)
    context.check_hostname = material.check_hostname
    if material.cert_chain_pem is not None and material.key_pem is not None:
        # Python's ssl loads a certificate chain from a path only: a memory file, never disk.
        with _memory_file(material.key_pem + material.cert_chain_pem) as path:
            try:
                context.load_cert_chain(path)
            except ssl.SSLError as exc:
                raise ClientPropertiesError(
                    f"ssl.keystore: the private key does not belong to the certificate ({exc})"
                ) from None
    return context


@contextlib.contextmanager
def _memory_file(text: str) -> Iterator[str]:
    fd = os.memfd_create("kafka-policy-proxy-keystore", os.MFD_CLOEXEC)
    try:
        os.write(fd, text.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)
