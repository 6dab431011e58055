"""The SCRAM exchange and the SASL credentials of the proxy's own Kafka client."""

from __future__ import annotations

import base64

import pytest

from kafka_policy_proxy.proxy.cluster.client import (
    SaslAuthenticationError,
    SaslCredentials,
    ScramClient,
)

# RFC 7677, section 3: one SCRAM-SHA-256 exchange.
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc7677_client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)


def test_scram_sha_256_matches_the_rfc_7677_exchange() -> None:
    scram = rfc7677_client()
    assert scram.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert scram.final_message(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    scram.verify_server_final(RFC7677_SERVER_FINAL)


def test_scram_rejects_a_wrong_server_signature() -> None:
    scram = rfc7677_client()
    scram.final_message(RFC7677_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslAuthenticationError, match="signature"):
        scram.verify_server_final(forged)


def test_scram_reports_the_servers_error() -> None:
    scram = rfc7677_client()
    scram.final_message(RFC7677_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="invalid-proof"):
        scram.verify_server_final(b"e=invalid-proof")


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==",
    ],
)
def test_scram_rejects_a_bad_server_first_message(server_first: bytes) -> None:
    with pytest.raises(SaslAuthenticationError):
        rfc7677_client().final_message(server_first)


def test_scram_escapes_the_username() -> None:
    scram = ScramClient("SCRAM-SHA-512", "a=b,c", "x", nonce="n0nce")
    assert scram.first_message() == b"n,,n=a=3Db=2Cc,r=n0nce"


def test_sasl_credentials_reject_an_unknown_mechanism() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslCredentials("GSSAPI", "user", "secret")
    assert "secret" not in repr(SaslCredentials("PLAIN", "user", "secret"))
