"""Kafka framing: a 4-byte size, then the frame; sizes are checked before anything is buffered."""

from __future__ import annotations

SIZE = 4

# Frames are bytes when they had to be buffered, and views into the read otherwise.
Buffer = bytes | memoryview


def framed(*parts: Buffer) -> bytes:
    """Join parts behind a 4-byte size prefix (in one copy: frames can be megabytes)."""
    size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
    return b"".join((size.to_bytes(SIZE, "big"), *parts))


class FrameSplitter:
    """Cuts a byte stream into size-prefixed frames, checking each size before buffering it."""

    __slots__ = ("_buffer", "_limit")

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._limit = limit

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buffer)

    @property
    def declared(self) -> int:
        """The whole size (prefix included) the incomplete frame held back declares; 0 until
        its 4-byte size has arrived. Known before its body is buffered: what it will cost."""
        if len(self._buffer) < SIZE:
            return 0
        return SIZE + int.from_bytes(self._buffer[:SIZE], "big")

    def head(self, n: int) -> bytes:
        """The first n bytes of the incomplete frame held back (fewer if fewer are held)."""
        return bytes(self._buffer[:n])

    def take(self) -> tuple[int, memoryview]:
        """Hand over the incomplete frame held back: its whole size (prefix included), and the
        bytes of it held so far. The splitter starts afresh after the frame's last byte."""
        size = SIZE + int.from_bytes(self._buffer[:SIZE], "big")
        held, self._buffer = self._buffer, bytearray()
        return size, memoryview(held)

    def feed(self, data: Buffer) -> list[Buffer]:
        """Return the complete frames (size prefix included); raise ValueError on a bad size.

        A frame that lies whole in `data` is returned as a view into it, not copied.
        """
        if self._buffer:
            self._buffer += data
            # A bytearray with views into it cannot shrink: buffered frames are copied out.
            with memoryview(self._buffer) as view:
                frames, pos = self._split(view, copy=True)
            del self._buffer[:pos]
            return frames
        view = data if isinstance(data, memoryview) else memoryview(data)
        frames, pos = self._split(view, copy=False)
        if pos < len(view):
            self._buffer += view[pos:]
        return frames

    def _split(self, view: memoryview, *, copy: bool) -> tuple[list[Buffer], int]:
        frames: list[Buffer] = []
        pos, total, limit = 0, len(view), self._limit
        while total - pos >= SIZE:
            size = int.from_bytes(view[pos : pos + SIZE], "big", signed=True)
            if size < 0 or size > limit:
                raise ValueError(f"frame size {size} is outside 0..{limit}")
            end = pos + SIZE + size
            if end > total:
                break
            frames.append(view[pos:end].tobytes() if copy else view[pos:end])
            pos = end
        return frames, pos
