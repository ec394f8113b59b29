"""The delivery log: round trips, replay, torn tails, recovery, a killed writer."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epto import ConfigurationError, Delivery, DeliveryTag, Event, LocalProtocolError
from epto.log import (
    DeliveryLogs,
    DeliveryLogWriter,
    LogCorruptError,
    LogGapError,
    LogRecord,
    list_nodes,
    list_segments,
    log_bounds,
    log_extent,
    micros,
    node_directory,
    read_log,
    segment_ranges,
)


def delivery(i: int, *, size: int = 10) -> Delivery:
    event = Event(
        source=i % 7,
        seq=i // 7,
        ts=1000 + i,
        payload=bytes([i % 251]) * (size + i % 13),
        signature=b"s" * (i % 3) * 32,
    )
    tag = DeliveryTag.OUT_OF_ORDER if i % 11 == 5 else DeliveryTag.IN_ORDER
    return Delivery(event=event, tag=tag)


def expected(node: int, i: int, *, size: int = 10) -> LogRecord:
    d = delivery(i, size=size)
    return LogRecord(
        node=node,
        index=i,
        source=d.event.source,
        seq=d.event.seq,
        ts=d.event.ts,
        tag=d.tag,
        payload=d.event.payload,
        delivered_at=5_000_000 + i,
        broadcast_at=None if i % 4 == 0 else 4_000_000 + i,
        signature=d.event.signature,
    )


def write(root: Path, node: int, n: int, **options: int) -> None:
    with DeliveryLogWriter(root, node, **options) as w:
        for i in range(w.next_index, w.next_index + n):
            assert (
                w.append(
                    delivery(i),
                    delivered_at=5_000_000 + i,
                    broadcast_at=None if i % 4 == 0 else 4_000_000 + i,
                )
                == i
            )


def test_round_trip_one_segment(tmp_path: Path) -> None:
    write(tmp_path, 3, 50)
    got = list(read_log(tmp_path / "3"))
    assert got == [expected(3, i) for i in range(50)]
    assert list_nodes(tmp_path) == [3]
    assert log_bounds(tmp_path / "3") == (0, 50)
    assert [s.closed for s in list_segments(tmp_path / "3")] == [True]


def test_segments_roll_and_replay_from_any_index(tmp_path: Path) -> None:
    write(tmp_path, 1, 200, segment_bytes=1024)
    segments = list_segments(tmp_path / "1")
    assert len(segments) > 5 and all(s.closed for s in segments)
    assert [s.first_index for s in segments] == sorted({s.first_index for s in segments})
    for start in (0, 1, 37, segments[3].first_index, 199, 200):
        got = [r.index for r in read_log(tmp_path / "1", start)]
        assert got == list(range(start, 200))
    assert [r.index for r in read_log(tmp_path / "1", 40, 90)] == list(range(40, 90))
    ranges = segment_ranges(tmp_path / "1", 10, 150)
    assert ranges[0][0] == 10 and ranges[-1][1] == 150
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert len(ranges) > 3


def test_reopen_continues_indices(tmp_path: Path) -> None:
    write(tmp_path, 0, 10)
    write(tmp_path, 0, 15)
    assert [r.index for r in read_log(tmp_path / "0")] == list(range(25))
    assert read_log(tmp_path / "0").__next__() == expected(0, 0)
    assert len(list_segments(tmp_path / "0")) == 2


def test_open_segment_is_readable_and_flush_policy_decides_visibility(tmp_path: Path) -> None:
    w = DeliveryLogWriter(tmp_path, 9, flush_every=4)
    for i in range(6):
        w.append(delivery(i), delivered_at=i)
    # Four records were handed to the OS, two wait in the buffer.
    assert [r.index for r in read_log(tmp_path / "9")] == [0, 1, 2, 3]
    assert log_bounds(tmp_path / "9") == (0, 4)
    assert [s.closed for s in list_segments(tmp_path / "9")] == [False]
    w.flush()
    assert log_bounds(tmp_path / "9") == (0, 6)
    w.close()
    assert [s.closed for s in list_segments(tmp_path / "9")] == [True]
    w.close()  # idempotent
    with pytest.raises(LocalProtocolError):
        w.append(delivery(6), delivered_at=6)


def test_fsync_every_record_round_trips(tmp_path: Path) -> None:
    write(tmp_path, 2, 20, fsync_every=1, segment_bytes=512)
    assert [r.index for r in read_log(tmp_path / "2")] == list(range(20))


def test_one_writer_per_directory(tmp_path: Path) -> None:
    w = DeliveryLogWriter(tmp_path, 4)
    with pytest.raises(LocalProtocolError, match="another writer"):
        DeliveryLogWriter(tmp_path, 4)
    w.close()
    DeliveryLogWriter(tmp_path, 4).close()


@pytest.mark.parametrize(
    "options",
    [{"flush_every": 0}, {"fsync_every": -1}, {"segment_bytes": 10}],
)
def test_bad_options(tmp_path: Path, options: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError):
        DeliveryLogWriter(tmp_path, 1, **options)


def test_torn_tail_at_every_cut_point(tmp_path: Path) -> None:
    """Cutting the open segment anywhere leaves exactly the complete records."""
    src = tmp_path / "src"
    w = DeliveryLogWriter(src, 5)
    for i in range(4):
        w.append(delivery(i), delivered_at=i)
    w.flush()
    (seg,) = list_segments(src / "5")
    data = seg.path.read_bytes()
    ends = [32]  # header size, then the end of each record
    for r in read_log(src / "5"):
        ends.append(ends[-1] + 8 + 51 + len(r.signature) + len(r.payload))
    assert ends[-1] == len(data)
    w.close()
    for cut in range(32, len(data)):
        root = tmp_path / f"cut{cut}"
        node = root / "5"
        node.mkdir(parents=True)
        (node / seg.path.name).write_bytes(data[:cut])
        complete = sum(1 for e in ends[1:] if e <= cut)
        assert [r.index for r in read_log(node)] == list(range(complete))
        assert log_bounds(node) == (0, complete)
        # Recovery keeps the complete records and appends after them.
        with DeliveryLogWriter(root, 5) as w2:
            assert w2.next_index == complete
            w2.append(delivery(complete), delivered_at=complete)
        got = list(read_log(node))
        assert [r.index for r in got] == list(range(complete + 1))
        assert all(r.payload == delivery(r.index).event.payload for r in got)


def test_damage_in_closed_segment_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, 6, 30, segment_bytes=1024)
    seg = list_segments(tmp_path / "6")[1]
    data = bytearray(seg.path.read_bytes())
    data[60] ^= 0xFF
    seg.path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match="damaged record"):
        list(read_log(tmp_path / "6"))
    # Records before the damaged segment still replay.
    assert [r.index for r in read_log(tmp_path / "6", 0, seg.first_index)] == list(
        range(seg.first_index)
    )


def test_bad_header_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, 6, 3)
    (seg,) = list_segments(tmp_path / "6")
    data = bytearray(seg.path.read_bytes())
    data[20] ^= 1
    seg.path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match="header CRC"):
        list(read_log(tmp_path / "6"))


def test_missing_segment_is_a_gap(tmp_path: Path) -> None:
    write(tmp_path, 8, 60, segment_bytes=1024)
    segments = list_segments(tmp_path / "8")
    segments[2].path.unlink()
    with pytest.raises(LogGapError):
        list(read_log(tmp_path / "8"))
    segments[0].path.unlink()
    with pytest.raises(LogGapError):
        list(read_log(tmp_path / "8", 0))
    with pytest.raises(LogGapError):
        list(read_log(tmp_path / "8", 50, 70))


def test_delivery_logs_one_writer_per_node(tmp_path: Path) -> None:
    with DeliveryLogs(tmp_path, flush_every=8) as logs:
        for i in range(30):
            logs.write(i % 3, delivery(i), delivered_at=micros(i * 0.125))
    assert list_nodes(tmp_path) == [0, 1, 2]
    for node in range(3):
        got = list(read_log(node_directory(tmp_path, node)))
        assert [r.source for r in got] == [delivery(i).event.source for i in range(node, 30, 3)]
        assert [r.delivered_at for r in got] == [i * 125_000 for i in range(node, 30, 3)]


def test_micros() -> None:
    assert micros(1.5) == 1_500_000
    assert micros(0.125, origin=10) == 125_010


@settings(derandomize=True, max_examples=40, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=40),
    segment_bytes=st.integers(min_value=200, max_value=4000),
    start=st.integers(min_value=0, max_value=45),
)
def test_property_round_trip(
    tmp_path_factory: pytest.TempPathFactory, payloads: list[bytes], segment_bytes: int, start: int
) -> None:
    root = tmp_path_factory.mktemp("prop")
    with DeliveryLogWriter(root, 2**64 - 1, segment_bytes=segment_bytes) as w:
        for i, p in enumerate(payloads):
            w.append_fields(source=i, seq=0, ts=-i, payload=p, delivered_at=-(2**63) + i)
    got = list(read_log(root / str(2**64 - 1), min(start, len(payloads))))
    assert [r.payload for r in got] == payloads[start:]
    assert all(r.node == 2**64 - 1 and r.ts == -r.index for r in got)


WRITER = textwrap.dedent(
    """
    import sys
    from epto.log import DeliveryLogWriter
    w = DeliveryLogWriter(sys.argv[1], 7, segment_bytes=100_000)
    i = 0
    while True:
        w.append_fields(source=i % 5, seq=i, ts=i, payload=bytes([i % 256]) * (i % 4000),
                        delivered_at=i)
        i += 1
    """
)


def test_writer_killed_with_sigkill(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while log_bounds(tmp_path / "7")[1] < 1500:
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline, "writer wrote too little"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    records = list(read_log(tmp_path / "7"))
    assert len(records) >= 1500
    for i, r in enumerate(records):
        assert (r.index, r.seq, r.source) == (i, i, i % 5)
        assert r.payload == bytes([i % 256]) * (i % 4000)
    assert len(list_segments(tmp_path / "7")) > 1
    # A new writer recovers: nothing lost that was complete, indices continue.
    with DeliveryLogWriter(tmp_path, 7) as w:
        assert w.next_index == len(records)
        w.append_fields(source=0, seq=-0, ts=0, payload=b"after", delivered_at=0)
    again = list(read_log(tmp_path / "7"))
    assert again[:-1] == records and again[-1].payload == b"after"
    # The manifest covers everything the new writer kept and closed.
    assert log_extent(tmp_path / "7").durable_end == len(again)
    assert all(s.closed for s in list_segments(tmp_path / "7"))


def test_simulate_log_dir(tmp_path: Path) -> None:
    """``epto simulate --log-dir`` writes one log per process that reads back as
    exactly what the simulator recorded."""
    import json

    from epto.cli import main
    from epto.log import check_logs, read_broadcasts

    logs, summary_file = tmp_path / "logs", tmp_path / "s.json"
    argv = ["simulate", "-n", "12", "--rounds", "6", "--broadcast-rate", "0.2", "-q"]
    assert main([*argv, "--log-dir", str(logs), "--json", str(summary_file)]) == 0
    sim = json.loads(summary_file.read_text())
    result, _ = check_logs(logs)
    assert list_nodes(logs) == list(range(12))
    assert result["ok"] and result["deliveries"] == sim["deliveries"] > 0
    assert result["events"] == sim["events_delivered"]
    assert result["holes"]["total"] == sim["holes"]
    broadcasts = read_broadcasts(logs)
    assert broadcasts is not None and len(broadcasts) == sim["events"]
    assert result["validity"]["undelivered_events"] == sim["events"] - sim["events_delivered"]
    # One tick is one millisecond: the delays are the simulator's, in ms.
    assert result["delay_ms"]["max"] == sim["delay"]["max"]


def test_check_reports_broadcast_events_nobody_delivered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Holes count only events delivered somewhere: with the manifest, ``epto
    check`` also names the broadcast events no node delivered (reported, not
    judged: the logs do not say whether their sources stayed)."""
    from epto.cli import main
    from epto.log import check_logs, write_broadcasts

    for node in (0, 1):
        with DeliveryLogWriter(tmp_path, node) as w:
            w.append_fields(source=0, seq=0, ts=1, payload=b"a", delivered_at=5)
    write_broadcasts(tmp_path, [(0, 0, 1), (1, 0, 2), (1, 1, 3)])
    result, _ = check_logs(tmp_path)
    assert result["ok"] and result["holes"]["total"] == 0
    assert result["validity"] == {
        "undelivered_events": 2,
        "undelivered_sample": [[1, 0], [1, 1]],
    }
    assert main(["check", str(tmp_path)]) == 0
    assert "broadcast but delivered by no node: 2 events ((1, 0), (1, 1))" in (
        capsys.readouterr().out
    )
    # Without a manifest nothing is known of what was broadcast.
    (tmp_path / "broadcasts.csv").unlink()
    assert check_logs(tmp_path)[0]["validity"] is None
