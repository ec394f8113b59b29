"""Reading delivery logs, from any delivery index, while a writer may append.

Readers never lock. A closed segment (``*.seg``) must read back whole; the
open segment (``*.open``) is read up to its last complete record, so a reader
sees a prefix of what the writer has flushed and never a half-written record.
When the writer closes the open segment between the moment a reader lists the
directory and the moment it opens the file, the reader follows the rename.

The manifest (``MANIFEST``, see :mod:`epto.log._manifest`) says how far the
writer made the log durable; a log whose records end before that point lost
its tail, and readers raise :class:`LogTailLostError`. Readers read the
manifest *before* listing the segments: the writer updates it only after the
records it covers are in the files, so a reader racing the writer never sees
the manifest ahead of the segments it lists.
"""

from __future__ import annotations

import itertools
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import attrs

from ._manifest import read_manifest
from ._segment import (
    BODY,
    FLAG_OUT_OF_ORDER,
    FRAME,
    HEADER_SIZE,
    MAX_BODY,
    LogCorruptError,
    LogRecord,
    RawRecord,
    body_index,
    decode_body,
    decode_header,
    parse_segment_name,
    scan_frames,
    segment_name,
    to_record,
)


class LogGapError(LogCorruptError):
    """Delivery indices that should be present are not (a segment is missing)."""


class LogTailLostError(LogGapError):
    """The log ends before the end its manifest recorded as durable: records the
    writer had made durable are gone (the last segments were cut or deleted)."""


@attrs.frozen(kw_only=True, slots=True)
class LogExtent:
    """What one node's log holds, and how far it should go."""

    first: int
    """The first index held (the first segment's first index)."""
    end: int
    """One past the last complete record found."""
    durable_end: int | None
    """One past the last index the writer recorded as durable in the manifest;
    ``None`` for a log without a manifest (written before manifests existed)."""

    @property
    def lost_tail(self) -> tuple[int, int] | None:
        """``(end, durable_end)`` when records the manifest covers are gone."""
        if self.durable_end is not None and self.end < self.durable_end:
            return self.end, self.durable_end
        return None


def _missing(node_dir: str | os.PathLike[str], expected: int, found: int) -> LogGapError:
    return LogGapError(f"{node_dir}: delivery indices {expected}..{found - 1} are missing")


def _tail_lost(node_dir: str | os.PathLike[str], end: int, durable_end: int) -> LogTailLostError:
    return LogTailLostError(
        f"{node_dir}: data loss: the log ends at index {end} but its manifest records "
        f"{durable_end} as durable (delivery indices {end}..{durable_end - 1} are lost)"
    )


@attrs.frozen(kw_only=True, slots=True)
class Segment:
    path: Path
    first_index: int
    closed: bool


def node_directory(root: str | os.PathLike[str], node: int) -> Path:
    """Where node ``node``'s log lives under ``root``: ``root/<node>``."""
    return Path(root) / str(node)


def list_nodes(root: str | os.PathLike[str]) -> list[int]:
    """Node ids that have a log directory under ``root``, ascending."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit() and p.is_dir())


def list_segments(node_dir: str | os.PathLike[str]) -> list[Segment]:
    """The node's segments in index order."""
    out = []
    try:
        names = os.listdir(node_dir)
    except FileNotFoundError:
        return []
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is not None:
            out.append(Segment(path=Path(node_dir) / name, first_index=parsed[0], closed=parsed[1]))
    out.sort(key=lambda s: (s.first_index, s.closed))
    return out


def load_segment(segment: Segment) -> tuple[bytes, bool]:
    """The bytes of a segment and whether it is closed, following a concurrent
    close (the writer renames ``*.open`` to ``*.seg``)."""
    try:
        return segment.path.read_bytes(), segment.closed
    except FileNotFoundError:
        if segment.closed:
            raise
    closed_path = segment.path.with_name(segment_name(segment.first_index, closed=True))
    return closed_path.read_bytes(), True


def _frames(segment: Segment) -> tuple[bytes, int, Iterator[tuple[int, int]], bool]:
    data, closed = load_segment(segment)
    if not closed and len(data) < HEADER_SIZE:
        # A segment being created: the header is not written yet.
        return data, -1, iter(()), closed
    node, first = decode_header(data, str(segment.path))
    if first != segment.first_index:
        raise LogCorruptError(f"{segment.path}: header says first index {first}")
    return data, node, scan_frames(data, HEADER_SIZE), closed


FRAME_INDEX = struct.Struct("<IIQ")
"""A frame's length and CRC32, then the body's first field (the index)."""
_MAX_INDEX = 1 << 64
"""Above every delivery index (indices are unsigned 64-bit)."""


def walk_frames(
    node_dir: str | os.PathLike[str],
    start: int = 0,
    end: int | None = None,
    *,
    skip_missing: bool = False,
) -> Iterator[tuple[bytes, list[int]]]:
    """The one walk of a node's log: ``(segment bytes, frame positions)`` of the
    records with ``start <= index < end``, segment by segment, in index order.
    A position is where a record's frame starts (its 8-byte length and CRC32
    header; the body follows). :func:`iter_raw` decodes each record from it,
    the Spark source's columnar reader (:mod:`epto.spark._columnar`) whole
    columns at once.

    The only Python work per record is the frame check (length, CRC32, index).
    Raises :class:`LogGapError` when the first available index is above
    ``start`` or indices jump, :class:`LogTailLostError` when the log ends
    before the end its manifest recorded as durable (or before ``end``, when
    the manifest covers ``end``), and :class:`LogCorruptError` when a closed
    segment does not read back whole; the records before the point of failure
    are yielded first. With ``skip_missing``, missing indices are skipped and
    nothing is raised for them (damaged records still raise).
    """
    manifest = read_manifest(node_dir)  # before the listing: see the module docstring
    segments = list_segments(node_dir)
    # Skip segments that end before start: the next segment's first index bounds them.
    first = 0
    while first + 1 < len(segments) and segments[first + 1].first_index <= start:
        first += 1
    expected = start
    torn = False
    unpack = FRAME_INDEX.unpack_from
    crc32 = zlib.crc32
    min_body, frame = BODY.size, FRAME.size
    limit = _MAX_INDEX if end is None else end
    for seg in segments[first:]:
        if seg.first_index >= limit:
            return
        if seg.first_index > expected:
            if not skip_missing:
                raise _missing(node_dir, expected, seg.first_index)
            expected = seg.first_index
        data, closed = load_segment(seg)
        size = len(data)
        if not closed and size < HEADER_SIZE:
            continue  # a segment being created: the header is not written yet
        first_index = decode_header(data, str(seg.path))[1]
        if first_index != seg.first_index:
            raise LogCorruptError(f"{seg.path}: header says first index {first_index}")
        positions: list[int] = []
        keep = positions.append
        pos = HEADER_SIZE
        reached_end = False
        # A frame needs FRAME.size header bytes and a body of at least BODY.size
        # bytes, so fewer than 16 bytes left is a torn tail.
        while pos + 16 <= size:
            length, crc, index = unpack(data, pos)
            body = pos + frame
            stop = body + length
            if (
                length < min_body
                or length > MAX_BODY
                or stop > size
                or crc32(data[body:stop]) != crc
            ):
                break
            if index == expected and index < limit:  # the usual case, first
                keep(pos)
                expected += 1
                pos = stop
                continue
            here, pos = pos, stop
            if index < expected:
                continue
            if index >= limit:
                reached_end = True
                break
            if not skip_missing:
                if positions:
                    yield data, positions
                raise LogGapError(f"{node_dir}: expected index {expected}, found {index}")
            keep(here)
            expected = index + 1
        if positions:
            yield data, positions
        if reached_end:
            return
        if pos < size:
            if closed:
                raise LogCorruptError(f"{seg.path}: damaged record at byte {pos}")
            torn = True  # torn or in-progress tail of the open segment
            break
    if skip_missing:
        return
    check_end(node_dir, expected, end, None if manifest is None else manifest.end, torn=torn)


def iter_raw(
    node_dir: str | os.PathLike[str],
    start: int = 0,
    end: int | None = None,
    *,
    skip_missing: bool = False,
) -> Iterator[RawRecord]:
    """Raw records with ``start <= index < end`` (``end=None``: up to the last one).

    Raises :class:`LogGapError` when the first available index is above
    ``start`` or indices jump, :class:`LogTailLostError` when the log ends
    before the end its manifest recorded as durable (or before ``end``, when
    the manifest covers ``end``), and :class:`LogCorruptError` when a closed
    segment does not read back whole.

    With ``skip_missing``, missing indices are skipped instead: every record of
    ``[start, end)`` that exists is yielded, and nothing is raised for what is
    missing (damaged records still raise :class:`LogCorruptError`).
    """
    length_at, frame = FRAME.unpack_from, FRAME.size
    for data, positions in walk_frames(node_dir, start, end, skip_missing=skip_missing):
        for pos in positions:
            yield decode_body(data, pos + frame, pos + frame + length_at(data, pos)[0])


def check_end(
    node_dir: str | os.PathLike[str],
    expected: int,
    end: int | None,
    durable: int | None,
    *,
    torn: bool,
) -> None:
    """After a walk that stopped before index ``expected``: raise
    :class:`LogTailLostError` if the manifest says records up to ``durable``
    were durable, :class:`LogGapError` if ``end`` was asked for and the log
    (not torn) ends before it."""
    if durable is not None and expected < durable and (end is None or expected < end):
        raise _tail_lost(node_dir, expected, durable)
    if end is not None and expected < end and not torn:
        raise LogGapError(f"{node_dir}: log ends at index {expected}, {end} was asked for")


def read_log(
    node_dir: str | os.PathLike[str], start: int = 0, end: int | None = None
) -> Iterator[LogRecord]:
    """Records of one node's log with ``start <= index < end``, in index order."""
    segments = list_segments(node_dir)
    node = _node_of(segments)
    for raw in iter_raw(node_dir, start, end):
        yield to_record(node, raw)


def _node_of(segments: list[Segment]) -> int:
    """The node id in the first segment's header (-1 while it is being created)."""
    for seg in segments:
        try:
            with open(seg.path, "rb") as f:
                head = f.read(HEADER_SIZE)
        except FileNotFoundError:
            head = seg.path.with_name(segment_name(seg.first_index, closed=True)).read_bytes()
        if len(head) >= HEADER_SIZE:
            return decode_header(head[:HEADER_SIZE], str(seg.path))[0]
    return -1


def log_extent(node_dir: str | os.PathLike[str]) -> LogExtent:
    """What the log holds and how far its manifest says it goes; never raises for
    missing records (see :attr:`LogExtent.lost_tail`). Only the last segment is
    scanned; a damaged closed last segment raises :class:`LogCorruptError`."""
    manifest = read_manifest(node_dir)  # before the listing: see the module docstring
    durable = None if manifest is None else manifest.end
    segments = list_segments(node_dir)
    if not segments:
        return LogExtent(first=0, end=0, durable_end=durable)
    first = segments[0].first_index
    last = segments[-1]
    data, _, frames, closed = _frames(last)
    end = last.first_index
    pos = HEADER_SIZE
    for body_start, body_stop in frames:
        end = body_index(data, body_start) + 1
        pos = body_stop
    if closed and pos < len(data):
        raise LogCorruptError(f"{last.path}: damaged record at byte {pos}")
    return LogExtent(first=first, end=end, durable_end=durable)


def extent_loss(node_dir: str | os.PathLike[str]) -> LogGapError | None:
    """The data loss that ``iter_raw(node_dir)`` would raise and the log's
    extent shows without reading it (only the last segment is scanned): the
    records before the first segment kept (a log starts at index 0), or a tail
    the manifest recorded as durable. A segment missing in the middle needs a
    full read (``iter_raw``, or the Spark reader with ``failOnDataLoss``)."""
    extent = log_extent(node_dir)
    if extent.first > 0:
        return _missing(node_dir, 0, extent.first)
    if extent.lost_tail is not None:
        return _tail_lost(node_dir, *extent.lost_tail)
    return None


def last_ordered_ts(node_dir: str | os.PathLike[str]) -> int:
    """The largest timestamp of the events the log delivered in the total
    order (not tagged ``OUT_OF_ORDER``; 0 when there is none): where a member
    restarted on this log resumes the order (:meth:`epto.epidemic.Process.resume_after`).
    Reads from the last segment backwards until one holds such a record;
    tolerates a lost tail (a crash before the last records reached the disk)."""
    extent = log_extent(node_dir)
    end = extent.end
    for segment in reversed(list_segments(node_dir)):
        start = max(segment.first_index, extent.first)
        if start >= end:
            continue
        # (index, source, seq, ts, delivered, broadcast, flags, signature, payload)
        ordered = [
            raw[3]
            for raw in iter_raw(node_dir, start, end, skip_missing=True)
            if not raw[6] & FLAG_OUT_OF_ORDER
        ]
        if ordered:
            return max(ordered)
        end = start
    return 0


def log_bounds(node_dir: str | os.PathLike[str]) -> tuple[int, int]:
    """``(first, end)``: the first index held and one past the last complete record.

    ``first == end`` for an empty log. Only the last segment is scanned. Raises
    :class:`LogTailLostError` when the log ends before the end its manifest
    recorded as durable (:func:`log_extent` tells without raising).
    """
    extent = log_extent(node_dir)
    lost = extent.lost_tail
    if lost is not None:
        raise _tail_lost(node_dir, *lost)
    return extent.first, extent.end


def segment_ranges(node_dir: str | os.PathLike[str], start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` split at segment boundaries (one range per segment touched)."""
    cuts = [s.first_index for s in list_segments(node_dir) if start < s.first_index < end]
    bounds = [start, *cuts, end]
    return [(a, b) for a, b in itertools.pairwise(bounds) if a < b]
