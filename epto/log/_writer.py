"""Appending deliveries to a node's log, with a chosen flush and fsync policy.

One writer per node directory (an exclusive ``flock`` on ``LOCK`` enforces
it; the kernel drops the lock when the writer dies). Opening a directory a
previous writer left behind recovers it: the open segment is cut back to its
last complete record, made durable, and closed; appending resumes at the next
delivery index.

The manifest (``MANIFEST``) records how far the log was made durable: the
writer updates it after every ``fsync`` of the records (``fsync_every``, segment
close, :meth:`DeliveryLogWriter.close`, recovery). A directory whose records
end before the manifest's end lost durable records; the writer refuses to
open it (:class:`LogTailLostError`) unless told to resume after the recorded
end, so that an index is never given to two different durable records.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from .._errors import ConfigurationError, LocalProtocolError, MemberRunningError
from .._event import Delivery, DeliveryTag
from ._manifest import ManifestWriter, fsync_dir, read_manifest
from ._reader import LogTailLostError, list_segments, node_directory
from ._segment import (
    HEADER_SIZE,
    LogCorruptError,
    body_index,
    decode_header,
    encode_header,
    encode_record,
    scan_frames,
    segment_name,
)

DEFAULT_SEGMENT_BYTES = 64 << 20

_fsync_dir = fsync_dir


class DeliveryLogWriter:
    """Append-only writer of one node's delivery log under ``root/<node>/``.

    ``flush_every``: records kept in memory before one ``write`` hands them to
    the operating system (1: every record reaches the OS at once, and survives
    a crash of the process). ``fsync_every``: records between ``fsync`` calls
    (0: only when a segment is closed and on :meth:`close`; 1: every record
    survives a crash of the machine). ``segment_bytes``: size at which the open
    segment is closed and a new one started.

    After every ``fsync`` the writer records in ``MANIFEST`` how far the log is
    durable. Opening a directory whose records end before that point (durable
    records were lost: the last segments were cut or deleted) raises
    :class:`LogTailLostError`; with ``resume_after_loss=True`` the writer
    instead continues at the manifest's end, leaving the lost indices as a gap
    that readers report (:class:`LogGapError`), and never gives them again.

    Times are integers in microseconds (see :func:`epto.log.micros`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        node: int,
        *,
        flush_every: int = 1,
        fsync_every: int = 0,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        resume_after_loss: bool = False,
    ) -> None:
        if flush_every < 1:
            raise ConfigurationError(f"flush_every must be >= 1, got {flush_every}")
        if fsync_every < 0:
            raise ConfigurationError(f"fsync_every must be >= 0, got {fsync_every}")
        if segment_bytes < HEADER_SIZE + 64:
            raise ConfigurationError(f"segment_bytes is too small: {segment_bytes}")
        if not 0 <= node < 2**64:
            raise ConfigurationError(f"node must be in [0, 2**64), got {node}")
        self.node = node
        self.directory = node_directory(root, node)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._flush_every = flush_every
        self._fsync_every = fsync_every
        self._segment_bytes = segment_bytes
        self._lock_fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            # One writer per node's log: a second live process of this member.
            raise MemberRunningError(
                f"member {node} already runs in another process "
                f"({self.directory} is open in another writer)"
            ) from None
        self._fd = -1
        self._buffer: list[bytes] = []
        self._since_fsync = 0
        self._segment_first = 0
        self._segment_size = 0
        self._segment_dir_synced = False
        self._closed = False
        try:
            self._next, self._manifest = self._open_manifest(resume_after_loss)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open_manifest(self, resume_after_loss: bool) -> tuple[int, ManifestWriter]:
        state = read_manifest(self.directory)
        if state is not None and state.node != self.node:
            raise LogCorruptError(
                f"{self.directory}: the manifest belongs to node {state.node}, not {self.node}"
            )
        found = self._recover()  # durable up to `found` once it returns
        if state is not None and found < state.end:
            if not resume_after_loss:
                raise LogTailLostError(
                    f"{self.directory}: data loss: the log ends at index {found} but its "
                    f"manifest records {state.end} as durable (delivery indices "
                    f"{found}..{state.end - 1} are lost); refusing to give them again. "
                    "Restore the lost segments, or open with resume_after_loss=True to "
                    f"continue at {state.end} and leave the gap"
                )
            return state.end, ManifestWriter(self.directory, self.node, state, state.end)
        return found, ManifestWriter(self.directory, self.node, state, found)

    # -- recovery -------------------------------------------------------------

    def _recover(self) -> int:
        segments = list_segments(self.directory)
        if not segments:
            return 0
        last = segments[-1]
        if last.closed:
            data = last.path.read_bytes()
            decode_header(data, str(last.path))
            end, pos = last.first_index, HEADER_SIZE
            for start, stop in scan_frames(data, HEADER_SIZE):
                end, pos = body_index(data, start) + 1, stop
            if pos < len(data):
                raise LogCorruptError(f"{last.path}: damaged record at byte {pos}")
            return end
        # The open segment a previous writer left: keep its complete records.
        data = last.path.read_bytes()
        end = last.first_index
        good = 0
        if len(data) >= HEADER_SIZE:
            decode_header(data, str(last.path))
            good = HEADER_SIZE
            for start, stop in scan_frames(data, HEADER_SIZE):
                end = body_index(data, start) + 1
                good = stop
        if end == last.first_index:
            last.path.unlink()
        else:
            with open(last.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
            os.rename(last.path, last.path.with_name(segment_name(last.first_index, closed=True)))
        _fsync_dir(self.directory)
        return end

    # -- appending ------------------------------------------------------------

    @property
    def next_index(self) -> int:
        """The delivery index the next appended record gets."""
        return self._next

    def append(
        self, delivery: Delivery, *, delivered_at: int, broadcast_at: int | None = None
    ) -> int:
        """Log one delivery; returns its delivery index.

        An ``OPTIMISTIC`` or ``REVOKED`` delivery is refused
        (``LocalProtocolError``): the log holds the total order; an optimistic
        delivery's ``FINAL`` one follows, or its ``REVOKED`` one (the message
        is not in the order)."""
        if delivery.tag is DeliveryTag.OPTIMISTIC or delivery.tag is DeliveryTag.REVOKED:
            raise LocalProtocolError(
                f"a delivery tagged {delivery.tag.value} is not a step of the total order: "
                "log the final delivery"
            )
        event = delivery.event
        return self.append_fields(
            source=event.source,
            seq=event.seq,
            ts=event.ts,
            payload=event.payload,
            signature=event.signature,
            out_of_order=delivery.tag is DeliveryTag.OUT_OF_ORDER,
            delivered_at=delivered_at,
            broadcast_at=broadcast_at,
        )

    def append_fields(
        self,
        *,
        source: int,
        seq: int,
        ts: int,
        payload: bytes,
        delivered_at: int,
        broadcast_at: int | None = None,
        out_of_order: bool = False,
        signature: bytes = b"",
    ) -> int:
        """Log one delivery given as fields (for tools that have no Event)."""
        if self._closed:
            raise LocalProtocolError("the delivery log writer is closed")
        index = self._next
        frame = encode_record(
            index=index,
            source=source,
            seq=seq,
            ts=ts,
            out_of_order=out_of_order,
            delivered_at=delivered_at,
            broadcast_at=broadcast_at,
            payload=payload,
            signature=signature,
        )
        if self._fd < 0:
            self._open_segment(index)
        elif self._segment_size + len(frame) > self._segment_bytes:
            self._close_segment()
            self._open_segment(index)
        self._buffer.append(frame)
        self._segment_size += len(frame)
        self._next = index + 1
        self._since_fsync += 1
        if self._fsync_every and self._since_fsync >= self._fsync_every:
            self.flush(fsync=True)
        elif len(self._buffer) >= self._flush_every:
            self.flush()
        return index

    def flush(self, *, fsync: bool = False) -> None:
        """Hand buffered records to the OS; with ``fsync``, make them durable."""
        if self._buffer:
            data = b"".join(self._buffer)
            self._buffer.clear()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        if fsync and self._fd >= 0:
            os.fsync(self._fd)
            self._since_fsync = 0
            if not self._segment_dir_synced:  # the open segment's name must be durable too
                _fsync_dir(self.directory)
                self._segment_dir_synced = True
            self._manifest.update(self._next)

    def delete_before(self, index: int) -> int:
        """Delete the closed segments whose records all lie below ``index``
        (compaction: a snapshot covers them); the number deleted. The log then
        starts at the first segment kept (``log_bounds``); the open segment is
        never deleted."""
        segments = [s for s in list_segments(self.directory) if s.closed]
        if not segments:
            return 0
        deleted = 0
        for here, following in zip(segments, [*segments[1:], None], strict=True):
            end = following.first_index if following is not None else self._segment_first
            if end > index or here.first_index >= self._segment_first:
                break
            here.path.unlink()
            deleted += 1
        if deleted:
            _fsync_dir(self.directory)
        return deleted

    def _open_segment(self, first: int) -> None:
        path = self.directory / segment_name(first, closed=False)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        header = encode_header(self.node, first)
        os.write(self._fd, header)
        self._segment_first = first
        self._segment_size = len(header)
        self._segment_dir_synced = False
        if self._fsync_every:
            _fsync_dir(self.directory)
            self._segment_dir_synced = True

    def _close_segment(self) -> None:
        # The records, then the new name, then the manifest that promises them.
        self.flush()
        os.fsync(self._fd)
        self._since_fsync = 0
        os.close(self._fd)
        self._fd = -1
        first = self._segment_first
        os.rename(
            self.directory / segment_name(first, closed=False),
            self.directory / segment_name(first, closed=True),
        )
        _fsync_dir(self.directory)
        self._manifest.update(self._next)

    def close(self) -> None:
        """Flush, fsync and close the open segment; release the directory."""
        if self._closed:
            return
        try:
            if self._fd >= 0:
                self._close_segment()
        finally:
            self._closed = True
            self._manifest.close()
            os.close(self._lock_fd)

    def __enter__(self) -> DeliveryLogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class DeliveryLogs:
    """One :class:`DeliveryLogWriter` per node under one root, opened on first use.

    The shape of a delivery observer: a simulator or a transport calls
    :meth:`write` for every delivery of every node it runs.
    """

    def __init__(self, root: str | os.PathLike[str], **writer_options: Any) -> None:
        self.root = Path(root)
        self._options = writer_options
        self._writers: dict[int, DeliveryLogWriter] = {}

    def writer(self, node: int) -> DeliveryLogWriter:
        w = self._writers.get(node)
        if w is None:
            w = self._writers[node] = DeliveryLogWriter(self.root, node, **self._options)
        return w

    def write(
        self, node: int, delivery: Delivery, *, delivered_at: int, broadcast_at: int | None = None
    ) -> int:
        return self.writer(node).append(
            delivery, delivered_at=delivered_at, broadcast_at=broadcast_at
        )

    def close_node(self, node: int) -> None:
        """Close one node's writer (a later :meth:`write` reopens it)."""
        w = self._writers.pop(node, None)
        if w is not None:
            w.close()

    def flush(self, *, fsync: bool = False) -> None:
        for w in self._writers.values():
            w.flush(fsync=fsync)

    def close(self) -> None:
        errors = []
        for w in self._writers.values():
            try:
                w.close()
            except OSError as exc:  # close the rest, report the first
                errors.append(exc)
        self._writers.clear()
        if errors:
            raise errors[0]

    def __enter__(self) -> DeliveryLogs:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
