"""The PROXY protocol header: v1 and v2 as HAProxy sends them, byte by byte, and refusals."""

from __future__ import annotations

import socket
import struct

import pytest

from kafka_policy_proxy.codec.proxy_header import (
    V2_SIGNATURE,
    ProxyHeader,
    ProxyHeaderError,
    parse_proxy_header,
)

KAFKA_FRAME = struct.pack("!ihhi", 10, 18, 3, 1) + b"\x00\x00"  # an ApiVersions request
CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


def v2(command: int, family: int, addresses: bytes, tlvs: bytes = b"") -> bytes:
    body = addresses + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body


def inet(source: str, destination: str, source_port: int, destination_port: int) -> bytes:
    family = socket.AF_INET6 if ":" in source else socket.AF_INET
    return (
        socket.inet_pton(family, source)
        + socket.inet_pton(family, destination)
        + struct.pack("!HH", source_port, destination_port)
    )


def tlv(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + struct.pack("!H", len(value)) + value


def parsed_in_pieces(data: bytes) -> ProxyHeader:
    """Fed one byte more at a time, as reads may split it: None until it is whole."""
    for end in range(len(data)):
        assert parse_proxy_header(data[:end]) is None, data[:end]
    header = parse_proxy_header(data)
    assert header is not None
    return header


def test_v1_tcp4() -> None:
    line = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 9192\r\n"
    header = parsed_in_pieces(line)
    assert header == ProxyHeader(1, ("192.0.2.7", 56324), ("198.51.100.1", 9192), len(line))
    # What follows the header (the client's first bytes) is not part of it.
    assert parse_proxy_header(line + KAFKA_FRAME) == header


def test_v1_tcp6_and_unknown() -> None:
    line = b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 9192\r\n"
    assert parsed_in_pieces(line).source == ("2001:db8::7", 4000)
    for unknown in (b"PROXY UNKNOWN\r\n", b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"):
        assert parse_proxy_header(unknown) == ProxyHeader(1, None, None, len(unknown))


def test_the_longest_v1_line_is_107_bytes() -> None:
    longest = (
        b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        b"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
    )
    assert len(longest) == 104
    assert parse_proxy_header(longest) is not None
    with pytest.raises(ProxyHeaderError) as refused:
        parse_proxy_header(b"PROXY TCP4 " + b"1" * 200)
    assert refused.value.reason == "malformed"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n", "malformed"),
        (b"PROXY TCP4 2001:db8::7 198.51.100.1 1 2\r\n", "malformed"),  # not IPv4
        (b"PROXY TCP6 192.0.2.7 198.51.100.1 1 2\r\n", "malformed"),
        (b"PROXY TCP4 192.0.2.7 198.51.100.1 65536 2\r\n", "malformed"),
        (b"PROXY TCP4 192.0.2.7 198.51.100.1 080 2\r\n", "malformed"),
        (b"PROXY TCP4 192.0.2.7 198.51.100.1 -1 2\r\n", "malformed"),
        (b"PROXY TCP4 host.example 198.51.100.1 1 2\r\n", "malformed"),
        (b"PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n", "unsupported"),
        (b"PROXY TCP4 192.0.2.\xff 198.51.100.1 1 2\r\n", "malformed"),
    ],
)
def test_v1_refusals(line: bytes, reason: str) -> None:
    with pytest.raises(ProxyHeaderError) as refused:
        parse_proxy_header(line)
    assert refused.value.reason == reason


def test_v2_inet_with_tlvs() -> None:
    # HAProxy's send-proxy-v2 with the unique-id TLV (0x05) and the authority (0x02).
    addresses = inet("127.0.0.2", "127.0.0.1", 40000, 18760)
    data = v2(0x1, 0x11, addresses, tlv(0x05, b"id-1") + tlv(0x02, b"kafka.example.com"))
    header = parsed_in_pieces(data)
    assert header == ProxyHeader(2, ("127.0.0.2", 40000), ("127.0.0.1", 18760), len(data))
    assert parse_proxy_header(data + CLIENT_HELLO) == header


def test_v2_inet6() -> None:
    data = v2(0x1, 0x21, inet("2001:db8::7", "2001:db8::1", 5, 6))
    assert parsed_in_pieces(data).source == ("2001:db8::7", 5)


@pytest.mark.parametrize(
    ("command", "family", "addresses"),
    [
        (0x0, 0x00, b""),  # LOCAL: the balancer's health check
        (0x0, 0x11, inet("10.0.0.1", "10.0.0.2", 1, 2)),  # LOCAL: addresses are ignored
        (0x1, 0x00, b""),  # PROXY over AF_UNSPEC
        (0x1, 0x31, b"/run/client.sock".ljust(216, b"\0")),  # AF_UNIX: no network address
    ],
)
def test_v2_without_a_client_address(command: int, family: int, addresses: bytes) -> None:
    data = v2(command, family, addresses)
    assert parse_proxy_header(data) == ProxyHeader(2, None, None, len(data))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (V2_SIGNATURE + b"\x11\x11\x00\x0c" + bytes(12), "unsupported"),  # version 1 in v2
        (V2_SIGNATURE + b"\x22\x11\x00\x0c" + bytes(12), "unsupported"),  # command 2
        (v2(0x1, 0x12, inet("10.0.0.1", "10.0.0.2", 1, 2)), "unsupported"),  # UDP
        (v2(0x1, 0x41, bytes(12)), "unsupported"),  # no such family
        (v2(0x1, 0x11, bytes(8)), "malformed"),  # IPv4 needs 12 address bytes
        (v2(0x1, 0x21, bytes(12)), "malformed"),  # IPv6 needs 36
        (v2(0x1, 0x11, inet("10.0.0.1", "10.0.0.2", 1, 2), b"\x05\x00"), "malformed"),
        (v2(0x1, 0x11, inet("10.0.0.1", "10.0.0.2", 1, 2), b"\x05\x00\x09ab"), "malformed"),
    ],
)
def test_v2_refusals(data: bytes, reason: str) -> None:
    with pytest.raises(ProxyHeaderError) as refused:
        parse_proxy_header(data)
    assert refused.value.reason == reason


@pytest.mark.parametrize("start", [KAFKA_FRAME, CLIENT_HELLO, b"GET / HTTP/1.1\r\n", b"PROXX"])
def test_a_client_without_a_header_is_refused_at_its_first_bytes(start: bytes) -> None:
    with pytest.raises(ProxyHeaderError) as refused:
        parse_proxy_header(start[:5])
    assert refused.value.reason == "no_header"


def test_a_v2_signature_prefix_waits_and_a_wrong_one_is_refused() -> None:
    assert parse_proxy_header(V2_SIGNATURE[:7]) is None
    with pytest.raises(ProxyHeaderError):
        parse_proxy_header(V2_SIGNATURE[:7] + b"X")
