"""The TLS part of Kafka client properties, loaded into PEM text: PEM and PKCS#12 stores.

Kafka's ssl.truststore.* and ssl.keystore.* in their PEM (KIP-651) and PKCS12 types, read
once into memory, so the asyncio connections and librdkafka get the same certificates. The
private key is kept decrypted in memory (ssl.key.password opens it here), never written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from kafka_policy_proxy.proxy.kafka_client.properties import ClientPropertiesError

STORE_TYPES = ("PEM", "PKCS12")
_JKS_HINT = (
    "convert it to PKCS12: keytool -importkeystore -srckeystore STORE.jks -destkeystore "
    "STORE.p12 -deststoretype PKCS12, then set {key}=PKCS12"
)


@dataclass(frozen=True)
class TlsMaterial:
    """Certificates and key as PEM text; no CA means the system's CAs."""

    ca_pem: str | None = None
    cert_chain_pem: str | None = None  # the client certificate, then its chain
    key_pem: str | None = field(default=None, repr=False)  # PKCS#8, unencrypted
    check_hostname: bool = True
    min_version: str = "TLSv1.2"


def tls_material(props: Mapping[str, str]) -> TlsMaterial:
    """The TLS settings of SSL and SASL_SSL client properties; a refusal names the key."""
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise ClientPropertiesError(
            f"ssl.endpoint.identification.algorithm: {algorithm!r}: use https (the default) or "
            "an empty value (no host name check)"
        )
    ca, cert_chain, key = _truststore(props), *_keystore(props)
    return TlsMaterial(ca, cert_chain, key, algorithm == "https", _min_version(props))


def _store_type(props: Mapping[str, str], kind: str, given: bool) -> str | None:
    key = f"ssl.{kind}.type"
    raw = props.get(key)
    if raw is None and not given:
        return None
    # Kafka's default store type is JKS: a location without a type would be read as one.
    store = (raw or "JKS").strip().upper()
    if store == "JKS":
        unset = " (Kafka's default when unset)" if raw is None else ""
        raise ClientPropertiesError(
            f"{key}: JKS{unset} is not supported; " + _JKS_HINT.format(key=key)
        )
    if store not in STORE_TYPES:
        raise ClientPropertiesError(f"{key}: {store} is not supported; use PEM or PKCS12")
    return store


def _truststore(props: Mapping[str, str]) -> str | None:
    location, inline = (
        props.get("ssl.truststore.location"),
        props.get("ssl.truststore.certificates"),
    )
    given = location is not None or inline is not None
    store = _store_type(props, "truststore", given)
    if store is None or not given:
        return None  # the system's CAs, as a JVM client uses its cacerts
    if location is not None and inline is not None:
        raise ClientPropertiesError(
            "ssl.truststore.certificates: set it or ssl.truststore.location, not both"
        )
    if inline is not None:
        if store != "PEM":
            raise ClientPropertiesError(
                "ssl.truststore.certificates: needs ssl.truststore.type=PEM"
            )
        return _certificates("ssl.truststore.certificates", inline.encode())
    assert location is not None
    data = _read("ssl.truststore.location", location)
    if store == "PEM":
        return _certificates("ssl.truststore.location", data)
    loaded = _pkcs12(props, "truststore", location, data)
    certs = [c.certificate for c in loaded.additional_certs]
    certs += [loaded.cert.certificate] if loaded.cert is not None else []
    if not certs:
        raise ClientPropertiesError(f"ssl.truststore.location: {location}: holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _keystore(props: Mapping[str, str]) -> tuple[str | None, str | None]:
    location = props.get("ssl.keystore.location")
    chain, key = props.get("ssl.keystore.certificate.chain"), props.get("ssl.keystore.key")
    given = any(v is not None for v in (location, chain, key))
    store = _store_type(props, "keystore", given)
    if store is None or not given:
        return None, None  # no client certificate
    key_password = props.get("ssl.key.password")
    if chain is not None or key is not None:
        if store != "PEM" or location is not None or chain is None or key is None:
            raise ClientPropertiesError(
                "ssl.keystore.certificate.chain and ssl.keystore.key go together, with "
                "ssl.keystore.type=PEM and no ssl.keystore.location"
            )
        return _certificates("ssl.keystore.certificate.chain", chain.encode()), _private_key(
            "ssl.keystore.key", key.encode(), key_password
        )
    assert location is not None
    data = _read("ssl.keystore.location", location)
    if store == "PEM":
        # Kafka's PEM keystore file: the private key and the certificate chain, in one file.
        return _certificates("ssl.keystore.location", data), _private_key(
            "ssl.keystore.location", data, key_password
        )
    loaded = _pkcs12(props, "keystore", location, data)
    if loaded.key is None or loaded.cert is None:
        raise ClientPropertiesError(
            f"ssl.keystore.location: {location}: holds no private key with its certificate"
        )
    certs = [loaded.cert.certificate, *(c.certificate for c in loaded.additional_certs)]
    pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
    return pem, _pkcs8(loaded.key)


def _pkcs12(
    props: Mapping[str, str], store: str, location: str, data: bytes
) -> pkcs12.PKCS12KeyAndCertificates:
    password = props.get(f"ssl.{store}.password")
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise ClientPropertiesError(
            f"ssl.{store}.location: {location}: not a PKCS12 store that "
            f"ssl.{store}.password opens ({exc})"
        ) from None


def _read(key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise ClientPropertiesError(f"{key}: {location}: cannot read: {exc.strerror}") from None


def _certificates(key: str, data: bytes) -> str:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ClientPropertiesError(f"{key}: no PEM certificate found") from None
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _private_key(key: str, data: bytes, password: str | None) -> str:
    begin = data.find(b"-----BEGIN ")
    while begin >= 0 and b"PRIVATE KEY-----" not in data[begin : data.find(b"\n", begin)]:
        begin = data.find(b"-----BEGIN ", begin + 1)
    if begin < 0:
        raise ClientPropertiesError(f"{key}: no PEM private key found")
    try:
        loaded = serialization.load_pem_private_key(
            data[begin:], password.encode() if password else None
        )
    except (ValueError, TypeError) as exc:
        raise ClientPropertiesError(
            f"{key}: the private key cannot be read, or ssl.key.password does not open it ({exc})"
        ) from None
    return _pkcs8(loaded)


def _pkcs8(key: PrivateKeyTypes) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _min_version(props: Mapping[str, str]) -> str:
    """The oldest of ssl.enabled.protocols that Python's ssl speaks (TLSv1.2 when unset)."""
    enabled = [p.strip() for p in props.get("ssl.enabled.protocols", "").split(",") if p.strip()]
    known = [p for p in enabled if p in ("TLSv1.2", "TLSv1.3")]
    if enabled and not known:
        raise ClientPropertiesError(
            f"ssl.enabled.protocols: {', '.join(enabled)}: use TLSv1.2 and/or TLSv1.3"
        )
    return min(known, default="TLSv1.2")
