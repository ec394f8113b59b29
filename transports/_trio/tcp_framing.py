"""Length-prefixed frames on a TCP stream, for the TCP node.

Every frame on a stream is preceded by its length (uint32, big-endian).
(Splitting a message too big for one frame is the endpoint's decision:
:func:`epto.tokenring.splitting_registry`.) :class:`FrameReader` cuts the bytes
read from a stream back into frames (sans-IO: it never reads, it is fed).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["FrameReader", "FramingError", "pack_frames"]

LENGTH = struct.Struct(">I")
"""The length prefix of a frame."""


def pack_frames(frames: Iterable[bytes]) -> bytes:
    """The bytes that carry ``frames`` on a stream, each after its length."""
    pack = LENGTH.pack
    return b"".join(pack(len(f)) + f for f in frames)


class FramingError(Exception):
    """The stream announced a frame length out of bounds: its framing is lost."""

    def __init__(self, message: str, *, length: int = 0) -> None:
        super().__init__(message)
        self.length = length
        """The length announced."""


class FrameReader:
    """Cuts the bytes of one stream into frames: :meth:`feed` what was read,
    then take :meth:`next_frame` until it returns ``None``.

    With ``first_frame`` the reader starts *closed*: until :meth:`open` is
    called (the node calls it once a frame authenticated, or decoded in a
    group without a key) a frame may be at most ``first_frame`` bytes, and
    :meth:`room` says how many bytes to read at most so that no more than one
    such frame (and its length) is ever buffered. What an unauthenticated
    peer makes the reader hold is thus bounded by ``first_frame + 4`` bytes,
    whatever length it announces; after :meth:`open`, by ``max_frame + 4``
    plus what was read in one go.
    """

    __slots__ = ("_buffer", "_limit", "_max", "_min", "_pos", "peak")

    def __init__(self, *, max_frame: int, min_frame: int, first_frame: int | None = None) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self._max = max_frame
        self._min = min_frame
        self._limit = max_frame if first_frame is None else min(first_frame, max_frame)
        self.peak = 0
        """Most bytes this reader held at once (fed and not yet returned)."""

    @property
    def limit(self) -> int:
        """The largest frame accepted now."""
        return self._limit

    @property
    def opened(self) -> bool:
        """Frames up to ``max_frame`` are accepted (see :meth:`open`)."""
        return self._limit == self._max

    def open(self) -> None:
        """Accept frames up to ``max_frame`` from now on."""
        self._limit = self._max

    def room(self) -> int | None:
        """Before :meth:`open`, the most bytes to feed next (at least 1) so
        that the reader never holds more than one first frame and its length;
        ``None`` (no bound) once open."""
        if self.opened:
            return None
        return max(LENGTH.size + self._limit - self.pending(), 1)

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data
        if len(self._buffer) > self.peak:
            self.peak = len(self._buffer)

    def next_frame(self) -> bytes | None:
        """The next complete frame, or ``None`` until more bytes are fed.
        Raises :class:`FramingError` on a length out of bounds (beyond
        :attr:`limit`, or shorter than ``min_frame``)."""
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos < LENGTH.size:
            return None
        (length,) = LENGTH.unpack_from(buffer, pos)
        if length > self._limit or length < self._min:
            raise FramingError(
                f"frame length {length} out of bounds [{self._min}, {self._limit}]",
                length=length,
            )
        start = pos + LENGTH.size
        if len(buffer) - start < length:
            return None
        self._pos = start + length
        return bytes(buffer[start : self._pos])

    def pending(self) -> int:
        """Bytes fed and not yet returned as frames."""
        return len(self._buffer) - self._pos
