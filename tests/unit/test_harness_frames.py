"""harness.frames: the one reader of size-prefixed frames that tests, benches and tools share."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from harness.frames import read_frame


def test_a_frame_sent_in_pieces_is_read_whole_and_the_next_one_after_it() -> None:
    left, right = socket.socketpair()
    with left, right:
        data = struct.pack(">i", 5) + b"hello" + struct.pack(">i", 2) + b"ok"
        sender = threading.Thread(
            target=lambda: [left.sendall(data[i : i + 1]) for i in range(len(data))]
        )
        sender.start()
        assert read_frame(right) == b"hello"
        assert read_frame(right) == b"ok"
        sender.join()


def test_a_peer_that_closes_mid_frame_is_an_error_saying_how_far_it_got() -> None:
    left, right = socket.socketpair()
    with right:
        left.sendall(struct.pack(">i", 10) + b"abc")
        left.close()
        with pytest.raises(ConnectionError, match="after 3 of 10 bytes"):
            read_frame(right)
