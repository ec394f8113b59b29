"""Kafka's option conventions through a Spark session: timestamps, partitions,
columns chosen by a schema, and errors that name what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epto.cli import main
from epto.log import DeliveryLogWriter, list_segments

from ._cluster import run_cluster
from .test_columnar import expected, write_mixed

pytestmark = pytest.mark.spark

MS = 1_700_000_000_000
"""A time in milliseconds since the epoch; record i of node n is delivered at
MS + 10 n + i milliseconds."""


def timed_logs(root: Path) -> None:
    for node in (0, 1):
        with DeliveryLogWriter(root, node, segment_bytes=2048) as w:
            for i in range(40):
                w.append_fields(
                    source=node, seq=i, ts=i, payload=b"x", delivered_at=(MS + 10 * node + i) * 1000
                )


def offsets(df: Any) -> set[tuple[int, int]]:
    return {(r["node"], r["offset"]) for r in df.select("node", "offset").collect()}


def test_full_rows_equal_the_python_reader(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    write_mixed(tmp_path, 3, 300)
    write_mixed(tmp_path, 4, 50, seed=2)
    df = spark.read.format("epto").option("rows", "per-node").load(str(tmp_path))
    assert df.columns[-1] == "signature" and "offset" in df.columns
    got = df.select(
        *df.columns[:7],
        F.unix_micros("delivered_at"),
        F.unix_micros("broadcast_at"),
        "signature",
    ).collect()
    rows = sorted((*r[:6], bytes(r[6]), r[7], r[8], r[9] and bytes(r[9])) for r in got)
    assert rows == sorted(expected(tmp_path, 3) + expected(tmp_path, 4))
    assert any(r[9] is None for r in rows) and any(r[9] for r in rows)


def test_a_schema_given_to_the_source_reads_only_those_columns(spark: Any, tmp_path: Path) -> None:
    write_mixed(tmp_path, 3, 120)
    full = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .load(str(tmp_path))
        .select("payload", "offset")
        .collect()
    )
    part = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .schema("payload BINARY, offset BIGINT")
        .load(str(tmp_path))
    )
    assert part.columns == ["payload", "offset"]
    assert sorted(map(tuple, part.collect())) == sorted(map(tuple, full))
    with pytest.raises(Exception, match="has no column index"):
        spark.read.format("epto").option("rows", "per-node").schema("index BIGINT").load(
            str(tmp_path)
        ).collect()


def test_min_partitions_splits_the_read(spark: Any, tmp_path: Path) -> None:
    timed_logs(tmp_path)
    df = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("minPartitions", "5")
        .load(str(tmp_path))
    )
    assert df.rdd.getNumPartitions() == 5
    assert offsets(df) == {(n, i) for n in (0, 1) for i in range(40)}
    assert (
        spark.read.format("epto")
        .option("rows", "per-node")
        .load(str(tmp_path))
        .rdd.getNumPartitions()
        == 1
    )


def test_starting_and_ending_timestamps(spark: Any, tmp_path: Path) -> None:
    timed_logs(tmp_path)
    # Node 0's record i is at MS + i, node 1's at MS + 10 + i.
    df = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("startingTimestamp", str(MS + 15))
        .option("endingTimestamp", str(MS + 30))
        .load(str(tmp_path))
    )
    assert offsets(df) == {(0, i) for i in range(15, 30)} | {(1, i) for i in range(5, 20)}
    nested = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("startingOffsetsByTimestamp", json.dumps({"logs": {"1": MS + 45}}))
        .option("endingOffsetsByTimestamp", json.dumps({"logs": {"1": MS + 47}}))
        .load(str(tmp_path))
    )
    assert offsets(nested) == {(0, i) for i in range(40)} | {(1, 35), (1, 36)}
    # No record of node 0 at or after MS + 45: an error, or its end with "latest".
    late = (
        spark.read.format("epto")
        .option("rows", "per-node")
        .option("startingTimestamp", str(MS + 45))
    )
    with pytest.raises(Exception, match="startingTimestamp: node 0 has no record delivered at or"):
        late.load(str(tmp_path)).collect()
    latest = late.option("startingOffsetsByTimestampStrategy", "latest").load(str(tmp_path))
    assert offsets(latest) == {(1, i) for i in range(35, 40)}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffset": "earliest"}, "did you mean startingOffsets"),
        ({"startingOffsets": '{"9": 0}'}, r"names node\(s\) \[9\] with no log"),
        ({"endingOffsets": '{"topic": {"7": 3}}'}, r"names node\(s\) \[7\]"),
        (
            {"startingOffsets": '{"0": 30}', "endingOffsets": '{"0": 10}'},
            "ending offset 10 is before the starting offset 30",
        ),
    ],
)
def test_errors_name_the_problem(
    spark: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    timed_logs(tmp_path)
    with pytest.raises(Exception, match=message):
        spark.read.format("epto").option("rows", "per-node").options(**options).load(
            str(tmp_path)
        ).collect()


def test_a_path_that_does_not_exist_is_an_error(spark: Any, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-logs"
    with pytest.raises(Exception, match=f"{missing} does not exist"):
        spark.read.format("epto").option("rows", "per-node").load(str(missing)).collect()
    stream = (
        spark.readStream.format("epto")
        .option("rows", "per-node")
        .load(str(missing))
        .writeStream.format("noop")
    )
    with pytest.raises(Exception, match=f"{missing} does not exist"):
        query = stream.option("checkpointLocation", str(tmp_path / "ck")).start()
        query.awaitTermination(240)  # the error ends the query; bounded if it did not


def test_analyze_exit_status_tells_cannot_read_from_violated(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    run_cluster(tmp_path / "logs", n=3, events=30, segment_bytes=1024)
    list_segments(tmp_path / "logs" / "1")[1].path.unlink()  # data loss in the middle
    assert main(["analyze", str(tmp_path / "logs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"data loss: {tmp_path / 'logs' / '1'}: delivery" in err
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(tmp_path / "empty")]) == 2
    assert "no delivery logs" in capsys.readouterr().err
