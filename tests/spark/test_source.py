"""The ``epto`` Spark source: batch and streaming reads of delivery logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epto.log import DeliveryLogWriter, list_nodes, log_bounds, read_log
from epto.spark._options import limit_offsets, parse_options

from ._cluster import run_cluster

pytestmark = pytest.mark.spark


def written(root: Path) -> set[tuple[Any, ...]]:
    return {
        (
            r.node,
            r.index,
            r.source,
            r.seq,
            r.ts,
            r.tag.value,
            r.payload,
            r.delivered_at,
            r.broadcast_at,
        )
        for node in list_nodes(root)
        for r in read_log(root / str(node))
    }


def rows(df: Any) -> set[tuple[Any, ...]]:
    from pyspark.sql import functions as F

    out = df.select(
        "node",
        "offset",
        "source",
        "seq",
        "ts",
        "tag",
        "payload",
        F.unix_micros("delivered_at"),
        F.unix_micros("broadcast_at"),
    ).collect()
    return {(*r[:6], bytes(r[6]), r[7], r[8]) for r in out}


def append(root: Path, node: int, count: int) -> None:
    with DeliveryLogWriter(root, node) as w:
        for i in range(count):
            w.append_fields(
                source=node, seq=w.next_index, ts=i, payload=b"new", delivered_at=10**12 + i
            )


def test_arrow_schema_matches_spark(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    from epto.spark._source import ARROW_SCHEMA, SCHEMA_DDL

    assert to_arrow_schema(_parse_datatype_string(SCHEMA_DDL), timezone="UTC") == ARROW_SCHEMA


def test_batch_read_equals_what_was_written(spark: Any, tmp_path: Path) -> None:
    run_cluster(tmp_path, n=4, events=25, segment_bytes=1024)
    expected = written(tmp_path)
    assert len(expected) == 100  # four processes deliver 25 events each
    df = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("maxRecordsPerPartition", "30")
        .load(str(tmp_path))
    )
    assert df.rdd.getNumPartitions() >= 4
    assert rows(df) == expected
    # Offsets select per-node ranges, like Kafka's.
    part = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("startingOffsets", json.dumps({"1": 5, "2": -2}))
        .option("endingOffsets", json.dumps({"1": 9, "3": 0}))
        .load(str(tmp_path))
    )
    got = {(r["node"], r["offset"]) for r in part.select("node", "offset").collect()}
    want = {(0, i) for i in range(25)} | {(1, i) for i in range(5, 9)} | {(2, i) for i in range(25)}
    assert got == want


def test_batch_data_loss_is_reported(spark: Any, tmp_path: Path) -> None:
    append(tmp_path, 0, 5)
    reader = (
        spark.read.format("epto").option("rows", "per-node").option("startingOffsets", '{"0": 9}')
    )
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader.load(str(tmp_path)).collect()
    lenient = reader.option("failOnDataLoss", "false").load(str(tmp_path))
    assert lenient.count() == 0


def test_streaming_reads_everything_once_then_only_new_records(spark: Any, tmp_path: Path) -> None:
    logs, ck = tmp_path / "logs", tmp_path / "ck"
    run_cluster(logs, n=3, events=40)
    expected = written(logs)

    def run_once(name: str) -> tuple[set[tuple[Any, ...]], list[Any], int]:
        stream = (
            spark.readStream.format("epto")
            .option("rows", "per-node")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "25")
            .load(str(logs))
        )
        batches: list[int] = []
        seen: list[set[tuple[Any, ...]]] = []

        def sink(df: Any, batch_id: int) -> None:
            batches.append(batch_id)
            seen.append(rows(df))

        q = (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(480)  # bounded; generous for loaded machines
        out: set[tuple[Any, ...]] = set()
        total = 0
        for s in seen:
            total += len(s)
            out |= s
        return out, [len(s) for s in seen], total

    first, sizes, total = run_once("first")
    assert first == expected and total == len(expected) == 120
    assert max(sizes) <= 25 and len([s for s in sizes if s]) >= 5
    # Restart from the checkpoint after more deliveries: only those arrive.
    before = written(logs)
    append(logs, 1, 7)
    append(logs, 9, 3)  # a node that appeared after the first run
    second, _, total2 = run_once("second")
    assert second == written(logs) - before and total2 == 10
    third, _, total3 = run_once("third")
    assert third == set() and total3 == 0


def test_stream_starting_latest(spark: Any, tmp_path: Path) -> None:
    append(tmp_path, 0, 4)
    from epto.spark._source import EptoStreamReader

    reader = EptoStreamReader(
        parse_options(
            {"path": str(tmp_path), "rows": "per-node", "maxOffsetsPerTrigger": "3"},
            streaming=True,
        )
    )
    start = reader.initialOffset()
    assert start == {"0": 4}
    append(tmp_path, 0, 5)
    append(tmp_path, 2, 5)
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    assert reader.getDefaultReadLimit() == ReadMaxRows(3)
    end = reader.latestOffset(start, ReadMaxRows(3))
    assert sum(end.values()) - 4 == 3 and end["0"] >= 4
    assert reader.latestOffset(start, ReadAllAvailable()) == {"0": 9, "2": 5}
    # Spark 4.0 and 4.1 call latestOffset() without arguments.
    old = EptoStreamReader(
        parse_options(
            {"path": str(tmp_path), "rows": "per-node", "maxOffsetsPerTrigger": "4"},
            streaming=True,
        )
    )
    assert old.initialOffset() == {"0": 9, "2": 5}
    append(tmp_path, 0, 6)
    assert old.latestOffset() == {"0": 13, "2": 5}
    assert old.latestOffset() == {"0": 15, "2": 5}
    assert log_bounds(tmp_path / "0") == (0, 15)
    parts = reader.partitions({"0": 4}, {"0": 9, "2": 5})
    assert sum(hi - lo for p in parts for _, _, lo, hi in p.ranges) == 10


def test_limit_offsets_shares_in_proportion() -> None:
    assert limit_offsets({1: 0, 2: 0}, {1: 30, 2: 10}, 8) == {1: 6, 2: 2}
    assert limit_offsets({1: 0, 2: 0}, {1: 1, 2: 1}, 1) in ({1: 1, 2: 0}, {1: 0, 2: 1})
    assert limit_offsets({1: 5}, {1: 7}, 10) == {1: 7}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, False, "needs a path"),
        ({"path": "x", "startingOffsets": "newest"}, False, "startingOffsets"),
        ({"path": "x", "startingOffsets": "latest"}, False, "batch"),
        ({"path": "x", "startingOffsets": '{"a": 1}'}, True, "bad entry"),
        ({"path": "x", "endingOffsets": "latest"}, True, "batch reads only"),
        ({"path": "x", "maxOffsetsPerTrigger": "0"}, True, ">= 1"),
        ({"path": "x", "failOnDataLoss": "maybe"}, True, "true or false"),
    ],
)
def test_bad_options(options: dict[str, str], streaming: bool, message: str) -> None:
    from epto import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        parse_options(options, streaming=streaming)
