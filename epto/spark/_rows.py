"""Rows a Spark sink broadcasts, as event payloads, and their de-duplication.

A sink event carries a run of consecutive rows of one Spark partition::

    magic "ESNK" | version u8 (1) | stream id length u8 | stream id (UTF-8)
    | batch u64 | partition u32 | first row u64 | row count u32
    | row count x (length u32 | value bytes)

Integers are big-endian. The row identity is ``(stream, batch, partition,
row)``: the stream is the streaming query's id (stable across restarts from a
checkpoint) or a batch write's id, the batch the micro-batch id, the row the
row's position in its partition. A retried task sends the same identities
again; :class:`SinkRows` at every member keeps, per ``(stream, batch,
partition)``, the row numbers already delivered as intervals, and returns each
row once. Every member sees the events in the same total order, so every
member keeps the same first copy.

Decoding is bounded: every length is checked against what is left of the
payload before anything is sliced (the payload itself is bounded by the
group's ``Limits.max_payload_size``).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable

import attrs

MAGIC = b"ESNK"
VERSION = 1
MAX_STREAM_ID = 64
"""Bytes of a stream id."""
_HEAD = struct.Struct(">4sBB")
_KEY = struct.Struct(">QIQI")
_LEN = struct.Struct(">I")
ROW_OVERHEAD = _LEN.size
"""Bytes each row adds to an event besides its value."""


def header_size(stream: str) -> int:
    """Bytes of an event's header for ``stream``."""
    return _HEAD.size + len(stream.encode()) + _KEY.size


class SinkFormatError(ValueError):
    """A payload that starts like a sink event but is not a valid one."""


@attrs.frozen(slots=True)
class SinkRow:
    """One row delivered through the sink, with its identity."""

    stream: str
    batch: int
    partition: int
    row: int
    value: bytes


@attrs.frozen(slots=True)
class SinkEvent:
    """A decoded sink event: rows ``first .. first + len(values) - 1`` of a partition."""

    stream: str
    batch: int
    partition: int
    first: int
    values: tuple[bytes, ...]


def encode_event(stream: str, batch: int, partition: int, first: int, values: list[bytes]) -> bytes:
    """The payload of one sink event."""
    sid = stream.encode()
    if len(sid) > MAX_STREAM_ID:
        raise ValueError(f"stream id of {len(sid)} bytes exceeds {MAX_STREAM_ID}")
    parts = [
        _HEAD.pack(MAGIC, VERSION, len(sid)),
        sid,
        _KEY.pack(batch, partition, first, len(values)),
    ]
    for value in values:
        parts += [_LEN.pack(len(value)), value]
    return b"".join(parts)


def is_sink_event(payload: bytes) -> bool:
    """True when ``payload`` starts like a sink event (it may still be invalid)."""
    return payload[:4] == MAGIC


def decode_event(payload: bytes) -> SinkEvent:
    """Decode a sink event; :class:`SinkFormatError` when it is not a valid one."""
    view = memoryview(payload)
    if len(view) < _HEAD.size:
        raise SinkFormatError("shorter than a sink event header")
    magic, version, sid_len = _HEAD.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise SinkFormatError(f"not a sink event of version {VERSION}")
    at = _HEAD.size
    if sid_len > MAX_STREAM_ID or at + sid_len + _KEY.size > len(view):
        raise SinkFormatError("truncated header")
    try:
        stream = bytes(view[at : at + sid_len]).decode()
    except UnicodeDecodeError as exc:
        raise SinkFormatError("stream id is not UTF-8") from exc
    at += sid_len
    batch, partition, first, count = _KEY.unpack_from(view, at)
    at += _KEY.size
    # Each row takes at least its length field: a count beyond that is a lie.
    if count * _LEN.size > len(view) - at or first + count > 1 << 63:
        raise SinkFormatError(f"row count {count} does not fit the payload")
    values = []
    for _ in range(count):
        (n,) = _LEN.unpack_from(view, at)
        at += _LEN.size
        if n > len(view) - at:
            raise SinkFormatError("a row runs past the payload")
        values.append(bytes(view[at : at + n]))
        at += n
    if at != len(view):
        raise SinkFormatError("trailing bytes after the rows")
    return SinkEvent(stream, batch, partition, first, tuple(values))


class _Ranges:
    """Disjoint half-open ranges of row numbers, sorted."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Add ``[lo, hi)``; returns the sub-ranges that were not there yet."""
        new: list[tuple[int, int]] = []
        at = lo
        i = max(0, bisect_right(self.starts, lo) - 1)
        while at < hi:
            if i < len(self.starts) and self.starts[i] <= at:
                at = max(at, self.ends[i])
                i += 1
                continue
            stop = min(hi, self.starts[i]) if i < len(self.starts) else hi
            if at < stop:
                new.append((at, stop))
            at = stop
        for a, b in new:
            self._insert(a, b)
        return new

    def _insert(self, lo: int, hi: int) -> None:
        i = bisect_right(self.starts, lo)
        if i > 0 and self.ends[i - 1] == lo:
            self.ends[i - 1] = hi
            if i < len(self.starts) and self.starts[i] == hi:
                self.ends[i - 1] = self.ends.pop(i)
                self.starts.pop(i)
        elif i < len(self.starts) and self.starts[i] == hi:
            self.starts[i] = lo
        else:
            self.starts.insert(i, lo)
            self.ends.insert(i, hi)


@attrs.define(slots=True)
class SinkStatistics:
    """What a :class:`SinkRows` saw."""

    events: int = 0
    """Sink events fed, valid or not."""
    rows: int = 0
    """Rows returned (each identity once)."""
    duplicates: int = 0
    """Rows dropped because their identity was delivered before."""
    too_old: int = 0
    """Rows dropped because their batch is older than the batches kept."""
    malformed: int = 0
    """Payloads that started like a sink event but did not decode."""


class SinkRows:
    """De-duplicates the rows of delivered sink events: each identity once.

    Feed it every delivered payload in delivery order (one instance per
    member). It remembers, per stream, the row numbers of the last
    ``keep_batches`` batch ids; rows of an older batch are dropped (Spark
    re-runs only a stream's last batch after a restart). State grows with the
    streams (one per streaming query or batch write) and the partitions of
    the batches kept, not with the rows: a partition's rows form one range.
    """

    def __init__(self, *, keep_batches: int = 1024) -> None:
        if keep_batches < 1:
            raise ValueError("keep_batches must be at least 1")
        self.keep_batches = keep_batches
        self.statistics = SinkStatistics()
        # stream -> batch -> partition -> rows seen
        self._seen: dict[str, dict[int, dict[int, _Ranges]]] = {}

    def feed(self, payload: bytes) -> list[SinkRow] | None:
        """The new rows of ``payload``; ``None`` when it is not a sink event."""
        if not is_sink_event(payload):
            return None
        self.statistics.events += 1
        try:
            event = decode_event(payload)
        except SinkFormatError:
            self.statistics.malformed += 1
            return []
        return self.accept(event)

    def accept(self, event: SinkEvent) -> list[SinkRow]:
        """The rows of ``event`` not delivered before."""
        stats = self.statistics
        batches = self._seen.setdefault(event.stream, {})
        partitions = batches.get(event.batch)
        if partitions is None:
            if len(batches) >= self.keep_batches and event.batch < min(batches):
                stats.too_old += len(event.values)
                return []
            partitions = batches[event.batch] = {}
            while len(batches) > self.keep_batches:
                del batches[min(batches)]
        ranges = partitions.setdefault(event.partition, _Ranges())
        out: list[SinkRow] = []
        for lo, hi in ranges.add(event.first, event.first + len(event.values)):
            out += (
                SinkRow(
                    event.stream, event.batch, event.partition, row, event.values[row - event.first]
                )
                for row in range(lo, hi)
            )
        stats.rows += len(out)
        stats.duplicates += len(event.values) - len(out)
        return out

    def feed_all(self, payloads: Iterable[bytes]) -> list[SinkRow]:
        """The new rows of several payloads (non-sink payloads are skipped)."""
        out: list[SinkRow] = []
        for payload in payloads:
            out += self.feed(payload) or []
        return out
