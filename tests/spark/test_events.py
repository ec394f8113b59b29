"""One row per event: a group's logs read as the agreed sequence once, with a
stable offset per event, in batch and in a stream restarted from its
checkpoint; per-node copies on request; the source's errors in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epto import EptoError
from epto.check import check
from epto.log import (
    DeliveryLogWriter,
    check_logs,
    iter_raw,
    list_nodes,
    list_segments,
    node_directory,
)
from epto.log._segment import FLAG_OUT_OF_ORDER
from epto.spark._events import START, Cursor, pack_runs, plan, read_runs

from ._cluster import run_cluster

pytestmark = pytest.mark.spark

EventId = tuple[int, int]


def in_order(root: Path) -> dict[int, list[EventId]]:
    """Per node, its in-order deliveries as the log holds them."""
    out = {}
    for node in list_nodes(root):
        raws = iter_raw(node_directory(root, node), skip_missing=True)
        out[node] = [(r[1], r[2]) for r in raws if not r[6] & FLAG_OUT_OF_ORDER]
    return out


def cut_middle_segment(root: Path, node: int) -> int:
    """Delete one segment in the middle of a node's log; how many records it held."""
    before = sum(1 for _ in iter_raw(node_directory(root, node), skip_missing=True))
    segments = list_segments(node_directory(root, node))
    assert len(segments) >= 3
    segments[len(segments) // 2].path.unlink()
    after = sum(1 for _ in iter_raw(node_directory(root, node), skip_missing=True))
    return before - after


def events(df: Any) -> list[tuple[int, EventId, int]]:
    """``(offset, event id, node)`` in the order the read returns them."""
    rows = df.select("offset", "source", "seq", "node").collect()
    return [(r["offset"], (r["source"], r["seq"]), r["node"]) for r in rows]


def ring_logs(root: Path, n: int = 3, count: int = 90) -> list[EventId]:
    """Token-ring-like logs: every node logs the same sequence by position,
    with ``ts = 0``; returns the sequence."""
    order = [(k % 4, k // 4) for k in range(count)]
    for node in range(n):
        with DeliveryLogWriter(root, node, segment_bytes=1024) as w:
            for source, seq in order:
                w.append_fields(
                    source=source, seq=seq, ts=0, payload=b"r%d" % seq, delivered_at=1_000
                )
    return order


def test_an_epto_group_reads_each_event_once_in_the_order_epto_check_sees(
    spark: Any, tmp_path: Path
) -> None:
    run_cluster(tmp_path, n=3, events=60, seed=5, segment_bytes=1024)
    lost = cut_middle_segment(tmp_path, 0)  # node 0 misses a stretch; 1 and 2 hold it
    assert lost > 0
    summary, _ = check_logs_lenient(tmp_path)
    sequences = in_order(tmp_path)
    got = events(spark.read.format("epto").load(str(tmp_path)))
    order = [e for _, e, _ in got]
    assert [o for o, _, _ in got] == list(range(len(got)))  # ranks 0.. in the read's order
    assert len(order) == len(set(order)) == summary["events"] == 60
    # The group's order as epto check judges it: the read is one more process
    # whose sequence is consistent with every node's, and misses nothing.
    report = check({**sequences, -1: order})
    assert report.ok and report.holes[-1] == 0
    assert order == sequences[1] == sequences[2] and len(sequences[0]) == 60 - lost
    # Node 0's missing stretch read from node 1, which then goes on (one run).
    assert {e for _, e, node in got if node == 1} >= set(order) - set(sequences[0])
    assert {node for *_, node in got} == {0, 1}
    # Per-node copies on request: every delivery of every node.
    per_node = spark.read.format("epto").options(rows="per-node", failOnDataLoss="false")
    per_node = per_node.load(str(tmp_path))
    logged = sum(1 for n in range(3) for _ in iter_raw(tmp_path / str(n), skip_missing=True))
    assert per_node.count() == logged


def check_logs_lenient(root: Path) -> tuple[dict[str, Any], Any]:
    """``epto check``'s summary of logs where one node lost records: the lost
    node 0 is set aside (epto check refuses logs with data loss)."""
    import shutil

    aside = root.parent / f"{root.name}-check"
    shutil.copytree(root, aside)
    for node in list_nodes(aside):
        if node == 0:
            shutil.rmtree(node_directory(aside, node))
    return check_logs(aside)


def test_token_ring_logs_read_by_position_with_holes_filled(spark: Any, tmp_path: Path) -> None:
    order = ring_logs(tmp_path)
    cut_middle_segment(tmp_path, 0)
    cut_middle_segment(tmp_path, 2)
    df = spark.read.format("epto").option("maxRecordsPerPartition", "17").load(str(tmp_path))
    got = events(df)
    assert [o for o, _, _ in got] == list(range(90))  # the position, as logged
    assert [e for _, e, _ in got] == order
    payloads = {r["offset"]: bytes(r["payload"]) for r in df.select("offset", "payload").collect()}
    assert payloads[89] == b"r%d" % order[89][1]


def test_a_position_no_node_holds_is_data_loss_said_in_one_line(spark: Any, tmp_path: Path) -> None:
    ring_logs(tmp_path)
    for node in range(3):
        list_segments(node_directory(tmp_path, node))[2].path.unlink()
    with pytest.raises(Exception) as info:
        spark.read.format("epto").load(str(tmp_path)).collect()
    message = str(info.value).split(" SQLSTATE")[0].strip()
    assert "\n" not in message and "Traceback" not in message
    assert "DataLossError" in message and "no node's log holds positions" in message
    assert message.endswith("(set failOnDataLoss=false to skip)")
    lenient = spark.read.format("epto").option("failOnDataLoss", "false").load(str(tmp_path))
    offsets = [o for o, _, _ in events(lenient)]
    assert offsets == sorted(set(offsets)) and 0 < len(offsets) < 90


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"startingOffset": "earliest"}, "did you mean startingOffsets?"),
        ({"rows": "copies"}, "rows must be events or per-node"),
        ({"startingTimestamp": "0"}, "set rows=per-node to use it"),
        ({"endingOffsets": '{"0": 3}'}, "endingOffsets as JSON names per-node"),
    ],
)
def test_option_errors_reach_the_user_in_one_line(
    spark: Any, tmp_path: Path, options: dict[str, str], says: str
) -> None:
    ring_logs(tmp_path, count=4)
    with pytest.raises(Exception) as info:
        spark.read.format("epto").options(**options).load(str(tmp_path)).collect()
    message = str(info.value).split(" SQLSTATE")[0].strip()
    assert "\n" not in message and "Traceback" not in message
    assert "ConfigurationError: " in message and says in message


def test_a_missing_path_is_one_line(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception) as info:
        spark.read.format("epto").load(str(tmp_path / "nowhere")).collect()
    message = str(info.value).split(" SQLSTATE")[0].strip()
    assert "\n" not in message and "does not exist" in message


def append_epto(root: Path, node: int, ts_values: list[int], source: int = 7) -> None:
    """In-order deliveries of events ``(source, ts)`` with timestamp ``ts``."""
    with DeliveryLogWriter(root, node) as w:
        for ts in ts_values:
            w.append_fields(source=source, seq=ts, ts=ts, payload=b"e", delivered_at=5_000)


def test_a_stream_restarted_from_its_checkpoint_reads_every_event_once(
    spark: Any, tmp_path: Path
) -> None:
    logs, ck = tmp_path / "logs", tmp_path / "ck"
    run_cluster(logs, n=3, events=40, seed=2)
    top = max(ts for seq in in_order_ts(logs).values() for ts in seq)

    def run_once() -> list[tuple[int, EventId, int]]:
        seen: list[tuple[int, EventId, int]] = []
        stream = (
            spark.readStream.format("epto")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "15")
            .load(str(logs))
        )
        q = (
            stream.writeStream.foreachBatch(lambda df, _: seen.extend(events(df)))
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(300)
        return seen

    first = run_once()
    assert [o for o, _, _ in first] == list(range(40))
    # Nodes 0 and 1 deliver four more events; node 2 lags: its log's last key
    # holds the stream back (node 2 may still deliver an event below them).
    append_epto(logs, 0, [top + 1, top + 2, top + 3, top + 4])
    append_epto(logs, 1, [top + 1, top + 3, top + 4])  # a hole at node 1
    assert run_once() == []
    append_epto(logs, 2, [top + 1, top + 2])
    second = run_once()
    assert [(o, e) for o, e, _ in second] == [(40, (7, top + 1)), (41, (7, top + 2))]
    append_epto(logs, 2, [top + 3, top + 4])
    third = run_once()
    assert [(o, e) for o, e, _ in third] == [(42, (7, top + 3)), (43, (7, top + 4))]
    everything = first + second + third
    ids = [e for _, e, _ in everything]
    assert len(ids) == len(set(ids)) == 44  # 0 duplicates
    batch = events(spark.read.format("epto").load(str(logs)))
    assert batch == sorted(batch) and [e for _, e, _ in batch] == ids  # 0 missing, same ranks


def in_order_ts(root: Path) -> dict[int, list[int]]:
    out = {}
    for node in list_nodes(root):
        raws = iter_raw(node_directory(root, node))
        out[node] = [r[3] for r in raws if not r[6] & FLAG_OUT_OF_ORDER]
    return out


def test_plan_and_runs_without_spark(tmp_path: Path) -> None:
    """The driver's plan: runs from one node while it holds the next event,
    split between partitions; ranks stable whatever the split."""
    order = ring_logs(tmp_path, count=50)
    cut_middle_segment(tmp_path, 0)
    whole = plan(str(tmp_path), START, final_only=False)
    assert whole.cursor.order == "position" and whole.cursor.next == 50
    assert {run[1] for run in whole.runs} == {0, 1}  # node 0's hole read from node 1
    for size in (1, 7, 50):
        rows = []
        for part in pack_runs(whole.runs, size, None):
            for batch in read_runs(part, ("offset", "source", "seq")):
                rows += list(
                    zip(*(batch.column(c).to_pylist() for c in batch.schema.names), strict=True)
                )
        assert rows == [(k, *order[k]) for k in range(50)]
    # A stream's cursor survives JSON (Spark's checkpoint) and continues.
    half = plan(str(tmp_path), START, final_only=True, limit=20)
    again = Cursor.from_json(half.cursor.to_json())
    rest = plan(str(tmp_path), again, final_only=True)
    assert again == half.cursor and rest.cursor.next == 50
    assert sum(r[5] for r in half.runs) == 20 and sum(r[5] for r in rest.runs) == 30


def test_the_jvm_reader_reads_per_node_copies_only(spark: Any, tmp_path: Path) -> None:
    from epto.spark import jvm_jar

    if jvm_jar() is None:  # pragma: no cover - a machine with a JRE only
        pytest.skip("javac is needed to build the epto-jvm reader")
    ring_logs(tmp_path, count=10)
    jvm = spark.read.format("epto-jvm").option("rows", "per-node").load(str(tmp_path))
    assert jvm.count() == 30
    with pytest.raises(Exception, match="reads per-node copies only"):
        spark.read.format("epto-jvm").option("rows", "events").load(str(tmp_path)).count()


def test_position_logs_that_disagree_are_refused(tmp_path: Path) -> None:
    """A log whose index 0 is not the group's first position (a member that
    joined later) holds other events at the same indices: refused, not mixed."""
    ring_logs(tmp_path, n=2, count=6)
    with DeliveryLogWriter(tmp_path, 2) as w:
        for source, seq in ring_logs(tmp_path / "other", n=1, count=8)[2:]:
            w.append_fields(source=source, seq=seq, ts=0, payload=b"", delivered_at=1)
    with pytest.raises(EptoError, match="nodes 0 and 2 hold different events at delivery index 0"):
        plan(str(tmp_path), START, final_only=False)


def test_a_stream_waits_for_a_node_with_an_empty_log(tmp_path: Path) -> None:
    """Timestamp order: a node that delivered nothing yet may still deliver any
    event, so nothing is final; then it delivers and the stream moves on."""
    append_epto(tmp_path, 0, [1, 2, 3])
    (tmp_path / "1").mkdir()
    held = plan(str(tmp_path), START, final_only=True)
    assert held.runs == [] and held.cursor.after is None
    assert plan(str(tmp_path), START, final_only=False, upto=held.cursor).runs == []
    append_epto(tmp_path, 1, [1, 2])
    moved = plan(str(tmp_path), START, final_only=True)
    assert moved.cursor.next == 2 and moved.cursor.after == (2, 7, 2)
