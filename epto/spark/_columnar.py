"""Delivery-log records as Arrow columns, decoded in bulk from segment bytes.

The log is walked by :func:`epto.log._reader.walk_frames`, the one walk that
:func:`epto.log.iter_raw` uses too (same ranges, same gap, lost-tail and
corruption errors): per segment, the segment's bytes and the byte positions of
the records to read. It is re-exported here as :func:`scan_frames`.
:func:`decode` then builds the columns with Arrow kernels, without a Python
object per field:

* the first 64 bytes of every frame (frame header, the six 8-byte fields,
  flags, signature length) are joined into one buffer with a stride of eight
  64-bit words, and each fixed-width column is one ``take`` of every eighth
  word from it;
* payloads and signatures are gathered by one ``take`` from a binary array
  laid over the whole segment, whose offsets alternate between the start and
  the end of each record's bytes;
* only the columns asked for are built.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Sequence

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from .._errors import EptoError
from ..log._manifest import read_manifest
from ..log._reader import LogExtent, list_segments, load_segment, walk_frames
from ..log._segment import (
    BODY,
    FLAG_HAS_BROADCAST,
    FLAG_OUT_OF_ORDER,
    HEADER_SIZE,
    MAX_BODY,
    LogCorruptError,
    decode_header,
)

scan_frames = walk_frames
"""``(segment bytes, frame positions)`` per segment: the log's one walk, by the
name the Spark source's modules use."""
STRIDE = 64
"""Bytes gathered per record: frame header (8), six 8-byte fields (48), flags,
signature length and five bytes beyond (8)."""
_SIG_AT = 8 + BODY.size
"""Offset of the signature from the start of a frame."""

TIMESTAMP = pa.timestamp("us", tz="UTC")
COLUMN_TYPES: dict[str, pa.DataType] = {
    "node": pa.int64(),
    "offset": pa.int64(),
    "source": pa.int64(),
    "seq": pa.int64(),
    "ts": pa.int64(),
    "tag": pa.string(),
    "payload": pa.binary(),
    "delivered_at": TIMESTAMP,
    "broadcast_at": TIMESTAMP,
    "signature": pa.binary(),
}
"""Every column the source can produce, in schema order."""
_WORD = {"offset": 1, "source": 2, "seq": 3, "ts": 4, "delivered_at": 5, "broadcast_at": 6}
"""Which 64-bit word of a gathered record holds each fixed-width field."""
_UNSIGNED = ("offset", "source", "seq")


def _steps(count: int, step: int, first: int = 0) -> pa.Array:
    """``first, first + step, ...`` (``count`` values) without a Python loop."""
    if count == 0:
        return pa.array([], pa.int64())
    ramp = pc.cumulative_sum(pa.repeat(pa.scalar(step, pa.int64()), count))
    return pc.add(ramp, first - step)


def _gather(data: pa.Buffer, starts: pa.Array, stops: pa.Array) -> pa.Array:
    """``data[starts[i]:stops[i]]`` as a binary array; ranges ascending, disjoint."""
    n = len(starts)
    # Element 2i is record i's bytes, element 2i+1 the bytes up to the next record.
    bounds = pc.take(pa.concat_arrays([starts, stops]), _interleave(n))
    laid = pa.Array.from_buffers(pa.large_binary(), 2 * n - 1, [None, bounds.buffers()[1], data])
    return pc.take(laid, _steps(n, 2)).cast(pa.binary())


def _interleave(n: int) -> pa.Array:
    """``0, n, 1, n + 1, ...``: positions that interleave two arrays of ``n``."""
    j = _steps(2 * n, 1)
    return pc.add(pc.shift_right(j, 1), pc.multiply(pc.bit_wise_and(j, 1), n))


def decode(data: bytes, positions: list[int], node: int, columns: Sequence[str]) -> pa.RecordBatch:
    """The records framed at ``positions`` in segment ``data``: ``columns`` only."""
    n = len(positions)

    @functools.cache
    def words() -> pa.Array:  # built only for columns other than node
        parts = [data[p : p + STRIDE] for p in positions]
        if len(parts[-1]) < STRIDE:  # the segment's last record, shorter than STRIDE
            parts[-1] = parts[-1].ljust(STRIDE, b"\0")
        return pa.Array.from_buffers(pa.int64(), 8 * n, [None, pa.py_buffer(b"".join(parts))])

    @functools.cache
    def word(k: int) -> pa.Array:
        rows = _steps(n, 8, k)
        return pc.take(words(), rows)

    def flags() -> pa.Array:  # word 7: flags (low byte), signature length (next two)
        return pc.bit_wise_and(word(7), 0xFF)

    out: list[pa.Array] = []
    for name in columns:
        if name == "node":
            out.append(pa.repeat(pa.scalar(node, pa.int64()), n))
        elif name == "tag":
            ooo = pc.not_equal(pc.bit_wise_and(flags(), FLAG_OUT_OF_ORDER), 0)
            out.append(pc.if_else(ooo, "out-of-order", "in-order"))
        elif name in ("payload", "signature"):
            siglen = pc.bit_wise_and(pc.shift_right(word(7), 8), 0xFFFF)
            frame = pa.array(positions, pa.int64())
            sig = pc.add(frame, _SIG_AT)
            if name == "signature":  # NULL for a record without a signature
                signed = _gather(pa.py_buffer(data), sig, pc.add(sig, siglen))
                out.append(pc.if_else(pc.equal(siglen, 0), pa.scalar(None, pa.binary()), signed))
            else:
                length = pc.bit_wise_and(word(0), 0xFFFFFFFF)
                stop = pc.add(pc.add(frame, 8), length)
                out.append(_gather(pa.py_buffer(data), pc.add(sig, siglen), stop))
        else:
            values = word(_WORD[name])
            if name == "broadcast_at":
                known = pc.not_equal(pc.bit_wise_and(flags(), FLAG_HAS_BROADCAST), 0)
                values = pc.if_else(known, values, pa.scalar(None, pa.int64()))
            if name in _UNSIGNED and n and pc.min(values).as_py() < 0:
                raise EptoError(
                    f"node {node}: a {name} at or above 2**63 cannot be read as a Spark BIGINT"
                )
            out.append(values.cast(TIMESTAMP) if name.endswith("_at") else values)
    schema = pa.schema([(c, COLUMN_TYPES[c]) for c in columns])
    return pa.RecordBatch.from_arrays(out, schema=schema)


def first_at_or_after(node_dir: str | os.PathLike[str], micros: int) -> int | None:
    """The index of the first record delivered at or after ``micros`` (Kafka's
    offset-for-time: the earliest such record, in index order), else ``None``.
    Reads the ``delivered_at`` column of the whole log; missing records are skipped."""
    for data, positions in scan_frames(node_dir, skip_missing=True):
        batch = decode(data, positions, 0, ("offset", "delivered_at"))
        at = batch.column(1).cast(pa.int64())
        hit = pc.index(pc.greater_equal(at, micros), True).as_py()
        if hit >= 0:
            return int(batch.column(0)[hit].as_py())
    return None


LENGTH_INDEX = struct.Struct("<I4xQ")
"""A frame's length, then (past the CRC) the body's index."""
_CLOSED_ENDS: dict[tuple[str, int, int], int] = {}
"""(path, size, mtime) of a closed last segment -> one past its last index,
kept for the life of the process (the driver's stream reader plans every
trigger; a closed segment never changes)."""
_CLOSED_ENDS_MAX = 100_000


def extent(node_dir: str | os.PathLike[str]) -> LogExtent:
    """:func:`epto.log.log_extent`'s answer, sooner: in a closed last segment the
    frames are followed by their lengths without checking their CRCs (a
    damaged record there fails the read that meets it, with the same
    :class:`LogCorruptError`), and its end is remembered while the file keeps
    its size and modification time; the open segment's frames are checked,
    since a bad frame ends what may be read of it."""
    manifest = read_manifest(node_dir)  # before the listing, as log_extent does
    durable = None if manifest is None else manifest.end
    segments = list_segments(node_dir)
    if not segments:
        return LogExtent(first=0, end=0, durable_end=durable)
    first, last = segments[0].first_index, segments[-1]
    key = None
    if last.closed:  # a closed segment never changes: its end is remembered
        try:
            stat = last.path.stat()
        except FileNotFoundError:
            pass  # deleted since the listing: read below, which raises
        else:
            key = (str(last.path), stat.st_size, stat.st_mtime_ns)
            if key in _CLOSED_ENDS:
                return LogExtent(first=first, end=_CLOSED_ENDS[key], durable_end=durable)
    data, closed = load_segment(last)
    end = last.first_index
    size = len(data)
    if not closed and size < HEADER_SIZE:
        return LogExtent(first=first, end=end, durable_end=durable)
    first_index = decode_header(data, str(last.path))[1]
    if first_index != last.first_index:
        raise LogCorruptError(f"{last.path}: header says first index {first_index}")
    pos = HEADER_SIZE
    if closed:
        unpack = LENGTH_INDEX.unpack_from
        while pos + 16 <= size:
            length, index = unpack(data, pos)
            stop = pos + 8 + length
            if length < BODY.size or length > MAX_BODY or stop > size:
                break
            end, pos = index + 1, stop
        if pos < size:
            raise LogCorruptError(f"{last.path}: damaged record at byte {pos}")
        if key is not None and key[1] == size:
            if len(_CLOSED_ENDS) >= _CLOSED_ENDS_MAX:
                _CLOSED_ENDS.clear()
            _CLOSED_ENDS[key] = end
    else:
        for segment, positions in scan_frames(node_dir, last.first_index, skip_missing=True):
            (index,) = struct.unpack_from("<Q", segment, positions[-1] + 8)
            end = index + 1
    return LogExtent(first=first, end=end, durable_end=durable)
