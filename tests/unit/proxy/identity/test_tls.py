"""TLS principals: subject DNs and ssl.principal.mapping.rules match Java and Kafka.

Expected DNs and mapped names were produced by the JDK's X500Principal.getName() and Kafka
4.1.1's SslPrincipalMapper on the same inputs.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_policy_proxy.proxy.identity.tls import (
    MappingRuleError,
    NoMatchingRuleError,
    parse_mapping_rules,
    split_mapping_rules,
    subject_dn,
)

# --- TLS: subject DN as X500Principal.getName() prints it ---

CERT = """-----BEGIN CERTIFICATE-----
MIIEZzCCA0+gAwIBAgIUJz8kkWDooa9dnVfKfzGf3GMQKZ8wDQYJKoZIhvcNAQEL
BQAwgcIxCzAJBgNVBAYTAlVTMQswCQYDVQQIDAJDQTETMBEGA1UECgwKQWNtZSwg
SW5jLjEQMA4GA1UECwwHZW5nK29wczEOMAwGA1UECwwFI3RlYW0xHjAcBgNVBAMM
FSBhbGljZT1hZG1pbjsgPHg+InEiIDEgMB4GCSqGSIb3DQEJARYRYWxpY2VAZXhh
bXBsZS5jb20xDjAMBgNVBAUTBTEyMzQ1MQswCQYDVQQMDAJEcjEQMA4GA1UEYQwH
VkFUREUtMTAeFw0yNjExMjIwNDQ5NTBaFw0zNjExMTkwNDQ5NTBaMIHCMQswCQYD
VQQGEwJVUzELMAkGA1UECAwCQ0ExEzARBgNVBAoMCkFjbWUsIEluYy4xEDAOBgNV
BAsMB2VuZytvcHMxDjAMBgNVBAsMBSN0ZWFtMR4wHAYDVQQDDBUgYWxpY2U9YWRt
aW47IDx4PiJxIiAxIDAeBgkqhkiG9w0BCQEWEWFsaWNlQGV4YW1wbGUuY29tMQ4w
DAYDVQQFEwUxMjM0NTELMAkGA1UEDAwCRHIxEDAOBgNVBGEMB1ZBVERFLTEwggEi
MA0GCSqGSIb3DQEBAQUAA4IBDwAwggEKAoIBAQCc9Of2MMq7/Tv/15dUCHgRSXdO
s3IjpWwP6FwgmA6tfBGAV62C0uAAF9K8TTVmdLHP5dX66c6ZrneJUPxrEZbObfbN
Jn2b6k9ES5tUfcb2tFl0sSf1nPcXXZc+ziuOCd0zikLNVjecl7XVFAfVo2jJL+zD
EMchYvvwRW/yraikfGhq0cPG+4t5uk39nSvNzZUmbJu0QTC/kobkUqfBSgV2nUUI
Hp+UPNYnk6Rv6yOZD79O+cMTxpZy/iRFqAbiy6CMKdOjbICFHCD4J9ZsPfl2rrFG
24ldzUj8owjvURLwE0EDTpEF04eees+9Snlrz6HOoJ+ChPDyPXyDE3cicftFAgMB
AAGjUzBRMB0GA1UdDgQWBBT74LAID0waOlVQ+3ydhD9aPdUBrzAfBgNVHSMEGDAW
gBT74LAID0waOlVQ+3ydhD9aPdUBrzAPBgNVHRMBAf8EBTADAQH/MA0GCSqGSIb3
DQEBCwUAA4IBAQCXo7IkZOmBRoPtM8DPknh0YZpsqLXAcUFZc8h42WtAuU/lWDO9
/ied/OM741vtyj4IS6qlg6qf45bKZTiSoDbAcGcytXRF2E/z7+/TSHKVqx6L2ahj
K4JKpwtkVSw8RdUoRhqfxUlWAWGsJixlNEaZYnnPd8JOC3r/Koi507w7S753hg/P
lUY5PYA9MYDdJyHfzTqmqgCOjda92Wwy6TErDW1XALLI8acoa7tuS2TN39KMCVtV
mxvPtndmg0BT/BMZrROifEoITrCAkP72QHHfBszCIMpqD8f9ZCzATFLQqByz0Nf9
2Me7NXWl/jrX26pMzi40GjxV31GFZe1wA7M5
-----END CERTIFICATE-----
"""
CERT_DN = (
    "2.5.4.97=#0c0756415444452d31,2.5.4.12=#0c024472,2.5.4.5=#13053132333435,"
    "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,"
    'CN=\\ alice\\=admin\\; \\<x\\>\\"q\\"\\ ,OU=\\#team,OU=eng\\+ops,O=Acme\\, Inc.,ST=CA,C=US'
)


def test_dn_of_a_real_certificate(tmp_path: Path) -> None:
    path = tmp_path / "client.pem"
    path.write_text(CERT)
    # The same decoder getpeercert() uses, so this is the structure the proxy will see.
    subject = ssl._ssl._test_decode_cert(str(path))["subject"]  # type: ignore[attr-defined]
    assert subject_dn(subject) == CERT_DN


@pytest.mark.parametrize(
    ("subject", "dn"),
    [
        (
            [
                [("domainComponent", "com")],
                [("domainComponent", "example")],
                [("userId", "bob"), ("commonName", "Bob M\u00fcller")],
                [("streetAddress", "1 Main St")],
                [("localityName", "Z\u00fcrich\\x")],
            ],
            "L=Z\u00fcrich\\\\x,STREET=1 Main St,UID=bob+CN=Bob M\u00fcller,DC=example,DC=com",
        ),
        (
            [
                [("commonName", "  #x,y ")],
                [("emailAddress", "a" * 116 + "@example.com")],
            ],
            "1.2.840.113549.1.9.1=#168180"
            + "61" * 116
            + "406578616d706c652e636f6d,CN=\\ \\ \\#x\\,y\\ ",
        ),
        ([[("commonName", "   ")]], "CN=\\ \\ \\ "),
        ([[("commonName", "a\x00b\r")]], "CN=a\\00b\\\r"),
        ([[("1.2.3.4", "v")]], "1.2.3.4=#0c0176"),
        ([], ""),
    ],
)
def test_dn_matches_java(subject: list[list[tuple[str, str]]], dn: str) -> None:
    assert subject_dn(subject) == dn


def test_dn_refuses_attributes_without_a_known_oid() -> None:
    with pytest.raises(ValueError, match="'favouriteColour'"):
        subject_dn([[("favouriteColour", "blue")]])


# --- TLS: ssl.principal.mapping.rules ---

KAFKA_RULES = [
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "DEFAULT",
]


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_mapping_examples(dn: str, name: str) -> None:
    mapper = parse_mapping_rules(KAFKA_RULES)
    assert mapper.map(dn) == name
    assert mapper.principal(dn) == f"User:{name}"


def test_escaped_comma_in_a_dn() -> None:
    mapper = parse_mapping_rules(split_mapping_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT"))
    assert mapper.map("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_the_certificate_dn_maps_end_to_end() -> None:
    mapper = parse_mapping_rules([r"RULE:^.*,CN=\\ ([a-z]+)\\=.*$/$1/U"])
    assert mapper.principal(CERT_DN) == "User:ALICE"


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        (["RULE:CN=([a-z]+)/$1@$4/"], "CN=bob", "bob@$4"),  # beyond the groups: literal
        (["RULE:CN=([a-z]+)/$12/"], "CN=bob", "bob2"),  # Java takes digits while a group exists
        (["RULE:CN=([a-z]+)/$01/"], "CN=bob", "bob"),
        (["RULE:CN=([a-z]+)/$0/"], "CN=bob", "CN=bob"),
        (["RULE:CN=([a-z]+)/\\$1/"], "CN=bob", "$1"),
        (["RULE:CN=([a-z]+)/a\\/b$1/U"], "CN=bob", "A/BBOB"),
        (["RULE:CN=([a-z]+),O=a\\/b/$1/"], "CN=bob,O=a/b", "bob"),
        (["RULE:CN=(a)(b)?/[$2]/"], "CN=a", "[]"),
        (["RULE:CN=(?P<who>[a-z]+)/${who}/"], "CN=bob", "bob"),
        (["RULE:(.*)/x/"], "abc", "xx"),  # replaceAll also replaces the empty match at the end
        (["RULE:(.*?)/x/"], "abc", "xaxbxcx"),  # and steps past empty matches as Java does
        (["RULE:CN=([^,]+).*/$1/L"], "CN=\u00c4BC,O=x", "\u00e4bc"),
        (["RULE:CN=([^,]+).*/$1/U"], "CN=stra\u00dfe,O=x", "STRASSE"),
        ([" RULE:CN=(.*)/$1/ "], "CN=bob", "bob"),  # surrounding whitespace, as Kafka trims
        (["DEFAULT"], "", ""),
        (
            ["RULE:(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)/$10-$11-$12/"],
            "abcdefghijk",
            "j-k-a2",
        ),
    ],
)
def test_replacements_follow_java_and_kafka(rules: list[str], dn: str, name: str) -> None:
    assert parse_mapping_rules(rules).map(dn) == name


def test_ascii_classes_as_in_java() -> None:
    mapper = parse_mapping_rules([r"RULE:\w+=(\w+)/$1/"])
    assert mapper.map("CN=bob") == "bob"
    with pytest.raises(NoMatchingRuleError):
        mapper.map("CN=b\u00f6b")


def test_no_matching_rule_raises_like_kafka() -> None:
    mapper = parse_mapping_rules(["RULE:^CN=([a-z]+)$/$1/", "RULE:^O=(.*)$/$1/"])
    assert mapper.map("O=acme") == "acme"
    with pytest.raises(NoMatchingRuleError, match="OU=x"):
        mapper.map("OU=x")
    with pytest.raises(NoMatchingRuleError):
        parse_mapping_rules([]).map("CN=bob")


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        ("", []),
        ("DEFAULT", ["DEFAULT"]),
        ("RULE://,DEFAULT", ["RULE://", "DEFAULT"]),
        ("  RULE:   /     / ,  DEFAULT  ", ["RULE:   /     /", "DEFAULT"]),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            ["RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1/", "DEFAULT"],
        ),
        (",   , , ,      , , ,   ", []),
        (",,RULE://,,,DEFAULT,,", ["RULE://", "DEFAULT"]),
        ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", ["RULE:\\**\\/+/*/L", "RULE:\\/*\\**/**/"]),
        (
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,"
            "RULE:, DEFAULT, /DEFAULT/,DEFAULT",
            [
                "RULE:,RULE:,/,RULE:,\\//U",
                "RULE:,/RULE:,/",
                "RULE:,RULE:,/L,RULE:,/L",
                "RULE:, DEFAULT, /DEFAULT/",
                "DEFAULT",
            ],
        ),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT", [KAFKA_RULES[0], "DEFAULT"]),
        ("default, DEFAULT", ["default", "DEFAULT"]),
    ],
)
def test_splitting_kafkas_comma_separated_form(value: str, rules: list[str]) -> None:
    assert split_mapping_rules(value) == rules


@given(
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x85\u2028\u2029")
    )
)
def test_slash_and_comma_escaping_round_trips(dn: str) -> None:
    literal = re.escape(dn).replace("/", "\\/")
    mapper = parse_mapping_rules(split_mapping_rules(f"RULE:{literal}/ok,\\/done/, DEFAULT"))
    assert mapper.map(dn) == "ok,/done"
    assert mapper.map(dn + "x") == dn + "x"


@pytest.mark.parametrize(
    ("rules", "position", "reason"),
    [
        (["default"], 1, "expected DEFAULT or RULE"),
        (["DEFAUL"], 1, "expected DEFAULT or RULE"),
        (["DEFAULT/L"], 1, "expected DEFAULT or RULE"),
        (["DEFAULT", "rule:^CN=(.*?)$/$1/"], 2, "expected DEFAULT or RULE"),
        (["RULE:CN=(.*?),OU=ServiceUsers.*/$1"], 1, "expected DEFAULT or RULE"),
        (["RULE:^CN=(.*?)$/$1/L/U"], 1, "expected DEFAULT or RULE"),
        (["RULE:^CN=(.*?)$/L"], 1, "expected DEFAULT or RULE"),
        (["RULE:a/b/ L"], 1, "expected DEFAULT or RULE"),
        (["RULE:a/b/LU"], 1, "expected DEFAULT or RULE"),
        (["DEFAULT", "DEFAULT", ""], 3, "expected DEFAULT or RULE"),
        (["DEFAULT", "RULE:(/x/"], 2, "bad regex: missing \\)"),
        (["RULE:[a-z&&[^b]]/x/"], 1, "bad regex: Possible set intersection"),
        (["RULE:\\p{Alpha}/x/"], 1, "bad regex"),
        # Kafka accepts these, then throws on every DN they match:
        (["RULE:CN=a/$1/"], 1, "group 1, which the regex lacks"),
        (["RULE:CN=(a)/$1$2$3/"], 1, "group 3, which the regex lacks"),
        (["RULE:CN=(a)/x$y/"], 1, "'\\$' must start a group reference"),
        (["RULE:CN=(a)/x$/"], 1, "'\\$' must start a group reference"),
        (["RULE:CN=(a)/${nope}/"], 1, "names group \\{nope\\}"),
        (["RULE:CN=(a)/$99999999999/"], 1, "overflows"),
    ],
)
def test_bad_rules_name_their_position_and_reason(
    rules: list[str], position: int, reason: str
) -> None:
    with pytest.raises(MappingRuleError, match=reason) as caught:
        parse_mapping_rules(rules)
    assert caught.value.position == position
    assert str(caught.value).startswith(f"principal mapping rule {position} (")
