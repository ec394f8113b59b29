"""Snapshots on disk: written atomically, checked when read, the newest few kept.

Rules:

* A snapshot file is written to ``<name>.tmp``, ``fsync``ed, renamed to
  ``snap-<applied>-<log index>.epsnap`` and the directory ``fsync``ed: a crash
  at any point leaves either the old set of snapshots or the new one, plus at
  most a ``.tmp`` file that is never read (and removed by the next store).
* A file holds a magic line, a JSON header (cut, applied, digest, log index,
  the state's length and SHA-256) and the state; reading checks all of it, and
  a file that does not check out is skipped (counted in ``corrupt``), never
  loaded in part.
* ``keep`` snapshots are kept; older ones are deleted after a new one is
  durable. The log index of the oldest kept snapshot is what the delivery log
  may be compacted to (:meth:`SnapshotStore.oldest_log_index`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import attrs

from .._errors import ConfigurationError
from ._replica import Snapshot

_MAGIC = b"EPTO-SNAPSHOT 1\n"
_NAME = re.compile(r"^snap-(\d{16})-(\d{16})\.epsnap$")
_MAX_HEADER = 4096


@attrs.frozen(kw_only=True)
class StoredSnapshot:
    snapshot: Snapshot
    log_index: int
    """Delivery-log records below this index are in the snapshot."""
    path: Path
    member: int | None = None
    """The replica (process id) that saved it, if it said (its log indexes
    are that member's log's)."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SnapshotStore:
    """The snapshots of one replica in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 2) -> None:
        if keep < 1:
            raise ConfigurationError("SnapshotStore: keep must be >= 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.corrupt = 0
        """Files skipped because they did not check out."""
        for leftover in self.directory.glob("*.tmp"):
            leftover.unlink()

    def save(self, snapshot: Snapshot, log_index: int, *, member: int | None = None) -> Path:
        """Write ``snapshot`` durably (``member``: the id of the replica whose
        log ``log_index`` counts in); delete the snapshots beyond ``keep``."""
        state = snapshot.state
        fields: dict[str, object] = {
            "cut": None if snapshot.cut is None else list(snapshot.cut),
            "applied": snapshot.applied,
            "digest": snapshot.digest.hex(),
            "log_index": log_index,
            "size": len(state),
            "sha256": hashlib.sha256(state).hexdigest(),
        }
        if member is not None:
            fields["member"] = member
        header = json.dumps(fields).encode()
        name = f"snap-{snapshot.applied:016d}-{log_index:016d}.epsnap"
        final = self.directory / name
        tmp = self.directory / (name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_MAGIC)
            f.write(len(header).to_bytes(4, "big"))
            f.write(header)
            f.write(state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.directory)
        for old in self._files()[self.keep :]:
            old.unlink()
        _fsync_dir(self.directory)
        return final

    def clear(self) -> None:
        """Delete every snapshot (a replica that fetches its state afresh)."""
        for path in self._files():
            path.unlink()
        _fsync_dir(self.directory)

    def _files(self) -> list[Path]:
        """Snapshot files, newest first (by applied count, then log index)."""
        found = [p for p in self.directory.iterdir() if _NAME.match(p.name)]
        return sorted(found, key=lambda p: p.name, reverse=True)

    def load(self, path: Path) -> StoredSnapshot | None:
        """The snapshot in ``path`` if it checks out, else None (counted)."""
        try:
            data = path.read_bytes()
            if not data.startswith(_MAGIC):
                raise ValueError("no magic")
            at = len(_MAGIC)
            size = int.from_bytes(data[at : at + 4], "big")
            if size > _MAX_HEADER:
                raise ValueError("header too large")
            header = json.loads(data[at + 4 : at + 4 + size])
            state = data[at + 4 + size :]
            if (
                len(state) != header["size"]
                or hashlib.sha256(state).hexdigest() != header["sha256"]
            ):
                raise ValueError("state does not match its checksum")
            cut = header["cut"]
            snapshot = Snapshot(
                cut=None if cut is None else (int(cut[0]), int(cut[1]), int(cut[2])),
                applied=int(header["applied"]),
                digest=bytes.fromhex(header["digest"]),
                state=state,
            )
            member = header.get("member")
            return StoredSnapshot(
                snapshot=snapshot,
                log_index=int(header["log_index"]),
                path=path,
                member=None if member is None else int(member),
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            self.corrupt += 1
            return None

    def latest(self) -> StoredSnapshot | None:
        """The newest snapshot that checks out, or None."""
        for path in self._files():
            stored = self.load(path)
            if stored is not None:
                return stored
        return None

    def oldest_log_index(self) -> int | None:
        """Log index of the oldest snapshot kept (from its name): the delivery
        log below it is needed by no snapshot kept."""
        files = self._files()
        if not files:
            return None
        match = _NAME.match(files[-1].name)
        assert match is not None
        return int(match.group(2))
