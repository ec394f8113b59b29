"""``failOnDataLoss``: with ``false``, batch and
streaming reads skip exactly the missing records and return every record that
exists, whatever the partitioning, and a micro-batch's end offset never passes
a record it did not return; with ``true`` (the default) a missing middle
segment or a lost tail fails the read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epto.log import DeliveryLogWriter, list_segments

from .test_source import rows, written

pytestmark = pytest.mark.spark

Row = tuple[Any, ...]


def lossy_logs(root: Path, *, lose: str) -> tuple[set[Row], set[Row]]:
    """Node 0 with 120 records in small segments, node 1 with 30; then node 0
    loses its third segment (``lose="middle"``) or its last one (``"tail"``).
    Returns (every record written, the records that still exist)."""
    for node, count in ((0, 120), (1, 30)):
        with DeliveryLogWriter(root, node, segment_bytes=1024) as w:
            for i in range(count):
                w.append_fields(
                    source=node,
                    seq=i,
                    ts=i,
                    payload=b"r%d" % i,
                    delivered_at=10**12 + i,
                    broadcast_at=None if i % 3 else 10**12,
                )
    everything = written(root)
    segments = list_segments(root / "0")
    assert len(segments) > 5
    gone = segments[2] if lose == "middle" else segments[-1]
    later = [s.first_index for s in segments if s.first_index > gone.first_index]
    stop = later[0] if later else 120
    gone.path.unlink()
    exists = {r for r in everything if not (r[0] == 0 and gone.first_index <= r[1] < stop)}
    assert 0 < len(everything) - len(exists) < 30
    return everything, exists


@pytest.mark.parametrize("lose", ["middle", "tail"])
def test_batch_skips_exactly_what_is_missing(spark: Any, tmp_path: Path, lose: str) -> None:
    _, exists = lossy_logs(tmp_path, lose=lose)
    for per_partition in ("1000000", "7", "13", "50"):
        df = (
            spark.read.format("epto")
            .option("rows", "per-node")
            .option("failOnDataLoss", "false")
            .option("maxRecordsPerPartition", per_partition)
            .load(str(tmp_path))
        )
        assert rows(df) == exists, per_partition
        assert df.count() == len(exists)


@pytest.mark.parametrize("lose", ["middle", "tail"])
def test_batch_fails_on_data_loss_by_default(spark: Any, tmp_path: Path, lose: str) -> None:
    lossy_logs(tmp_path, lose=lose)
    with pytest.raises(Exception, match="failOnDataLoss"):
        spark.read.format("epto").option("rows", "per-node").load(str(tmp_path)).collect()
    # Ranges that avoid the loss read fine.
    node1 = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("endingOffsets", '{"0": 5}')
        .load(str(tmp_path))
    )
    assert node1.count() == 5 + 30


def test_stream_returns_every_record_that_exists_and_commits_no_more(
    spark: Any, tmp_path: Path
) -> None:
    logs, ck = tmp_path / "logs", tmp_path / "ck"
    _, exists = lossy_logs(logs, lose="middle")
    batches: dict[int, set[Row]] = {}
    counts: dict[int, int] = {}

    def sink(df: Any, batch_id: int) -> None:
        batches[batch_id] = rows(df)
        counts[batch_id] = df.count()

    q = (
        spark.readStream.format("epto")
        .option("rows", "per-node")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", "25")
        .option("maxRecordsPerPartition", "9")
        .load(str(logs))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(480)  # bounded; generous for loaded machines
    assert set().union(*batches.values()) == exists
    assert sum(counts.values()) == len(exists)  # each record once
    # Each micro-batch returned every existing record between its offsets.
    seen = 0
    for progress in q.recentProgress:
        (source,) = progress.sources
        start, end = (
            (json.loads(o) if isinstance(o, str) else o) or {}
            for o in (source.startOffset, source.endOffset)
        )
        want = {r for r in exists if start.get(str(r[0]), 0) <= r[1] < end[str(r[0])]}
        assert batches.get(progress.batchId, set()) == want
        seen += 1
    assert seen == len(batches) > 3
    assert end == {"0": 120, "1": 30}


def test_stream_offsets_never_pass_unread_records(tmp_path: Path) -> None:
    """The stream reader without the engine: under every rate limit, each
    micro-batch reads every existing record below its end offset."""
    pytest.importorskip("pyspark.sql.streaming.datasource")
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from epto.spark._options import parse_options
    from epto.spark._source import EptoStreamReader

    _, exists = lossy_logs(tmp_path, lose="middle")
    want = {(r[0], r[1]) for r in exists}
    for limit in (1, 4, 11, 17, 40):
        reader = EptoStreamReader(
            parse_options(
                {
                    "path": str(tmp_path),
                    "rows": "per-node",
                    "startingOffsets": "earliest",
                    "failOnDataLoss": "false",
                    "maxRecordsPerPartition": "5",
                },
                streaming=True,
            )
        )
        start = reader.initialOffset()
        got: set[tuple[int, int]] = set()
        while True:
            end = reader.latestOffset(start, ReadMaxRows(limit))
            if end == start:
                break
            batch = {
                (node, index)
                for part in reader.partitions(start, end)
                for b in reader.read(part)
                for node, index in zip(
                    b.column("node").to_pylist(), b.column("offset").to_pylist(), strict=True
                )
            }
            between = {(n, i) for n, i in want if start.get(str(n), 0) <= i < end[str(n)]}
            assert batch == between, (limit, start, end)
            got |= batch
            start = end
        assert got == want and start == {"0": 120, "1": 30}


def test_stream_fails_on_data_loss_by_default(spark: Any, tmp_path: Path) -> None:
    lossy_logs(tmp_path / "logs", lose="tail")
    q = (
        spark.readStream.format("epto")
        .option("rows", "per-node")
        .option("startingOffsets", "earliest")
        .load(str(tmp_path / "logs"))
        .writeStream.foreachBatch(lambda df, _: df.count())
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="data loss"):
        q.awaitTermination(480)
