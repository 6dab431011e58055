"""Kafka client properties: a .properties file read as java.util.Properties reads it, and
Kafka's config providers in its values (`${file:PATH:KEY}`, `${dir:DIR:FILE}`, `${env:NAME}`).

Secrets stay out of the file: FileConfigProvider reads KEY from another .properties file,
DirectoryConfigProvider reads the file FILE in DIR (a Kubernetes Secret volume), and
EnvVarConfigProvider an environment variable. Unlike Kafka, a reference that resolves to
nothing is refused (naming the key), never left in the value as it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path


class ClientPropertiesError(ValueError):
    """The client properties cannot be used; the message names the key and the reason."""


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
            raise ClientPropertiesError(f"line {number}: {exc}") from None
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


# Kafka's ConfigTransformer pattern: ${provider:[path:]key}.
_REFERENCE = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")
_PROVIDER_CLASSES = {
    "org.apache.kafka.common.config.provider.FileConfigProvider": "file",
    "org.apache.kafka.common.config.provider.DirectoryConfigProvider": "dir",
    "org.apache.kafka.common.config.provider.EnvVarConfigProvider": "env",
}
PROVIDERS_KEY = "config.providers"


def resolve_providers(
    properties: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The properties with every ${provider:path:key} replaced; refuses what cannot resolve.

    The names file, dir and env need no `config.providers` line (Java clients do need one);
    a name declared there must be one of Kafka's three provider classes.
    """
    environ = os.environ if environ is None else environ
    kinds = _provider_kinds(properties)
    allowed = {
        name: [Path(p.strip()) for p in paths.split(",") if p.strip()]
        for name in kinds
        if (paths := properties.get(f"{PROVIDERS_KEY}.{name}.param.allowed.paths")) is not None
    }
    resolved: dict[str, str] = {}
    for key, value in properties.items():
        if key.startswith(PROVIDERS_KEY):
            continue  # the providers' own settings are not transformed, as in Kafka

        def replace(match: re.Match[str], key: str = key) -> str:
            name, path, item = match.group(1), match.group(3), match.group(4)
            if name not in kinds:
                raise ClientPropertiesError(
                    f"{key}: unknown config provider {name!r} in {match.group()} (use file, dir "
                    "or env, or declare it in config.providers)"
                )
            pattern = properties.get(f"{PROVIDERS_KEY}.{name}.param.allowlist.pattern")
            visible = environ if pattern is None else _allowlisted(environ, pattern)
            return _lookup(key, kinds[name], path, item, allowed=allowed.get(name), environ=visible)

        resolved[key] = _REFERENCE.sub(replace, value)
    return resolved


def _allowlisted(environ: Mapping[str, str], pattern: str) -> dict[str, str]:
    try:
        allow = re.compile(pattern)
    except re.error as exc:
        raise ClientPropertiesError(f"allowlist.pattern: {pattern!r}: {exc}") from None
    return {name: value for name, value in environ.items() if allow.fullmatch(name)}


def _provider_kinds(properties: Mapping[str, str]) -> dict[str, str]:
    kinds = {"file": "file", "dir": "dir", "env": "env"}
    for name in filter(None, (n.strip() for n in properties.get(PROVIDERS_KEY, "").split(","))):
        class_key = f"{PROVIDERS_KEY}.{name}.class"
        java_class = properties.get(class_key, "").strip()
        if java_class not in _PROVIDER_CLASSES:
            raise ClientPropertiesError(
                f"{class_key}: {java_class or 'not set'}: only Kafka's FileConfigProvider, "
                "DirectoryConfigProvider and EnvVarConfigProvider are supported"
            )
        kinds[name] = _PROVIDER_CLASSES[java_class]
    return kinds


def _lookup(
    key: str,
    kind: str,
    path: str | None,
    item: str,
    *,
    allowed: list[Path] | None,
    environ: Mapping[str, str],
) -> str:
    """One reference's value, from the file, the directory or the environment."""
    reference = f"${{{kind}:{path + ':' if path else ''}{item}}}"
    if kind == "env":
        # Kafka's EnvVarConfigProvider ignores the path, and hides names its allowlist rejects.
        if item not in environ:
            raise ClientPropertiesError(f"{key}: {reference}: the environment has no {item}")
        return environ[item]
    if not path:
        raise ClientPropertiesError(f"{key}: {reference}: a {kind} reference needs a path")
    source = Path(path) if kind == "file" else Path(path) / item
    if allowed is not None and not any(
        os.path.normpath(source).startswith(os.path.join(os.path.normpath(a), "")) for a in allowed
    ):
        raise ClientPropertiesError(f"{key}: {reference}: {source} is outside allowed.paths")
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise ClientPropertiesError(
            f"{key}: {reference}: cannot read {source}: {exc.strerror}"
        ) from None
    if kind == "dir":
        # A Secret volume's file, whole: Kafka's DirectoryConfigProvider keeps it as it is.
        return data.decode()
    values = parse_properties(data.decode("latin-1"))
    if item not in values:
        raise ClientPropertiesError(f"{key}: {reference}: {source} has no key {item}")
    return values[item]


def read_properties(path: Path) -> dict[str, str]:
    """Read a client .properties file and resolve its config providers; errors name the file."""
    try:
        # ISO 8859-1, as java.util.Properties.load(InputStream): other characters need \uXXXX.
        text = path.read_bytes().decode("latin-1")
    except OSError as exc:
        raise ClientPropertiesError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return resolve_providers(parse_properties(text))
    except ClientPropertiesError as exc:
        raise ClientPropertiesError(f"{path}: {exc}") from None
