"""Where a node keeps its member's vote (the token ring's durable state,
docs/token-ring.md, *A majority restarted at once*): two slot files in the
member's data directory, written in turn.

Rules:

* ``member-<pid>.vote.0`` and ``member-<pid>.vote.1`` each hold one record:
  a header (magic, counter, CRC-32 and length of the payload) then the
  payload (the endpoint's bytes, opaque here). Record ``n`` goes to slot
  ``n % 2``, written in place from offset 0 (``pwrite``); with ``sync``
  it is flushed (``fsync``) before :meth:`VoteStore.write` returns. A
  write torn by a crash leaves the other slot's record, the one before,
  whose dependent frames are the only ones that left: reading it back is
  what the member had promised and accepted.
* :meth:`VoteStore.load` returns the payload of the valid record with the
  highest counter (None if there is none): a slot that is missing, short,
  or fails its CRC does not count.
* :meth:`VoteStore.clear` removes both slots (and flushes the directory):
  a start that does not resume (a first start, a new group, a record it
  cannot use) must not leave an earlier start's vote for the next one.
* Every write numbers above every record found at open, so the latest
  record is always the one written last.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Protocol, runtime_checkable

from epto import ProcessId

__all__ = ["KeepsVote", "VoteStore"]


@runtime_checkable
class KeepsVote(Protocol):
    """An endpoint whose member has a vote to keep (the token ring's,
    :class:`epto.endpoint.TokenRingEndpoint`)."""

    durability: str

    def durable_record(self) -> bytes | None: ...

    def resume(self, record: bytes | None) -> bool: ...


_MAGIC = b"EPVS"
_HEAD = struct.Struct(">4sQII")
"""magic, counter, CRC-32 of the payload, payload length."""


class VoteStore:
    """The member's vote on disk (module rules); owned by one running node."""

    def __init__(self, data_dir: str, pid: ProcessId, *, sync: bool) -> None:
        root = Path(data_dir)
        self._paths = (root / f"member-{pid}.vote.0", root / f"member-{pid}.vote.1")
        self._root = root
        self._sync = sync
        self._fds: list[int | None] = [None, None]
        self._counter = 0
        self.writes = 0
        """Records written since the node started."""
        self.latest: bytes | None = None
        for path in self._paths:
            found = _read(path)
            if found is not None and found[0] > self._counter:
                self._counter, self.latest = found

    def load(self) -> bytes | None:
        """The payload of the latest valid record found at open, or None."""
        return self.latest

    def clear(self) -> None:
        """Remove both slots durably (nothing to resume from them)."""
        self.close()
        removed = False
        for path in self._paths:
            try:
                path.unlink()
                removed = True
            except FileNotFoundError:
                pass
        if removed:
            _sync_dir(self._root)
        self.latest = None

    def write(self, payload: bytes) -> None:
        """Write the next record (flushed with ``sync``) before returning."""
        self._counter += 1
        slot = self._counter % 2
        fd = self._fds[slot]
        if fd is None:
            path = self._paths[slot]
            created = not path.exists()
            fd = self._fds[slot] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            if created:
                os.fsync(fd)
                _sync_dir(self._root)
        head = _HEAD.pack(_MAGIC, self._counter, zlib.crc32(payload), len(payload))
        os.pwrite(fd, head + payload, 0)
        if self._sync:
            os.fdatasync(fd)
        self.writes += 1

    def close(self) -> None:
        for i, fd in enumerate(self._fds):
            if fd is not None:
                os.close(fd)
                self._fds[i] = None


def _read(path: Path) -> tuple[int, bytes] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < _HEAD.size:
        return None
    magic, counter, crc, length = _HEAD.unpack_from(data)
    payload = data[_HEAD.size : _HEAD.size + length]
    if magic != _MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
        return None
    return counter, payload


def _sync_dir(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
