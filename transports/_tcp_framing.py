"""Length-prefixed frames on a TCP stream, for the token ring's TCP node.

Every frame on a stream is preceded by its length (uint32, big-endian). A
message too big for one frame is split by :func:`encode_split` into several
messages whose effect, received one after the other, is the whole message's.
:class:`FrameReader` cuts the bytes read from a stream back into frames
(sans-IO: it never reads, it is fed).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import attrs

from epto import FrameCodec, LocalProtocolError, ProcessId
from epto.tokenring._messages import Catchup, DataBatch, Order

__all__ = ["FrameReader", "FramingError", "encode_split", "pack_frames"]

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


def encode_split(
    codec: FrameCodec, sender: ProcessId, message: object, *, to: ProcessId | None
) -> list[bytes]:
    """The frames of ``message``; a catch-up, a batch of broadcasts or an order
    notice too big for one frame is split in halves (in order; each part of a
    catch-up keeps ``stable`` and ``oldest``, each part of a notice its state,
    so receiving the parts one after the other is receiving the whole). Raises
    :class:`LocalProtocolError` when a message still does not fit."""
    try:
        return codec.encode(sender, message, to=to)
    except LocalProtocolError:
        parts: tuple[object, object] | None = None
        if isinstance(message, DataBatch) and len(message.events) >= 2:
            half = len(message.events) // 2
            parts = (
                DataBatch(events=message.events[:half]),
                DataBatch(events=message.events[half:]),
            )
        elif isinstance(message, Order) and len(message.assigned) >= 2:
            # Each part carries the state: learning it twice is learning it once.
            half = len(message.assigned) // 2
            parts = (
                attrs.evolve(message, assigned=message.assigned[:half]),
                attrs.evolve(message, assigned=message.assigned[half:]),
            )
        if parts is not None:
            return encode_split(codec, sender, parts[0], to=to) + encode_split(
                codec, sender, parts[1], to=to
            )
        if not isinstance(message, Catchup):
            raise
        n, m = len(message.entries), len(message.events)
        if n + m < 2:
            raise
        if n >= 2:
            first = attrs.evolve(message, entries=message.entries[: n // 2], events=())
            second = attrs.evolve(message, entries=message.entries[n // 2 :])
        else:
            first = attrs.evolve(message, events=message.events[: m // 2])
            second = attrs.evolve(message, entries=(), events=message.events[m // 2 :])
        return encode_split(codec, sender, first, to=to) + encode_split(
            codec, sender, second, to=to
        )
