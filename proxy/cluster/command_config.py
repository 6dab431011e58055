"""`--command-config`: a Kafka client's .properties file, read for the SASL credentials it names.

Java .properties as java.util.Properties.load reads them, and a sasl.jaas.config login module as
Kafka's JaasConfig reads it; the settings this proxy cannot honour are refused with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from kafka_policy_proxy.proxy.cluster.client import SASL_MECHANISMS, SaslCredentials

LOGIN_MODULES = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
)
CONTROL_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")
# Client settings that plug Java classes into the login; only a JVM client can honour them.
JAVA_CLASS_KEYS = (
    "sasl.login.class",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
)


class CommandConfigError(ValueError):
    """The --command-config file cannot be used; the message names the key and the reason."""


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANK = " \t\f"  # java.util.Properties' whitespace
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse .properties text as java.util.Properties.load does (a repeated key: the last wins)."""
    properties: dict[str, str] = {}
    lines = enumerate(_LINE_BREAK.split(text), start=1)
    for number, natural in lines:
        piece = natural.lstrip(_BLANK)
        if not piece or piece[0] in "#!":
            continue  # a comment line is never continued
        parts = []
        # An odd number of trailing backslashes joins the next line, minus its leading blanks.
        while (len(piece) - len(piece.rstrip("\\"))) % 2:
            parts.append(piece[:-1])
            piece = next(lines, (0, ""))[1].lstrip(_BLANK)
        parts.append(piece)
        key, value = _split_property("".join(parts))
        try:
            properties[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise CommandConfigError(f"line {number}: {exc}") from None
    return properties


def _split_property(line: str) -> tuple[str, str]:
    """Split at the first unescaped '=', ':' or blank; blanks and one separator are dropped."""
    escaped = False
    end = len(line)
    for index, char in enumerate(line):
        if not escaped and (char in "=:" or char in _BLANK):
            end = index
            break
        escaped = char == "\\" and not escaped
    rest = line[end:].lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return line[:end], rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        escaped = next(chars, "")
        if escaped == "u":
            digits = "".join(next(chars, "") for _ in range(4))
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ValueError(f"malformed \\uxxxx escape \\u{digits}")
            out.append(chr(int(digits, 16)))
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    return "".join(out)


def command_config_credentials(properties: Mapping[str, str]) -> SaslCredentials | None:
    """The SASL credentials a Kafka client config asks for (None: PLAINTEXT); refuses the rest."""
    # Kafka trims string settings and reads the protocol in any case.
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol in ("SSL", "SASL_SSL"):
        raise CommandConfigError(
            f"security.protocol: {protocol} is not supported: this command does not speak TLS "
            "to the brokers; use PLAINTEXT or SASL_PLAINTEXT"
        )
    if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT"):
        raise CommandConfigError(
            f"security.protocol: unknown protocol {protocol!r}; use PLAINTEXT or SASL_PLAINTEXT"
        )
    if protocol == "PLAINTEXT":
        return None  # as in Kafka's clients, the sasl.* settings do not apply
    for key in JAVA_CLASS_KEYS:
        if key in properties:
            raise CommandConfigError(
                f"{key}: not supported: it plugs a Java class into the login, which only a JVM "
                "client can load"
            )
    mechanism = properties.get("sasl.mechanism", "").strip()
    if not mechanism:
        raise CommandConfigError(
            "sasl.mechanism: not set, so Kafka's default GSSAPI (Kerberos) would apply, which is "
            f"not supported; use one of {', '.join(SASL_MECHANISMS)}"
        )
    if mechanism not in SASL_MECHANISMS:
        raise CommandConfigError(
            f"sasl.mechanism: {mechanism} is not supported; use one of {', '.join(SASL_MECHANISMS)}"
        )
    jaas = properties.get("sasl.jaas.config", "").strip()
    if not jaas:
        raise CommandConfigError(
            "sasl.jaas.config: not set; SASL_PLAINTEXT needs it (a JAAS file named by "
            "java.security.auth.login.config is not supported)"
        )
    try:
        module, options = _jaas_login(jaas)
    except ValueError as exc:
        raise CommandConfigError(f"sasl.jaas.config: {exc}") from None
    if module not in LOGIN_MODULES:
        raise CommandConfigError(
            f"sasl.jaas.config: login module {module} is not supported; use {LOGIN_MODULES[0]} "
            f"or {LOGIN_MODULES[1]}"
        )
    # Other options are ignored, as Kafka's login modules ignore them; this one changes the login.
    if options.get("tokenauth", "").lower() == "true":
        raise CommandConfigError(
            "sasl.jaas.config: tokenauth=true (delegation tokens) is not supported"
        )
    for option in ("username", "password"):
        if option not in options:
            raise CommandConfigError(f"sasl.jaas.config: the {option} option is missing")
    return SaslCredentials(mechanism, options["username"], options["password"])


def load_command_config(path: Path) -> SaslCredentials | None:
    """Read a --command-config file; errors name the file, the key and the reason."""
    try:
        # ISO 8859-1, as java.util.Properties.load(InputStream): other characters need \uXXXX.
        text = path.read_bytes().decode("latin-1")
    except OSError as exc:
        raise CommandConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return command_config_credentials(parse_properties(text))
    except CommandConfigError as exc:
        raise CommandConfigError(f"{path}: {exc}") from None


def _jaas_login(text: str) -> tuple[str, dict[str, str]]:
    """The one login module and its options in a sasl.jaas.config value (Kafka's JaasConfig)."""
    tokens = _jaas_tokens(text)
    entries: list[tuple[str, dict[str, str]]] = []
    for kind, module in tokens:
        if kind in ";=":
            raise ValueError(f"a login module class expected, not {kind!r}")
        flag = _token(tokens, f"a control flag after {module}")[1]
        if flag.upper() not in CONTROL_FLAGS:
            raise ValueError(f"invalid control flag {flag!r} (use required)")
        options: dict[str, str] = {}
        while (key := _token(tokens, "';' at the end"))[0] != ";":
            name = key[1]
            if key[0] == "=" or _token(tokens, f"'=' after {name}")[0] != "=":
                raise ValueError(f"option name and '=' expected, not {name!r}")
            value = _token(tokens, f"a value for {name}")
            if value[0] in ";=":
                raise ValueError(f"a value expected for {name}, not {value[0]!r}")
            options[name] = value[1]
        entries.append((module, options))
    if len(entries) != 1:
        raise ValueError(f"{len(entries)} login modules; exactly one is needed")
    return entries[0]


def _token(tokens: Iterator[tuple[str, str]], what: str) -> tuple[str, str]:
    token = next(tokens, None)
    if token is None:
        raise ValueError(f"{what} expected, but the value ends")
    return token


_JAAS_WORD = re.compile(r"[^\x00-\x20;=/\"']+")
_JAAS_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _jaas_tokens(text: str) -> Iterator[tuple[str, str]]:
    """(kind, text) tokens as Kafka's StreamTokenizer setup reads them: word, quoted, ';', '='."""
    position = 0
    while position < len(text):
        char = text[position]
        if char <= " ":
            position += 1
        elif text.startswith("/*", position):
            end = text.find("*/", position + 2)
            position = len(text) if end < 0 else end + 2
        elif char == "/":  # '//' and a lone '/' both comment out the rest of the line
            match = _LINE_BREAK.search(text, position)
            position = len(text) if match is None else match.end()
        elif char in ";=":
            yield char, char
            position += 1
        elif char in "\"'":
            value, position = _jaas_quoted(text, position)
            yield "quoted", value
        else:
            word = _JAAS_WORD.match(text, position)
            assert word is not None  # `char` itself is a word character
            yield "word", word.group()
            position = word.end()


def _jaas_quoted(text: str, start: int) -> tuple[str, int]:
    """The quoted string at `start` with StreamTokenizer's escapes, and where it ends."""
    quote = text[start]
    out = []
    position = start + 1
    while position < len(text) and text[position] not in (quote, "\n", "\r"):
        char = text[position]
        position += 1
        if char != "\\" or position == len(text):
            out.append(char)
            continue
        char = text[position]
        position += 1
        if char in "01234567":
            # Up to three octal digits, the value staying within one byte.
            digits = char
            limit = 3 if char <= "3" else 2
            while len(digits) < limit and position < len(text) and text[position] in "01234567":
                digits += text[position]
                position += 1
            out.append(chr(int(digits, 8)))
        else:
            out.append(_JAAS_ESCAPES.get(char, char))
    if position == len(text) or text[position] != quote:
        raise ValueError(f"unterminated quoted value starting {text[start : start + 12]!r}")
    return "".join(out), position + 1
