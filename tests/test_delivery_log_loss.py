"""The delivery log's manifest: a lost tail is data loss, and lost indices are
never given again.

The first tests use only names that existed before the manifest (they fail on
that code: the lost tail read back as a shorter log and the writer reused the
lost indices); the names added with it are reached through the module, so that
this file imports on the old code too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import epto.log
from epto.log import (
    DeliveryLogWriter,
    LogCorruptError,
    LogGapError,
    iter_raw,
    list_segments,
    log_bounds,
    read_log,
)

NODE = 4


def fill(root: Path, count: int, **options: int) -> DeliveryLogWriter:
    """An open writer of node NODE that appended ``count`` records."""
    w = DeliveryLogWriter(root, NODE, **options)
    for _ in range(count):
        i = w.next_index
        w.append_fields(source=i % 3, seq=i, ts=i, payload=b"p%d" % i, delivered_at=i)
    return w


def write_closed(root: Path, count: int) -> None:
    fill(root, count, segment_bytes=1024).close()


def record_ends(path: Path) -> list[int]:
    """Byte offsets where the records of a segment end (after the header)."""
    data = path.read_bytes()
    ends, pos = [], 32
    while pos < len(data):
        pos += 8 + int.from_bytes(data[pos : pos + 4], "little")
        ends.append(pos)
    return ends


def crash_copy(src: Path, dst: Path) -> Path:
    """The node directory as a crash would leave it (the writer still runs)."""
    shutil.copytree(src / str(NODE), dst / str(NODE), ignore=shutil.ignore_patterns("LOCK"))
    return dst / str(NODE)


def cut_last_segment(node_dir: Path, keep: int) -> int:
    """Cut the last segment after ``keep`` records; returns the log's new end."""
    last = list_segments(node_dir)[-1]
    ends = record_ends(last.path)
    with open(last.path, "r+b") as f:
        f.truncate(ends[keep - 1] if keep else 32)
    return last.first_index + keep


# -- regressions: fail before the manifest -----------------------------------


@pytest.mark.parametrize("loss", ["cut at a record boundary", "last deleted", "all deleted"])
def test_lost_tail_is_reported_and_never_reused(tmp_path: Path, loss: str) -> None:
    write_closed(tmp_path, 60)
    node_dir = tmp_path / str(NODE)
    segments = list_segments(node_dir)
    assert len(segments) > 3 and all(s.closed for s in segments)
    if loss == "cut at a record boundary":
        cut_last_segment(node_dir, 2)
    elif loss == "last deleted":
        segments[-1].path.unlink()
    else:
        for s in segments:
            s.path.unlink()
    with pytest.raises(LogGapError, match="60 as durable"):
        list(read_log(node_dir))
    with pytest.raises(LogGapError):
        log_bounds(node_dir)
    # The writer refuses rather than give the lost indices to new records.
    with pytest.raises(LogGapError, match="refusing"):
        DeliveryLogWriter(tmp_path, NODE)
    with pytest.raises(LogGapError):  # and keeps refusing: nothing was changed
        DeliveryLogWriter(tmp_path, NODE)
    # epto check reports it as data loss.
    from epto.cli import main

    assert main(["check", str(tmp_path)]) == 2


def test_check_reports_lost_tail_and_middle_gap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from epto.cli import main

    write_closed(tmp_path, 60)
    segments = list_segments(tmp_path / str(NODE))
    segments[-1].path.unlink()
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "data loss" in err and "60 as durable" in err
    write_closed(tmp_path / "b", 60)
    list_segments(tmp_path / "b" / str(NODE))[2].path.unlink()
    assert main(["check", str(tmp_path / "b")]) == 2
    assert "epto check: data loss: " in capsys.readouterr().err


# -- the exception types and the explicit way on ---------------------------


def test_lost_tail_error_type_and_extent(tmp_path: Path) -> None:
    write_closed(tmp_path, 60)
    node_dir = tmp_path / str(NODE)
    end = cut_last_segment(node_dir, 1)
    extent = epto.log.log_extent(node_dir)
    assert (extent.first, extent.end, extent.durable_end) == (0, end, 60)
    assert extent.lost_tail == (end, 60)
    with pytest.raises(epto.log.LogTailLostError, match=rf"indices {end}\.\.59 are lost"):
        list(read_log(node_dir))
    assert issubclass(epto.log.LogTailLostError, LogGapError)
    assert issubclass(LogGapError, LogCorruptError)
    # Reading what exists, below the loss, is fine.
    assert [r.index for r in read_log(node_dir, 0, end)] == list(range(end))
    with pytest.raises(epto.log.LogTailLostError):
        list(read_log(node_dir, 0, end + 1))
    with pytest.raises(epto.log.LogTailLostError):
        DeliveryLogWriter(tmp_path, NODE)
    # skip_missing reads everything that exists and raises nothing.
    assert [r[0] for r in iter_raw(node_dir, skip_missing=True)] == list(range(end))


def test_resume_after_loss_continues_after_the_recorded_end(tmp_path: Path) -> None:
    write_closed(tmp_path, 60)
    node_dir = tmp_path / str(NODE)
    end = cut_last_segment(node_dir, 1)
    with DeliveryLogWriter(tmp_path, NODE, resume_after_loss=True, segment_bytes=1024) as w:
        assert w.next_index == 60  # never below the recorded end
        assert w.append_fields(source=9, seq=0, ts=0, payload=b"after", delivered_at=0) == 60
    # The lost indices stay a gap that readers report...
    with pytest.raises(LogGapError, match=rf"{end}\.\.59 are missing"):
        list(read_log(node_dir))
    # ...and that skip_missing steps over.
    got = [r[0] for r in iter_raw(node_dir, skip_missing=True)]
    assert got == [*range(end), 60]
    assert epto.log.log_extent(node_dir).durable_end == 61
    assert log_bounds(node_dir) == (0, 61)
    # A later writer opens normally: the loss lies inside the log now.
    with DeliveryLogWriter(tmp_path, NODE) as w:
        assert w.next_index == 61


# -- the normal paths ---------------------------------------------------------


def test_clean_close_records_the_end(tmp_path: Path) -> None:
    node_dir = tmp_path / str(NODE)
    w = fill(tmp_path, 0)
    assert epto.log.log_extent(node_dir).durable_end == 0  # created before any record
    w.close()
    write_closed(tmp_path, 25)
    assert epto.log.log_extent(node_dir).durable_end == 25
    write_closed(tmp_path, 10)  # reopen continues
    assert epto.log.log_extent(node_dir).durable_end == 35
    assert [r.index for r in read_log(node_dir)] == list(range(35))
    assert log_bounds(node_dir) == (0, 35)


@pytest.mark.parametrize("fsync_every", [0, 1, 4])
def test_manifest_follows_the_fsync_policy(tmp_path: Path, fsync_every: int) -> None:
    """The manifest covers exactly what was fsynced: every ``fsync_every``
    records, at segment close, on ``flush(fsync=True)`` and on close."""
    node_dir = tmp_path / str(NODE)
    w = fill(tmp_path, 10, fsync_every=fsync_every)
    durable = 10 - 10 % fsync_every if fsync_every else 0
    assert epto.log.log_extent(node_dir).durable_end == durable
    # A reader racing the writer never sees the manifest ahead of the records.
    for _ in range(10):
        w.append_fields(source=0, seq=0, ts=0, payload=b"x", delivered_at=0)
        assert log_bounds(node_dir)[1] == w.next_index
    w.flush(fsync=True)
    assert epto.log.log_extent(node_dir).durable_end == 20
    w.close()
    assert epto.log.log_extent(node_dir).durable_end == 20


def test_segment_close_advances_the_manifest(tmp_path: Path) -> None:
    node_dir = tmp_path / str(NODE)
    w = fill(tmp_path, 60, segment_bytes=1024)
    closed = [s for s in list_segments(node_dir) if s.closed]
    (open_segment,) = [s for s in list_segments(node_dir) if not s.closed]
    assert closed and epto.log.log_extent(node_dir).durable_end == open_segment.first_index
    w.close()


def test_reopen_after_a_torn_record_with_the_manifest_behind(tmp_path: Path) -> None:
    """A process crash in the middle of a record: the complete records are kept
    (they are past the manifest, which never covers what was not fsynced), the
    torn one is cut, the manifest catches up, indices continue."""
    w = fill(tmp_path / "live", 10, fsync_every=4)
    node_dir = crash_copy(tmp_path / "live", tmp_path)
    w.close()
    (seg,) = list_segments(node_dir)
    ends = record_ends(seg.path)
    with open(seg.path, "r+b") as f:
        f.truncate(ends[8] + 5)  # nine complete records and a piece of the tenth
    assert epto.log.log_extent(node_dir).durable_end == 8
    assert [r.index for r in read_log(node_dir)] == list(range(9))
    with DeliveryLogWriter(tmp_path, NODE) as w2:
        assert w2.next_index == 9
        assert epto.log.log_extent(node_dir).durable_end == 9  # recovery made them durable
        w2.append_fields(source=0, seq=0, ts=0, payload=b"after", delivered_at=0)
    assert [r.index for r in read_log(node_dir)] == list(range(10))
    assert epto.log.log_extent(node_dir).durable_end == 10


def test_machine_crash_loses_only_what_was_not_durable(tmp_path: Path) -> None:
    """Records past the manifest's end may vanish in a machine crash (they were
    in the OS's cache only): not data loss, and the next writer gives their
    indices again. Records below it vanishing is data loss."""
    w = fill(tmp_path / "live", 10, fsync_every=4)
    lost_cache = crash_copy(tmp_path / "live", tmp_path / "a")
    lost_durable = crash_copy(tmp_path / "live", tmp_path / "b")
    w.close()
    assert cut_last_segment(lost_cache, 8) == 8  # 8 = the manifest's end
    assert [r.index for r in read_log(lost_cache)] == list(range(8))
    with DeliveryLogWriter(tmp_path / "a", NODE) as w2:
        assert w2.next_index == 8
    assert cut_last_segment(lost_durable, 7) == 7
    with pytest.raises(epto.log.LogTailLostError):
        list(read_log(lost_durable))
    with pytest.raises(epto.log.LogTailLostError):
        DeliveryLogWriter(tmp_path / "b", NODE)


def test_manifest_survives_a_torn_slot(tmp_path: Path) -> None:
    """The writer overwrites the older of two slots; a slot torn by a crash is
    ignored and the other one read (an older, still true, end)."""
    write_closed(tmp_path, 30)
    node_dir = tmp_path / str(NODE)
    manifest = node_dir / "MANIFEST"
    data = bytearray(manifest.read_bytes())
    assert len(data) == 80
    newest = max(range(2), key=lambda i: int.from_bytes(data[40 * i + 20 : 40 * i + 28], "little"))
    older_end = int.from_bytes(data[40 * (1 - newest) + 28 : 40 * (1 - newest) + 36], "little")
    data[40 * newest + 30] ^= 0xFF
    manifest.write_bytes(bytes(data))
    assert epto.log.log_extent(node_dir).durable_end == older_end < 30
    assert [r.index for r in read_log(node_dir)] == list(range(30))
    data[40 * (1 - newest) + 30] ^= 0xFF
    manifest.write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match="no valid manifest slot"):
        list(read_log(node_dir))
    with pytest.raises(LogCorruptError):
        DeliveryLogWriter(tmp_path, NODE)


def test_manifest_of_another_node_is_refused(tmp_path: Path) -> None:
    write_closed(tmp_path, 3)
    other = tmp_path / "x" / "5"
    other.mkdir(parents=True)
    shutil.copy(tmp_path / str(NODE) / "MANIFEST", other / "MANIFEST")
    with pytest.raises(LogCorruptError, match="belongs to node 4"):
        DeliveryLogWriter(tmp_path / "x", 5)


def test_log_without_manifest_is_read_and_gets_one(tmp_path: Path) -> None:
    """Logs written before the manifest existed read as before (nothing to
    check the tail against); the next writer adds a manifest."""
    write_closed(tmp_path, 20)
    node_dir = tmp_path / str(NODE)
    (node_dir / "MANIFEST").unlink()
    assert epto.log.log_extent(node_dir).durable_end is None
    assert log_bounds(node_dir) == (0, 20)
    with DeliveryLogWriter(tmp_path, NODE) as w:
        assert w.next_index == 20
    assert epto.log.log_extent(node_dir).durable_end == 20
