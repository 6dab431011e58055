"""The frame splitter: any chunking of a stream gives the same frames; bad sizes are refused."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_policy_proxy.codec.framing import FrameSplitter, framed


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50),
)
def test_frames_survive_any_chunking(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(body) for body in bodies)
    splitter = FrameSplitter(limit=1024)
    out: list[bytes] = []
    pos = 0
    for cut in cuts * (len(stream) // max(sum(cuts), 1) + 1):
        if pos >= len(stream):
            break
        out += splitter.feed(stream[pos : pos + cut])
        pos += cut
    out += splitter.feed(stream[pos:])
    assert out == [framed(body) for body in bodies]
    assert splitter.pending == 0


def test_partial_frame_stays_pending() -> None:
    splitter = FrameSplitter(limit=1024)
    assert splitter.feed(framed(b"abcdef")[:7]) == []
    assert splitter.pending == 7


@pytest.mark.parametrize("size", [-1, -(2**31), 1025, 2**31 - 1])
def test_bad_size_is_refused_before_buffering(size: int) -> None:
    splitter = FrameSplitter(limit=1024)
    with pytest.raises(ValueError, match="outside"):
        splitter.feed(struct.pack(">i", size))


def test_an_incomplete_frame_declares_its_whole_size_from_its_prefix() -> None:
    splitter = FrameSplitter(limit=1 << 20)
    assert splitter.feed(struct.pack(">i", 500_000)[:3]) == []
    assert splitter.declared == 0  # the size is not known yet
    assert splitter.feed(struct.pack(">i", 500_000)[3:] + b"\x00\x13") == []
    assert (splitter.pending, splitter.declared) == (6, 500_004)
    splitter.feed(b"\x00" * (500_000 - 2))
    assert (splitter.pending, splitter.declared) == (0, 0)
