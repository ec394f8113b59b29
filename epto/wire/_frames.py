"""The frame header, the registry of frame kinds, and bounds-checked readers.

Every protocol of the library (EpTO balls, Cyclon shuffles, the token ring)
travels in the same frame: a fixed 24-byte header and a body whose encoding
depends on the kind. The byte layout is in docs/wire-format.md.

A protocol adds a kind by registering a :class:`FrameKind` with a
:class:`FrameRegistry`: a number, the Python type it encodes, and a body
encoder and decoder. Body decoders read through a :class:`Reader`, whose
every read checks the bytes left and raises :class:`RemoteProtocolError`
(``fault="truncated"``), so a decoder never sees an ``IndexError`` or a
``struct.error``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import ProcessId
from ._limits import HEADER_SIZE, Limits

MAGIC = b"\xe7\x70"
"""First two bytes of every frame."""
VERSION = 1
"""The wire format version this module reads and writes."""
FLAG_SEALED = 0x01
"""Header flag: the body is an AEAD ciphertext (nonce, ciphertext, tag)."""
FLAG_BOUND = 0x02
"""Header flag (sealed frames only): the destination's id is authenticated with
the header, so the frame is rejected by any other receiver."""

_HEADER = struct.Struct(">2sBBBBHQQ")
assert _HEADER.size == HEADER_SIZE
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
U64_MAX = (1 << 64) - 1


@attrs.frozen(kw_only=True, slots=True)
class Header:
    """The fixed part of every frame."""

    kind: int
    sender: ProcessId
    group: int
    flags: int = 0
    key_id: int = 0
    version: int = VERSION

    @property
    def sealed(self) -> bool:
        return bool(self.flags & FLAG_SEALED)

    @property
    def bound(self) -> bool:
        return bool(self.flags & FLAG_BOUND)


def pack_header(
    kind: int, sender: ProcessId, group: int, *, flags: int = 0, key_id: int = 0
) -> bytes:
    """The 24 header bytes; raises :class:`LocalProtocolError` on values out of range."""
    if not 0 <= sender <= U64_MAX:
        raise LocalProtocolError(f"sender id {sender} is not a uint64")
    if not 0 <= group <= U64_MAX:
        raise LocalProtocolError(f"group id {group} is not a uint64")
    return _HEADER.pack(MAGIC, VERSION, kind, flags, key_id, 0, sender, group)


def unpack_header(data: bytes) -> Header:
    """Parse and check the header at the start of ``data``."""
    kind, flags, key_id, sender, group = unpack_header_fields(data)
    return Header(kind=kind, sender=sender, group=group, flags=flags, key_id=key_id)


def unpack_header_fields(data: bytes) -> tuple[int, int, int, ProcessId, int]:
    """``(kind, flags, key id, sender, group)`` of the header at the start of
    ``data``, checked as :func:`unpack_header` checks it, without building a
    :class:`Header` (a decoder's per-frame path)."""
    if len(data) < HEADER_SIZE:
        raise RemoteProtocolError(
            f"frame of {len(data)} bytes is shorter than a header", fault="truncated"
        )
    magic, version, kind, flags, key_id, reserved, sender, group = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise RemoteProtocolError("not an epto frame", fault="bad-magic")
    if version != VERSION:
        raise RemoteProtocolError(f"unsupported wire version {version}", fault="bad-version")
    if flags & ~(FLAG_SEALED | FLAG_BOUND) or reserved:
        raise RemoteProtocolError("reserved header bits set", fault="bad-header")
    if not flags & FLAG_SEALED and (key_id or flags & FLAG_BOUND):
        raise RemoteProtocolError("key id or binding on an unsealed frame", fault="bad-header")
    return kind, flags, key_id, sender, group


class Reader:
    """Bounds-checked sequential reads from one body.

    Every method raises ``RemoteProtocolError(fault="truncated")`` rather than
    reading past the end; :meth:`count` and :meth:`blob` check a peer's claimed
    count or length against a limit and against the bytes left before anything
    is allocated.
    """

    __slots__ = ("_data", "_end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self._data = data
        self.pos = pos
        self._end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    @property
    def data(self) -> bytes:
        """The bytes read from, for a decoder that walks a run of records
        itself (checking every bound against :attr:`end`) and then sets
        :attr:`pos` past them."""
        return self._data

    @property
    def end(self) -> int:
        """Where the body ends in :attr:`data`: nothing at or past it is read."""
        return self._end

    def _take(self, n: int) -> int:
        pos = self.pos
        if n > self._end - pos:
            raise RemoteProtocolError(
                f"body ends {n - (self._end - pos)} bytes early", fault="truncated"
            )
        self.pos = pos + n
        return pos

    def u8(self) -> int:
        return int(self._data[self._take(1)])

    def u16(self) -> int:
        value: int = _U16.unpack_from(self._data, self._take(2))[0]
        return value

    def u32(self) -> int:
        value: int = _U32.unpack_from(self._data, self._take(4))[0]
        return value

    def u64(self) -> int:
        value: int = _U64.unpack_from(self._data, self._take(8))[0]
        return value

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        """The values of ``fmt`` read at once (one bounds check for the whole struct)."""
        return fmt.unpack_from(self._data, self._take(fmt.size))

    def count(self, width: int, limit: int, min_item_size: int, what: str) -> int:
        """Read a count of ``width`` bytes (2 or 4); reject it if it exceeds
        ``limit`` or if that many items of ``min_item_size`` cannot fit."""
        n = self.u16() if width == 2 else self.u32()
        if n > limit:
            raise RemoteProtocolError(f"{n} {what} exceed the limit {limit}", fault="too-many")
        if n * min_item_size > self.remaining:
            raise RemoteProtocolError(
                f"{n} {what} cannot fit in {self.remaining} bytes", fault="truncated"
            )
        return n

    def blob(self, n: int, limit: int, what: str) -> bytes:
        """``n`` bytes, after checking ``n`` against ``limit`` and the bytes left."""
        if n > limit:
            raise RemoteProtocolError(f"{what} of {n} bytes exceeds {limit}", fault="oversized")
        pos = self._take(n)
        return bytes(self._data[pos : pos + n])

    def finish(self) -> None:
        """Reject trailing bytes: a body must be consumed exactly."""
        if self.pos != self._end:
            raise RemoteProtocolError(
                f"{self._end - self.pos} trailing bytes after the body", fault="trailing"
            )


Encoder = Callable[[Any, Limits], bytes]
"""Body encoder: message and limits to body bytes (raise LocalProtocolError if too big)."""
Decoder = Callable[[Reader, Limits], Any]
"""Body decoder: reads the whole body through the reader (which the caller finishes)."""
Splitter = Callable[[Any], "tuple[Any, Any] | None"]
"""A kind's splitting rule: a message too big for one frame as two parts,
in order, such that receiving the parts one after the other is receiving
the whole; None when it cannot be split."""


@attrs.frozen(kw_only=True, slots=True)
class FrameKind:
    """One kind of frame: its number on the wire, its Python type and codecs."""

    code: int = attrs.field()
    name: str
    type: type[Any]
    encode: Encoder
    decode: Decoder
    split: Splitter | None = None
    """How a message of this kind too big for one frame is split
    (:class:`~epto.wire._codec.FrameCodec` encodes the parts, halving again as
    needed); None: it is not."""

    @code.validator
    def _check_code(self, _attribute: object, value: int) -> None:
        if not 1 <= value <= 0xFF:
            raise LocalProtocolError(f"frame kind code must be in 1..255, got {value}")


class FrameRegistry:
    """Frame kinds by wire code and by Python type.

    Codes 1..15 are the library's EpTO and Cyclon kinds, 16..63 are reserved
    for the library's other protocols (the token ring takes 16..31), 128..255
    are free for applications.
    """

    def __init__(self, kinds: Iterator[FrameKind] | tuple[FrameKind, ...] = ()) -> None:
        self._by_code: dict[int, FrameKind] = {}
        self._by_type: dict[type[Any], FrameKind] = {}
        for kind in kinds:
            self.register(kind)

    def register(self, kind: FrameKind) -> None:
        """Add ``kind``; a code or a type may be registered only once."""
        if kind.code in self._by_code:
            raise LocalProtocolError(
                f"frame kind {kind.code} is already {self._by_code[kind.code].name!r}"
            )
        if kind.type in self._by_type:
            raise LocalProtocolError(f"type {kind.type.__name__} already has a frame kind")
        self._by_code[kind.code] = kind
        self._by_type[kind.type] = kind

    def copy(self) -> FrameRegistry:
        return FrameRegistry(tuple(self._by_code.values()))

    def by_code(self, code: int) -> FrameKind:
        try:
            return self._by_code[code]
        except KeyError:
            raise RemoteProtocolError(f"unknown frame kind {code}", fault="unknown-kind") from None

    def by_type(self, cls: type[Any]) -> FrameKind:
        try:
            return self._by_type[cls]
        except KeyError:
            raise LocalProtocolError(f"no frame kind registered for {cls.__name__}") from None

    def __iter__(self) -> Iterator[FrameKind]:
        return iter(sorted(self._by_code.values(), key=lambda k: k.code))

    def __contains__(self, code: object) -> bool:
        return code in self._by_code


@attrs.frozen(kw_only=True, slots=True)
class Frame:
    """A decoded frame: who sent it, in which group, and the message."""

    kind: int
    sender: ProcessId
    group: int
    message: Any
    """The decoded body: a ball (``dict[EventId, (Event, ttl)]``), a Cyclon
    message, or whatever the kind's decoder returns."""
