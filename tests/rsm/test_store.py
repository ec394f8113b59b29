"""Snapshots on disk and compaction of the delivery log."""

from __future__ import annotations

import os
from pathlib import Path

from epto import Delivery, Event
from epto.log import DeliveryLogWriter, log_bounds, read_log
from epto.rsm import Snapshot, SnapshotStore


def snap(applied: int, size: int = 100) -> Snapshot:
    return Snapshot(
        cut=(applied, 1, applied),
        applied=applied,
        digest=bytes([applied % 256]) * 16,
        state=os.urandom(size),
    )


def test_saved_snapshots_read_back_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=2)
    saved = [snap(i) for i in (10, 20, 30)]
    for i, s in enumerate(saved):
        store.save(s, log_index=100 * (i + 1))
    latest = store.latest()
    assert latest is not None and latest.snapshot == saved[2] and latest.log_index == 300
    assert len(list(tmp_path.glob("*.epsnap"))) == 2
    assert store.oldest_log_index() == 200


def test_a_damaged_or_half_written_snapshot_is_never_loaded(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    good = snap(5)
    store.save(good, log_index=7)
    newer = store.save(snap(6, 5000), log_index=8)
    data = bytearray(newer.read_bytes())
    data[-10] ^= 0xFF
    newer.write_bytes(bytes(data))
    (tmp_path / "snap-0000000000000009-0000000000000009.epsnap.tmp").write_bytes(b"half")
    reopened = SnapshotStore(tmp_path, keep=3)
    assert not list(tmp_path.glob("*.tmp"))  # leftovers of a crash are removed
    latest = reopened.latest()
    assert latest is not None and latest.snapshot == good
    assert reopened.corrupt == 1
    for cut in range(0, len(data), 97):  # every truncation is refused
        newer.write_bytes(bytes(data[:cut]))
        assert reopened.load(newer) is None


def test_the_delivery_log_is_compacted_to_a_snapshot(tmp_path: Path) -> None:
    with DeliveryLogWriter(tmp_path, 1, segment_bytes=4096) as log:
        for i in range(500):
            log.append(
                Delivery(event=Event(source=1, seq=i, ts=i + 1, payload=b"x" * 40)), delivered_at=i
            )
        log.flush()
        node_dir = tmp_path / "1"
        segments = sorted(node_dir.glob("*.seg"))
        assert len(segments) > 3
        deleted = log.delete_before(250)
        assert deleted >= 1
        first, end = log_bounds(node_dir)
        assert 0 < first <= 250 and end == 500
        records = list(read_log(node_dir, first))
        assert [r.index for r in records] == list(range(first, 500))
        assert log.delete_before(10_000) >= 1  # never the open segment
        log.append(Delivery(event=Event(source=1, seq=500, ts=501, payload=b"y")), delivered_at=1)
    assert log_bounds(node_dir)[1] == 501


def test_compacting_a_log_without_closed_segments_deletes_nothing(tmp_path: Path) -> None:
    with DeliveryLogWriter(tmp_path, 1) as log:
        assert log.delete_before(100) == 0
        log.append(Delivery(event=Event(source=1, seq=0, ts=1, payload=b"x")), delivered_at=0)
        assert log.delete_before(100) == 0
