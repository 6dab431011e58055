"""Kafka client properties: java.util.Properties parsing, and the SASL login they ask for."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_policy_proxy.proxy.kafka_client.properties import (
    ClientPropertiesError,
    parse_properties,
)
from kafka_policy_proxy.proxy.kafka_client.security import client_security, load_client_security

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


# -- parse_properties: java.util.Properties.load


def test_separators_comments_and_blank_lines() -> None:
    text = """
# a comment
! another comment
   # an indented comment
a=1
b = 2
c:3
d : 4
e 5
f\t=\t6
   g=7
"""
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6",
        "g": "7",
    }


def test_values_keep_trailing_blanks_and_later_separators() -> None:
    assert parse_properties("a = x = y  \nb==c\nc::d\nd  =  :e") == {
        "a": "x = y  ",
        "b": "=c",
        "c": ":d",
        "d": ":e",
    }


def test_a_key_alone_or_with_an_empty_value() -> None:
    assert parse_properties("alone\nempty=\nblank=   ") == {"alone": "", "empty": "", "blank": ""}


def test_continuation_lines_drop_their_leading_blanks() -> None:
    text = "jaas=first \\\n      second \\\n\t  third\nnext=1"
    assert parse_properties(text) == {"jaas": "first second third", "next": "1"}


def test_an_even_number_of_trailing_backslashes_does_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}
    assert parse_properties("a=x\\\\\\\n  y") == {"a": "x\\y"}


def test_a_continued_line_that_looks_like_a_comment_is_part_of_the_value() -> None:
    assert parse_properties("a=1\\\n  # not a comment") == {"a": "1# not a comment"}


def test_a_comment_ending_in_a_backslash_is_not_continued() -> None:
    assert parse_properties("# comment \\\na=1") == {"a": "1"}


def test_a_trailing_backslash_at_the_end_of_the_text_is_dropped() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}


def test_every_line_ending() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\nd=4") == {"a": "1", "b": "2", "c": "3", "d": "4"}
    assert parse_properties("a=1\\\r\n  2") == {"a": "12"}


def test_escapes_in_keys_and_values() -> None:
    text = r"key\=with\:seps\ and\ blank = tab\there\u0041\\\n\x"
    assert parse_properties(text) == {"key=with:seps and blank": "tab\thereA\\\nx"}


def test_the_last_of_a_repeated_key_wins() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


@pytest.mark.parametrize("escape", [r"\u12", r"\u12G4", r"\uzzzz"])
def test_a_malformed_unicode_escape_names_the_line(escape: str) -> None:
    with pytest.raises(ClientPropertiesError, match=r"line 3: malformed \\uxxxx escape"):
        parse_properties(f"a=1\n\nb={escape}")


# -- client_security: the SASL login Kafka's clients would make with these settings


def login(properties: dict[str, str]) -> tuple[str, str, str] | None:
    security = client_security(properties)
    if security.sasl_mechanism is None:
        return None
    assert security.sasl_username is not None and security.sasl_password is not None
    return security.sasl_mechanism, security.sasl_username, security.sasl_password


def sasl(mechanism: str, jaas: str, **extra: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": jaas,
        **extra,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_plaintext_with_username_and_password(mechanism: str) -> None:
    module = PLAIN if mechanism == "PLAIN" else SCRAM
    jaas = f'{module} required username="alice" password="alice-secret";'
    assert login(sasl(mechanism, jaas)) == (mechanism, "alice", "alice-secret")


@pytest.mark.parametrize("properties", [{}, {"security.protocol": "PLAINTEXT"}])
def test_plaintext_needs_no_credentials(properties: dict[str, str]) -> None:
    assert login(properties) is None


def test_plaintext_ignores_sasl_settings_as_kafka_does() -> None:
    properties = sasl("GSSAPI", "whatever", **{"security.protocol": "plaintext"})
    assert login(properties) is None


def test_other_client_settings_are_ignored() -> None:
    jaas = f'{SCRAM} required username="a" password="b";'
    properties = sasl(
        "SCRAM-SHA-512",
        jaas,
        **{"client.id": "x", "request.timeout.ms": "1000", "ssl.truststore.location": "/t"},
    )
    assert login(properties) == ("SCRAM-SHA-512", "a", "b")


def test_kafka_trims_settings_and_reads_the_protocol_in_any_case() -> None:
    properties = {
        "security.protocol": " sasl_plaintext ",
        "sasl.mechanism": " SCRAM-SHA-256\t",
        "sasl.jaas.config": f"  {SCRAM} required username=bob password=bob-secret;  ",
    }
    assert login(properties) == ("SCRAM-SHA-256", "bob", "bob-secret")


@pytest.mark.parametrize(
    ("jaas", "username", "password"),
    [
        # Unquoted words, single quotes, any control flag in any case, a second option order.
        (f"{SCRAM} required username=u password=p;", "u", "p"),
        (f"{SCRAM} REQUISITE password='p w' username='u';", "u", "p w"),
        (f'{PLAIN} optional username="u"\npassword="p" ;', "u", "p"),
        # A PLAIN module with a SCRAM mechanism works in Kafka too: both only hand over the
        # username and password.
        (f"{PLAIN} sufficient username=u password=p;", "u", "p"),
        # StreamTokenizer escapes in quoted strings.
        (f'{SCRAM} required username="a\\"b" password="c\\\\d\\te\\101";', 'a"b', "c\\d\teA"),
        # Comments, and '=' and ';' inside quotes.
        (f'/* x */ {SCRAM} required // y\n username="u" password="p=;q"; // z', "u", "p=;q"),
        # Other options are ignored, as by Kafka's login modules.
        (f'{SCRAM} required username="u" password="p" tokenauth="false" x="y";', "u", "p"),
    ],
)
def test_jaas_config_forms(jaas: str, username: str, password: str) -> None:
    assert login(sasl("SCRAM-SHA-256", jaas)) == ("SCRAM-SHA-256", username, password)


GOOD_JAAS = f'{SCRAM} required username="u" password="p";'


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol: unknown protocol 'TLS'"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": GOOD_JAAS},
            "sasl.mechanism: GSSAPI (Kafka's default when unset: Kerberos) is not supported",
        ),
        (sasl("GSSAPI", GOOD_JAAS), "sasl.mechanism: GSSAPI is not supported"),
        (sasl("OAUTHBEARER", GOOD_JAAS), "sasl.oauthbearer.token.endpoint.url: not set"),
        (sasl("scram-sha-256", GOOD_JAAS), "sasl.mechanism: scram-sha-256 is not supported"),
        (sasl("PLAIN", ""), "sasl.jaas.config: not set; PLAIN needs it"),
        (
            sasl(
                "PLAIN",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            ),
            "sasl.jaas.config: login module "
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule is not supported",
        ),
        (
            sasl("PLAIN", "com.sun.security.auth.module.Krb5LoginModule required;"),
            "sasl.jaas.config: login module com.sun.security.auth.module.Krb5LoginModule is not "
            "supported",
        ),
        (
            sasl("SCRAM-SHA-512", f'{SCRAM} required username="u" password="p" tokenauth=true;'),
            "sasl.jaas.config: tokenauth=true (delegation tokens) is not supported",
        ),
        (
            sasl("PLAIN", f'{PLAIN} required password="p";'),
            "sasl.jaas.config: the username option is missing",
        ),
        (
            sasl("PLAIN", f'{PLAIN} required username="u";'),
            "sasl.jaas.config: the password option is missing",
        ),
        (
            sasl("PLAIN", f'{PLAIN} required username="u" password="p"'),
            "sasl.jaas.config: ';' at the end expected, but the value ends",
        ),
        (sasl("PLAIN", PLAIN), f"sasl.jaas.config: a control flag after {PLAIN} expected"),
        (
            sasl("PLAIN", f'{PLAIN} mandatory username="u" password="p";'),
            "sasl.jaas.config: invalid control flag 'mandatory'",
        ),
        (
            sasl("PLAIN", f'{PLAIN} required username "u" password="p";'),
            "sasl.jaas.config: option name and '=' expected, not 'username'",
        ),
        (
            sasl("PLAIN", f"{PLAIN} required username=;"),
            "sasl.jaas.config: a value expected for username, not ';'",
        ),
        (
            sasl("PLAIN", f'{PLAIN} required username="u password="p";'),
            "sasl.jaas.config: unterminated quoted value",
        ),
        (
            sasl("PLAIN", f"{GOOD_JAAS} {GOOD_JAAS}"),
            "sasl.jaas.config: 2 login modules; exactly one is needed",
        ),
        (
            sasl("PLAIN", GOOD_JAAS, **{"sasl.login.callback.handler.class": "com.example.H"}),
            "sasl.login.callback.handler.class: not supported: it plugs a Java class",
        ),
        (
            sasl("PLAIN", GOOD_JAAS, **{"sasl.client.callback.handler.class": "com.example.H"}),
            "sasl.client.callback.handler.class: not supported",
        ),
    ],
)
def test_unsupported_or_broken_settings_are_refused(
    properties: dict[str, str], message: str
) -> None:
    with pytest.raises(ClientPropertiesError) as refused:
        login(properties)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


# -- load_client_security: the file


def test_a_file_as_kafkas_tools_read_it(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    # ISO 8859-1 bytes and a \u escape, both read as Java reads them.
    path.write_bytes(
        b"# for kafka-topics.sh and this command\n"
        b"security.protocol: SASL_PLAINTEXT\n"
        b"sasl.mechanism = SCRAM-SHA-512\n"
        b"sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        b'    username="j\xf6rg" \\\n'
        b'    password="s\\u00e9cret";\n'
    )
    security = load_client_security(path)
    assert (security.sasl_username, security.sasl_password) == ("jörg", "sécret")


def test_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=TLS\n")
    with pytest.raises(ClientPropertiesError, match=rf"^{path}: security.protocol: unknown"):
        load_client_security(path)
    with pytest.raises(ClientPropertiesError, match=rf"^{tmp_path / 'missing'}: cannot read: "):
        load_client_security(tmp_path / "missing")
