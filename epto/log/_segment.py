"""The byte format of delivery-log segments (docs/delivery-log.md has the table).

A node's log is a directory of segment files. Each segment starts with a
32-byte header and continues with framed records:

* header: magic ``b"EPTOLOG\\x00"``, version (u32), node id (u64), first
  delivery index (u64), CRC32 of the preceding 28 bytes (u32);
* frame: body length (u32), CRC32 of the body (u32), body;
* body: index (u64), source (u64), seq (u64), ts (i64), delivered_at (i64),
  broadcast_at (i64), flags (u8), signature length (u16), signature, payload.

All integers are little-endian. A torn tail (a frame cut short or whose CRC
does not match) ends the readable part of the open segment; in a closed
segment it is corruption.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import attrs

from .._errors import EptoError
from .._event import DeliveryTag, EventId

MAGIC = b"EPTOLOG\x00"
VERSION = 1
HEADER = struct.Struct("<8sIQQ")
HEADER_SIZE = HEADER.size + 4  # plus the CRC32 of the header fields
FRAME = struct.Struct("<II")
BODY = struct.Struct("<QQQqqqBH")
MAX_BODY = 1 << 30
"""Largest body a reader accepts; a longer length field is treated as torn."""

FLAG_OUT_OF_ORDER = 0x01
FLAG_HAS_BROADCAST = 0x02

CLOSED_SUFFIX = ".seg"
OPEN_SUFFIX = ".open"
NAME_DIGITS = 20


class LogCorruptError(EptoError):
    """A closed segment, or a header, does not read back as written.

    Torn tails of the open segment are not corruption: the writer may be in the
    middle of a record, or may have been killed there.
    """


@attrs.frozen(kw_only=True, slots=True)
class LogRecord:
    """One delivered event as the log stores it.

    Times are integers in microseconds (``delivered_at``, ``broadcast_at``);
    ``broadcast_at`` is ``None`` when the writer did not know it.
    """

    node: int
    index: int
    source: int
    seq: int
    ts: int
    tag: DeliveryTag
    payload: bytes
    delivered_at: int
    broadcast_at: int | None = None
    signature: bytes = b""

    @property
    def event_id(self) -> EventId:
        return (self.source, self.seq)


def segment_name(first_index: int, *, closed: bool) -> str:
    return f"{first_index:0{NAME_DIGITS}d}{CLOSED_SUFFIX if closed else OPEN_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, bool] | None:
    """``(first_index, closed)`` for a segment file name, else ``None``."""
    for suffix, closed in ((CLOSED_SUFFIX, True), (OPEN_SUFFIX, False)):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) == NAME_DIGITS and stem.isdigit():
                return int(stem), closed
    return None


def encode_header(node: int, first_index: int) -> bytes:
    fields = HEADER.pack(MAGIC, VERSION, node, first_index)
    return fields + struct.pack("<I", zlib.crc32(fields))


def decode_header(data: bytes | memoryview, where: str) -> tuple[int, int]:
    """``(node, first_index)``; raises :class:`LogCorruptError`."""
    if len(data) < HEADER_SIZE:
        raise LogCorruptError(f"{where}: header cut short ({len(data)} bytes)")
    magic, version, node, first = HEADER.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, HEADER.size)
    if magic != MAGIC:
        raise LogCorruptError(f"{where}: not a delivery-log segment (bad magic)")
    if zlib.crc32(bytes(data[: HEADER.size])) != crc:
        raise LogCorruptError(f"{where}: header CRC mismatch")
    if version != VERSION:
        raise LogCorruptError(f"{where}: unsupported version {version}")
    return int(node), int(first)


def encode_record(
    *,
    index: int,
    source: int,
    seq: int,
    ts: int,
    out_of_order: bool,
    delivered_at: int,
    broadcast_at: int | None,
    payload: bytes,
    signature: bytes = b"",
) -> bytes:
    """One framed record: length, CRC32, body."""
    flags = (FLAG_OUT_OF_ORDER if out_of_order else 0) | (
        FLAG_HAS_BROADCAST if broadcast_at is not None else 0
    )
    body = b"".join(
        (
            BODY.pack(
                index,
                source,
                seq,
                ts,
                delivered_at,
                0 if broadcast_at is None else broadcast_at,
                flags,
                len(signature),
            ),
            signature,
            payload,
        )
    )
    if len(body) > MAX_BODY:
        raise ValueError(f"record of {len(body)} bytes exceeds the limit of {MAX_BODY}")
    return FRAME.pack(len(body), zlib.crc32(body)) + body


RawRecord = tuple[int, int, int, int, int, int, int, bytes, bytes]
"""``(index, source, seq, ts, delivered_at, broadcast_at, flags, signature, payload)``."""


def scan_frames(data: bytes | memoryview, pos: int) -> Iterator[tuple[int, int]]:
    """Complete, CRC-checked frames from ``pos``: ``(body_start, body_end)``.

    Stops silently at the first frame that is cut short or fails its CRC; the
    caller compares the position reached with ``len(data)`` to tell a clean end
    from a torn one.
    """
    end = len(data)
    unpack = FRAME.unpack_from
    crc32 = zlib.crc32
    while pos + FRAME.size <= end:
        length, crc = unpack(data, pos)
        start = pos + FRAME.size
        stop = start + length
        if length < BODY.size or length > MAX_BODY or stop > end:
            return
        if crc32(data[start:stop]) != crc:
            return
        yield start, stop
        pos = stop


def decode_body(data: bytes | memoryview, start: int, stop: int) -> RawRecord:
    index, source, seq, ts, delivered, broadcast, flags, siglen = BODY.unpack_from(data, start)
    sig_end = start + BODY.size + siglen
    return (
        index,
        source,
        seq,
        ts,
        delivered,
        broadcast,
        flags,
        bytes(data[start + BODY.size : sig_end]),
        bytes(data[sig_end:stop]),
    )


def body_index(data: bytes | memoryview, start: int) -> int:
    (index,) = struct.unpack_from("<Q", data, start)
    return int(index)


def to_record(node: int, raw: RawRecord) -> LogRecord:
    index, source, seq, ts, delivered, broadcast, flags, signature, payload = raw
    return LogRecord(
        node=node,
        index=index,
        source=source,
        seq=seq,
        ts=ts,
        tag=DeliveryTag.OUT_OF_ORDER if flags & FLAG_OUT_OF_ORDER else DeliveryTag.IN_ORDER,
        payload=payload,
        delivered_at=delivered,
        broadcast_at=broadcast if flags & FLAG_HAS_BROADCAST else None,
        signature=signature,
    )


def micros(seconds: float, *, origin: int = 0) -> int:
    """A time in seconds as the log's integer microseconds, plus ``origin``.

    Real nodes pass wall-clock seconds since the Unix epoch (``time.time()``).
    A simulation passes its virtual time; with the default origin, virtual time
    ``t`` becomes the timestamp 1970-01-01T00:00:00Z + ``t`` seconds. Pass an
    origin in microseconds (for example the wall-clock start of the run) to
    place the run elsewhere on the time line.
    """
    return origin + round(seconds * 1_000_000)
