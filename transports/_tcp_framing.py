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


class FrameReader:
    """Cuts the bytes of one stream into frames: :meth:`feed` what was read,
    then take :meth:`next_frame` until it returns ``None``."""

    __slots__ = ("_buffer", "_max", "_min", "_pos")

    def __init__(self, *, max_frame: int, min_frame: int) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self._max = max_frame
        self._min = min_frame

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next complete frame, or ``None`` until more bytes are fed.
        Raises :class:`FramingError` on a length out of bounds."""
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos < LENGTH.size:
            return None
        (length,) = LENGTH.unpack_from(buffer, pos)
        if length > self._max or length < self._min:
            raise FramingError(f"frame length {length} out of bounds")
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
