"""What a replica keeps on disk, for both replica drivers (trio, ZeroMQ):
the delivery log of the commands it applied, snapshots by policy, compaction,
and recovery (docs/rsm.md, "Snapshots, compaction, recovery").

Rules:

* A command is appended to the log right after it is applied, with nothing
  in between: a snapshot (taken between two deliveries) covers exactly the
  records below the log index it records.
* A snapshot is due after ``snapshot_every`` commands, or ``snapshot_interval``
  seconds after the first command since the last one; the log is ``fsync``ed
  before the snapshot is written, and log segments below the oldest snapshot
  kept are deleted after.
* Recovery restores the newest snapshot that checks out and replays the log
  after its index; a joining replica starts from nothing instead (its state
  is fetched; the fetched state is then saved as the base the log continues).
* The files are one member's: the log under ``log/<pid>``, and each
  snapshot names the member whose log its index counts in. A replica started
  under another id on a directory whose snapshots are another member's
  starts from nothing (its state is fetched): it moves them aside to
  ``snapshots-of-<pid>`` instead of counting another log's indexes in its own
  (which would compact its own log wrongly) or applying the group's commands
  to a state whose log suffix it cannot read.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

from epto import Delivery, Event, ProcessId
from epto.log import DeliveryLogWriter, log_bounds, micros, read_log
from epto.rsm import Replica, SnapshotStore

from ._rsm_config import ReplicaConfig


class Durability:
    """The files of one replica under ``data_dir`` (``log/``, ``snapshots/``)."""

    def __init__(
        self,
        data_dir: str,
        pid: ProcessId,
        *,
        snapshot_every: int,
        snapshot_interval: float,
        keep: int,
    ) -> None:
        self._root = Path(data_dir)
        self._pid = pid
        self._every = snapshot_every
        self._interval = snapshot_interval
        self.store = SnapshotStore(self._root / "snapshots", keep=keep)
        self._log: DeliveryLogWriter | None = None
        self._log_index = 0
        self._since = 0
        self._due_at = math.inf
        self.snapshots_taken = 0

    @classmethod
    def of(cls, config: ReplicaConfig, pid: ProcessId) -> Durability | None:
        """The files ``config`` asks for (None without ``data_dir``)."""
        if not config.data_dir:
            return None
        return cls(
            config.data_dir,
            pid,
            snapshot_every=config.snapshot_every,
            snapshot_interval=config.snapshot_interval,
            keep=config.keep,
        )

    def recover(self, replica: Replica, *, joining: bool) -> None:
        """Restore ``replica`` from disk (or, joining, wipe what is there);
        then open the log for appending."""
        log_root = self._root / "log"
        node_dir = log_root / str(self._pid)
        if joining:
            self.store.clear()
            shutil.rmtree(node_dir, ignore_errors=True)
        else:
            stored = self.store.latest()
            if stored is not None and stored.member not in (None, self._pid):
                self._set_aside(stored.member)
                stored = None
            start = 0
            if stored is not None:
                replica.restore(stored.snapshot)
                start = stored.log_index
            if node_dir.exists():
                first, _ = log_bounds(node_dir)
                for record in read_log(node_dir, max(start, first)):
                    event = Event(
                        source=record.source, seq=record.seq, ts=record.ts, payload=record.payload
                    )
                    replica.deliver(Delivery(event=event))
        self._log = DeliveryLogWriter(log_root, self._pid)
        self._log_index = self._log.next_index

    def _set_aside(self, member: int) -> None:
        """Move another member's snapshots out of the way (kept, not read)."""
        directory = self.store.directory
        aside = self._root / f"snapshots-of-{member}"
        n = 0
        while aside.exists():
            n += 1
            aside = self._root / f"snapshots-of-{member}.{n}"
        directory.rename(aside)
        self.store = SnapshotStore(directory, keep=self.store.keep)

    def applied(self, delivery: Delivery, now: float) -> bool:
        """Log a command just applied; whether a snapshot is due (``now``: the
        caller's clock, in seconds)."""
        assert self._log is not None
        self._log.append(delivery, delivered_at=micros(time.time()))
        self._log_index += 1
        self._since += 1
        if self._due_at == math.inf:
            self._due_at = now + self._interval
        return bool(self._every and self._since >= self._every) or now >= self._due_at

    def snapshot(self, replica: Replica) -> Path:
        """Save ``replica``'s state durably and compact the log."""
        assert self._log is not None
        self._log.flush(fsync=True)
        path = self.store.save(replica.snapshot(), self._log_index, member=self._pid)
        self.snapshots_taken += 1
        self._since = 0
        self._due_at = math.inf
        oldest = self.store.oldest_log_index()
        if oldest is not None:
            self._log.delete_before(oldest)
        return path

    def flush(self) -> None:
        """Hand the log records buffered so far to the OS (no ``fsync``): what
        this replica tells a peer it holds survives a kill of its process."""
        if self._log is not None:
            self._log.flush()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
