"""Who a TLS client is: its certificate subject as Java prints it, mapped by Kafka's rules.

`subject_dn` builds the DN as X500Principal.getName() does; `parse_mapping_rules` reads
`ssl.principal.mapping.rules` and maps that DN to a principal as SslPrincipalMapper does.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from kafka_policy_proxy.proxy.identity.principal import user_principal

# --- the subject DN --------------------------------------------------------------------------

# X500Principal.getName() spells only RFC 2253's own keywords; any other attribute becomes
# its dotted OID and "#" + the hex of its DER value.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_UTF8_STRING, _PRINTABLE_STRING, _IA5_STRING = 0x0C, 0x13, 0x16
# getpeercert() drops the ASN.1 string type. RFC 5280 fixes it for these three; for the
# DirectoryString ones we assume UTF8String, which OpenSSL and `cryptography` write.
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5_STRING),
    "serialNumber": ("2.5.4.5", _PRINTABLE_STRING),
    "dnQualifier": ("2.5.4.46", _PRINTABLE_STRING),
    "surname": ("2.5.4.4", _UTF8_STRING),
    "title": ("2.5.4.12", _UTF8_STRING),
    "businessCategory": ("2.5.4.15", _UTF8_STRING),
    "postalCode": ("2.5.4.17", _UTF8_STRING),
    "name": ("2.5.4.41", _UTF8_STRING),
    "givenName": ("2.5.4.42", _UTF8_STRING),
    "initials": ("2.5.4.43", _UTF8_STRING),
    "generationQualifier": ("2.5.4.44", _UTF8_STRING),
    "pseudonym": ("2.5.4.65", _UTF8_STRING),
    "organizationIdentifier": ("2.5.4.97", _UTF8_STRING),
    "description": ("2.5.4.13", _UTF8_STRING),
    "jurisdictionLocalityName": ("1.3.6.1.4.1.311.60.2.1.1", _UTF8_STRING),
    "jurisdictionStateOrProvinceName": ("1.3.6.1.4.1.311.60.2.1.2", _UTF8_STRING),
    "jurisdictionCountryName": ("1.3.6.1.4.1.311.60.2.1.3", _PRINTABLE_STRING),
}
_DOTTED_OID = re.compile(r"[0-2](?:\.(?:0|[1-9][0-9]*))+")
# Java escapes "=" and "#" anywhere, beyond what RFC 2253 requires.
_DN_SPECIALS = frozenset(',=+<>#;"\\')


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (bytes([tag]) + length + data).hex()


def _escape_dn_value(value: str) -> str:
    chars = ["\\" + c if c in _DN_SPECIALS else "\\00" if c == "\x00" else c for c in value]
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in (" ", "\r"):
        trail -= 1
    edges = ["\\" + c for c in chars[:lead]], ["\\" + c for c in chars[trail:]]
    return "".join(edges[0] + chars[lead:trail] + edges[1])


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape_dn_value(value)}"
    if name in _OIDS:
        oid, tag = _OIDS[name]
    elif _DOTTED_OID.fullmatch(name):
        oid, tag = name, _UTF8_STRING
    else:
        raise ValueError(f"subject attribute {name!r} has no OID known to the proxy")
    return f"{oid}={_der_hex(tag, value)}"


def subject_dn(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """Build the DN Java's X500Principal.getName() prints from ssl getpeercert()['subject'].

    The certificate lists RDNs from the root down (C=..., O=..., CN=...); RFC 2253 prints the
    most specific first, so the order is reversed; AVAs of one RDN keep their order, joined
    by '+'. Non-ASCII BMPString or T61String values differ, as Java reads their bytes as UTF-8.
    """
    return ",".join(
        "+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(subject)
    )


# --- ssl.principal.mapping.rules ------------------------------------------------------------


class MappingRuleError(ValueError):
    """A principal mapping rule was refused; the message names its position and the reason."""

    def __init__(self, position: int, rule: str, reason: str) -> None:
        self.position = position
        self.rule = rule
        self.reason = reason
        super().__init__(f"principal mapping rule {position} ({rule!r}): {reason}")


class NoMatchingRuleError(LookupError):
    """No rule applies to a DN; as in Kafka, list DEFAULT last to fall back to the whole DN."""


# Java's "." stops at every line terminator, Python's only at "\n".
_JAVA_DOT = r"[^\n\r\u0085\u2028\u2029]"
_RULE_TEXT = rf"(?:\\{_JAVA_DOT}|[^\\/])*"
_RULE = re.compile(rf"DEFAULT|RULE:({_RULE_TEXT})/({_RULE_TEXT})/([LU]?)")
# Kafka's splitter for the comma-separated form: a comma inside a rule's regex or
# replacement does not split it.
_SPLITTER = re.compile(
    rf"\s*(DEFAULT|RULE:{_RULE_TEXT}/{_RULE_TEXT}/[LU]?{_JAVA_DOT}*?|{_JAVA_DOT}*?)"
    r"\s*(?:,\s*|(?=[\u0085\u2028\u2029]?\Z))",
    re.ASCII,
)
_REPLACEMENT_TOKEN = re.compile(
    r"\\(?P<escaped>.)|\$\{(?P<name>[A-Za-z0-9]*)\}|\$(?P<digits>[0-9]+)|(?P<dollar>\$)"
    r"|(?P<literal>[^\\$]+)",
    re.DOTALL,
)
_BACK_REFERENCE = re.compile(r"\$([0-9]+)")
_JAVA_INT_MAX = 2**31 - 1
_JAVA_TRIM = "".join(map(chr, range(0x21)))  # String.trim() strips every char <= U+0020


@dataclass(frozen=True, slots=True)
class _Group:
    ref: int | str


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[str | _Group, ...]
    case: str  # "", "L" or "U"

    def replace_all(self, dn: str) -> str:
        # Java's replaceAll: every match is replaced, and after an empty match the search
        # moves on one character (re.sub would retry there for a longer match).
        assert self.pattern is not None
        out: list[str] = []
        last = at = 0
        while at <= len(dn) and (match := self.pattern.search(dn, at)) is not None:
            out.append(dn[last : match.start()])
            out.extend(
                part if isinstance(part, str) else match.group(part.ref) or ""
                for part in self.replacement
            )
            last = match.end()
            at = last + (match.start() == last)
        out.append(dn[last:])
        return "".join(out)


def split_mapping_rules(value: str) -> list[str]:
    """Split a comma-separated `ssl.principal.mapping.rules` value into rules as Kafka does."""
    rules = (match.group(1) for match in _SPLITTER.finditer(value.strip(_JAVA_TRIM)))
    return [rule for rule in rules if rule]  # Kafka ignores empty rules


def _kafka_escape(text: str, groups: int, fail: Callable[[str], NoReturn]) -> str:
    # Kafka turns `$n` beyond the regex's groups into a literal by inserting a backslash. It
    # inserts at offsets into the original text, so from the second insertion on the
    # backslash lands one character early per earlier insertion; we do the same.
    if groups == 0:
        return text
    escaped = text
    for ref in _BACK_REFERENCE.finditer(text):
        if ref[1].startswith("0"):
            continue
        number = int(ref[1])
        if number > _JAVA_INT_MAX:
            fail(f"group reference ${ref[1]} overflows Kafka's int")
        while number > groups and number >= 10:
            number //= 10
        if number > groups:
            at = ref.start(1) - 1
            escaped = escaped[:at] + "\\" + escaped[at:]
    return escaped


def _replacement(
    text: str, pattern: re.Pattern[str], fail: Callable[[str], NoReturn]
) -> tuple[str | _Group, ...]:
    # Java's replacement syntax, after Kafka's escaping. Whatever Java would throw on here,
    # Kafka throws on for every DN the rule matches, so we refuse it up front.
    parts: list[str | _Group] = []
    for token in _REPLACEMENT_TOKEN.finditer(_kafka_escape(text, pattern.groups, fail)):
        if token["escaped"] is not None:
            parts.append(token["escaped"])
        elif token["name"] is not None:
            if token["name"] not in pattern.groupindex:
                fail(f"replacement names group {{{token['name']}}}, which the regex lacks")
            parts.append(_Group(token["name"]))
        elif token["digits"] is not None:
            digits = token["digits"]
            ref, used = int(digits[0]), 1
            # Java takes as many digits as still name an existing group.
            while used < len(digits) and ref * 10 + int(digits[used]) <= pattern.groups:
                ref, used = ref * 10 + int(digits[used]), used + 1
            if ref > pattern.groups:
                fail(f"replacement refers to group {digits}, which the regex lacks")
            parts.extend([_Group(ref), digits[used:]])
        elif token["dollar"] is not None:
            fail("'$' must start a group reference ($1 or ${name}); write '\\$' for a literal")
        else:
            parts.append(token["literal"])
    return tuple(part for part in parts if part != "")


def _parse_rule(position: int, rule: str) -> _Rule:
    def fail(reason: str) -> NoReturn:
        raise MappingRuleError(position, rule, reason)

    text = rule.strip(_JAVA_TRIM)
    match = _RULE.fullmatch(text)
    if match is None:
        fail(
            "expected DEFAULT or RULE:<regex>/<replacement>/[L|U] ('/' in either escaped as '\\/')"
        )
    if text == "DEFAULT":
        return _Rule(None, (), "")
    with warnings.catch_warnings():
        # Python warns about Java-only class syntax such as [a-z&&[^x]] and then reads it
        # differently; refuse it instead.
        warnings.simplefilter("error", FutureWarning)
        try:
            pattern = re.compile(match[1], re.ASCII)
        except (re.error, FutureWarning) as exc:
            fail(f"bad regex: {exc}")
    return _Rule(pattern, _replacement(match[2], pattern, fail), match[3])


class PrincipalMapper:
    """Like Kafka's SslPrincipalMapper: the first rule matching the whole DN names the user."""

    def __init__(self, rules: Sequence[_Rule]) -> None:
        """Use `parse_mapping_rules` to build one."""
        self._rules = tuple(rules)

    def map(self, dn: str) -> str:
        """Return the user name for an RFC 2253 DN, or raise NoMatchingRuleError."""
        for rule in self._rules:
            if rule.pattern is None:
                return dn
            if rule.pattern.fullmatch(dn):
                name = rule.replace_all(dn)
                return (
                    name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
                )
        raise NoMatchingRuleError(f"no principal mapping rule applies to {dn!r}")

    def principal(self, dn: str) -> str:
        """Return 'User:<mapped name>' for an RFC 2253 DN, or raise NoMatchingRuleError."""
        return user_principal(self.map(dn))


def parse_mapping_rules(rules: list[str]) -> PrincipalMapper:
    """Parse rules like Kafka's `ssl.principal.mapping.rules`, one per item; raise MappingRuleError.

    Each item is `DEFAULT` or `RULE:<regex>/<replacement>/[L|U]`, with '/' escaped as '\\/'
    (`split_mapping_rules` reads Kafka's comma-separated form). The regex is Python's `re` with
    ASCII classes, as in Java; Java-only syntax is refused. `$n` and `${name}` in the
    replacement follow Java, and `$n` beyond the regex's groups is literal, as in Kafka. A rule
    Kafka accepts but then fails on for every DN it matches is refused here. An empty list
    maps nothing (every DN raises NoMatchingRuleError): Kafka's default is `["DEFAULT"]`.
    """
    return PrincipalMapper([_parse_rule(i, rule) for i, rule in enumerate(rules, start=1)])
