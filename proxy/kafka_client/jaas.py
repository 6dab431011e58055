"""sasl.jaas.config: one login module and its options, read as Kafka's JaasConfig reads them."""

from __future__ import annotations

import re
from collections.abc import Iterator

CONTROL_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def jaas_login(text: str) -> tuple[str, dict[str, str]]:
    """The one login module and its options in a sasl.jaas.config value; ValueError says why not."""
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
