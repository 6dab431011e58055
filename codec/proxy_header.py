"""The PROXY protocol header (HAProxy's v1 text line and v2 binary block), sans-IO.

A load balancer sends it first on each connection it opens to the proxy, before the TLS
ClientHello and any Kafka frame, to say which client it carries. See
https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt. The parser is fed the bytes read
so far and says: more bytes needed, the header (and how many bytes it took), or why the
connection does not start with a usable one.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Literal

V1_PREFIX = b"PROXY "
V1_MAX = 107  # the longest v1 line, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = 16  # signature, version and command, family, length

# Why a connection was refused: a bounded set (a metric's label).
Reason = Literal["no_header", "malformed", "unsupported", "timeout", "incomplete", "peer"]

_V2_ADDRESSES = {0x1: (4, 12), 0x2: (16, 36), 0x3: (0, 216)}  # family: (IP length, block size)
_LOCAL, _PROXY = 0x0, 0x1


class ProxyHeaderError(ValueError):
    """The connection does not start with a usable PROXY header."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason: Reason = reason


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """A parsed header: the client's address (None: use the connection's own, as for LOCAL,
    UNKNOWN or a UNIX socket), the address it dialled, and how many bytes the header took."""

    version: int
    source: tuple[str, int] | None
    destination: tuple[str, int] | None
    length: int


def parse_proxy_header(data: bytes | bytearray) -> ProxyHeader | None:
    """The header at the start of `data`, or None if more bytes are needed.

    Raises ProxyHeaderError as soon as the bytes cannot begin a valid header.
    """
    head = bytes(data[: len(V2_SIGNATURE)])
    if V2_SIGNATURE.startswith(head) and data[:1] == b"\r":
        return _v2(data) if len(head) == len(V2_SIGNATURE) else None
    if V1_PREFIX.startswith(bytes(data[: len(V1_PREFIX)])):
        return _v1(data)
    raise ProxyHeaderError("no_header", "the connection does not start with a PROXY header")


def _v1(data: bytes | bytearray) -> ProxyHeader | None:
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX:
            raise ProxyHeaderError("malformed", f"PROXY v1: no CRLF in the first {V1_MAX} bytes")
        return None
    try:
        line = bytes(data[:end]).decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("malformed", "PROXY v1: not ASCII") from None
    fields = line.split(" ")
    if len(fields) >= 2 and fields[1] == "UNKNOWN":
        return ProxyHeader(1, None, None, end + 2)  # the rest of the line is to be ignored
    if len(fields) != 6:
        raise ProxyHeaderError("malformed", f"PROXY v1: {line!r} is not PROXY TCP4|TCP6 …")
    _, family, source, destination, source_port, destination_port = fields
    if family not in ("TCP4", "TCP6"):
        raise ProxyHeaderError("unsupported", f"PROXY v1: protocol {family!r}")
    version = 4 if family == "TCP4" else 6
    return ProxyHeader(
        1,
        (_v1_address(source, version), _v1_port(source_port)),
        (_v1_address(destination, version), _v1_port(destination_port)),
        end + 2,
    )


def _v1_address(text: str, version: int) -> str:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ProxyHeaderError("malformed", f"PROXY v1: {text!r} is not an address") from None
    if address.version != version:
        raise ProxyHeaderError("malformed", f"PROXY v1: {text!r} is not an IPv{version} address")
    return str(address)


def _v1_port(text: str) -> int:
    if not text.isdigit() or (len(text) > 1 and text[0] == "0") or int(text) > 65535:
        raise ProxyHeaderError("malformed", f"PROXY v1: {text!r} is not a port")
    return int(text)


def _v2(data: bytes | bytearray) -> ProxyHeader | None:
    if len(data) < V2_FIXED:
        return None
    version_command, family, length = struct.unpack_from("!BBH", data, len(V2_SIGNATURE))
    if version_command >> 4 != 2:
        raise ProxyHeaderError("unsupported", f"PROXY v2: version {version_command >> 4}")
    command = version_command & 0xF
    if command not in (_LOCAL, _PROXY):
        raise ProxyHeaderError("unsupported", f"PROXY v2: command {command:#x}")
    if len(data) < V2_FIXED + length:
        return None
    total = V2_FIXED + length
    if command == _LOCAL:  # the balancer's own connection (a health check): no client
        return ProxyHeader(2, None, None, total)
    address_family, transport = family >> 4, family & 0xF
    if address_family == 0:  # AF_UNSPEC: the connection's own addresses stand
        return ProxyHeader(2, None, None, total)
    if address_family not in _V2_ADDRESSES or transport not in (0x0, 0x1):
        raise ProxyHeaderError("unsupported", f"PROXY v2: family and protocol {family:#04x}")
    ip_length, block = _V2_ADDRESSES[address_family]
    if length < block:
        raise ProxyHeaderError(
            "malformed", f"PROXY v2: {length} address bytes, family {family:#04x} needs {block}"
        )
    _check_tlvs(data[V2_FIXED + block : total])
    if ip_length == 0:  # AF_UNIX: no network address to report
        return ProxyHeader(2, None, None, total)
    start = V2_FIXED
    source = ipaddress.ip_address(bytes(data[start : start + ip_length]))
    destination = ipaddress.ip_address(bytes(data[start + ip_length : start + 2 * ip_length]))
    source_port, destination_port = struct.unpack_from("!HH", data, start + 2 * ip_length)
    return ProxyHeader(2, (str(source), source_port), (str(destination), destination_port), total)


def _check_tlvs(tlvs: bytes | bytearray) -> None:
    """The TLVs after the addresses (ALPN, authority, SSL, …) must fill the block exactly."""
    offset = 0
    while offset < len(tlvs):
        if offset + 3 > len(tlvs):
            raise ProxyHeaderError("malformed", "PROXY v2: a truncated TLV")
        (size,) = struct.unpack_from("!H", tlvs, offset + 1)
        offset += 3 + size
        if offset > len(tlvs):
            raise ProxyHeaderError("malformed", "PROXY v2: a TLV longer than the header")
