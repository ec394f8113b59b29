"""The JVM reader, ``format("epto-jvm")``: the Python source's rows, options
and errors on the same logs, plus column pruning and filters pushed down."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from epto import ConfigurationError, EptoError
from epto.log import DeliveryLogWriter, list_segments
from epto.spark import jvm_jar
from epto.spark._jvm import PROVIDER, SERVICE
from epto.spark._options import parse_options

from .test_columnar import write_mixed
from .test_data_loss import lossy_logs
from .test_kafka_options import MS, offsets, timed_logs

pytestmark = pytest.mark.spark

if jvm_jar() is None:  # pragma: no cover - a machine with a JRE only
    pytest.skip("javac is needed to build the epto-jvm reader", allow_module_level=True)


def everything(df: Any) -> list[tuple[Any, ...]]:
    """Every column, times as integers, sorted by (node, offset)."""
    from pyspark.sql import functions as F

    got = df.select(
        *df.columns[:7],
        F.unix_micros("delivered_at"),
        F.unix_micros("broadcast_at"),
        "signature",
    ).collect()
    return sorted((*r[:6], bytes(r[6]), r[7], r[8], r[9] and bytes(r[9])) for r in got)


def both(spark: Any, root: Path, **options: str) -> tuple[Any, Any]:
    """The same read through the Python source and through the JVM reader."""
    python = spark.read.format("epto").option("rows", "per-node").options(**options).load(str(root))
    jvm = spark.read.format("epto-jvm").options(**options).load(str(root))
    return python, jvm


def scan_schema(df: Any) -> str:
    """What the JVM scan reads, from the executed plan."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    found = re.search(r"epto-jvm \S+ (struct<[^>]*>)", plan)
    assert found is not None, plan
    return found.group(1)


def test_the_jar_registers_the_format() -> None:
    path = jvm_jar()
    assert path is not None and path == jvm_jar()  # built once, then cached
    with zipfile.ZipFile(path) as jar:
        assert jar.read(SERVICE).decode().split() == [PROVIDER]
        assert "epto/spark/jvm/EptoLogSource.class" in jar.namelist()


def test_without_javac_there_is_no_jar(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from epto.spark import _jvm

    monkeypatch.setenv("EPTO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_jvm, "javac", lambda: None)
    assert _jvm.jvm_jar() is None
    assert _jvm.jar_path().parent == tmp_path / "spark-jvm"
    with pytest.raises(EptoError, match="javac failed"):
        _jvm.build(compiler="false")  # a compiler that fails


def test_rows_equal_the_python_sources(spark: Any, tmp_path: Path) -> None:
    write_mixed(tmp_path, 3, 300)  # signatures, empty and long payloads, many segments
    write_mixed(tmp_path, 4, 50, seed=2)
    # Node 5 is being written: its last segment is open (and read up to its last record).
    writer = DeliveryLogWriter(tmp_path, 5, segment_bytes=1024)
    try:
        for i in range(40):
            writer.append_fields(
                source=1, seq=i, ts=-i, payload=b"p" * i, delivered_at=i, broadcast_at=None
            )
        writer.flush()
        assert not list_segments(tmp_path / "5")[-1].closed
        python, jvm = both(spark, tmp_path, maxRecordsPerPartition="70")
        assert jvm.schema == python.schema
        rows = everything(jvm)
        assert rows == everything(python)
        assert len(rows) == 390 and {r[0] for r in rows} == {3, 4, 5}
        assert any(r[9] is None for r in rows) and any(r[9] for r in rows)
        assert jvm.count() == 390
    finally:
        writer.close()


def test_columns_are_pruned(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    write_mixed(tmp_path, 3, 120)
    python, jvm = both(spark, tmp_path)
    one = jvm.select("ts")
    assert scan_schema(one) == "struct<ts:bigint>"
    assert sorted(one.collect()) == sorted(python.select("ts").collect())
    assert scan_schema(jvm.groupBy().count()) == "struct<>"
    pair = jvm.select("payload", F.unix_micros("broadcast_at").alias("b"))
    assert sorted(pair.collect(), key=repr) == sorted(
        python.select("payload", F.unix_micros("broadcast_at").alias("b")).collect(), key=repr
    )
    # A schema given to the reader, as the Python source takes one.
    given = spark.read.format("epto-jvm").schema("offset BIGINT, tag STRING").load(str(tmp_path))
    assert given.columns == ["offset", "tag"]
    assert sorted(given.collect()) == sorted(python.select("offset", "tag").collect())


@pytest.mark.parametrize(
    "options",
    [
        {"startingOffsets": '{"0": 5}', "endingOffsets": '{"logs": {"0": 30, "1": 3}}'},
        {"startingTimestamp": str(MS + 20), "maxRecordsPerPartition": "7"},
        {"startingOffsetsByTimestamp": f'{{"1": {MS + 35}}}', "endingTimestamp": str(MS + 38)},
        {"endingOffsetsByTimestamp": f'{{"0": {MS + 3}}}', "minPartitions": "5"},
        {"startingTimestamp": str(MS + 999), "startingOffsetsByTimestampStrategy": "latest"},
    ],
)
def test_options_select_the_same_records(
    spark: Any, tmp_path: Path, options: dict[str, str]
) -> None:
    timed_logs(tmp_path)  # nodes 0 and 1, 40 records each
    python, jvm = both(spark, tmp_path, **options)
    assert offsets(jvm) == offsets(python)


@pytest.mark.parametrize(
    "options",
    [
        {"startingOffset": "earliest"},
        {"startingOffsets": "latest"},
        {"startingOffsets": "newest"},
        {"startingOffsets": '{"a": 1}'},
        {"startingOffsets": '{"0": -1}'},
        {"endingOffsets": "{"},
        {"endingOffsets": '{"x": {"0": 1}, "y": {"0": 2}}'},
        {"maxOffsetsPerTrigger": "10"},
        {"failOnDataLoss": "maybe"},
        {"minPartitions": "0"},
        {"maxRecordsPerPartition": "many"},
        {"startingTimestamp": "-1"},
        {"startingOffsetsByTimestampStrategy": "earliest"},
        {"startingOffsets": '{"7": 1}'},
        {"endingOffsets": '{"0": 3}', "startingOffsets": '{"0": 4}'},
        {"startingTimestamp": str(MS + 999)},
    ],
)
def test_bad_options_fail_with_the_python_sources_message(
    spark: Any, tmp_path: Path, options: dict[str, str]
) -> None:
    timed_logs(tmp_path)
    try:  # the Python source's message, from its option parser or its planning
        given = {"path": str(tmp_path), "rows": "per-node", **options}
        parsed = parse_options(given, streaming=False)
        from epto.spark._source import EptoBatchReader

        EptoBatchReader(parsed, ("node",)).partitions()
    except ConfigurationError as exc:
        # The list of known names differs on purpose: the JVM reader reads
        # files only, so it does not list the network source's epto.* names.
        message = str(exc).split(" (known: ")[0]
    else:  # pragma: no cover
        pytest.fail("the Python source took the options")
    with pytest.raises(Exception, match=re.escape(message)):
        spark.read.format("epto-jvm").options(**options).load(str(tmp_path)).collect()


def test_missing_path_and_damaged_frames_fail_as_in_python(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("epto-jvm").load(str(tmp_path / "nowhere")).collect()
    with pytest.raises(Exception, match="needs a path"):
        spark.read.format("epto-jvm").load().collect()
    timed_logs(tmp_path)
    damaged = list_segments(tmp_path / "1")[0].path
    data = bytearray(damaged.read_bytes())
    data[60] ^= 0xFF  # node 1's first segment no longer reads back
    damaged.write_bytes(bytes(data))
    message = f"{damaged}: damaged record at byte 32"
    for fmt in ("epto", "epto-jvm"):
        with pytest.raises(Exception, match=re.escape(message)):
            spark.read.format(fmt).load(str(tmp_path)).count()


def test_ids_above_bigint_fail_as_in_python(spark: Any, tmp_path: Path) -> None:
    with DeliveryLogWriter(tmp_path, 2) as w:
        w.append_fields(source=2**63 + 5, seq=1, ts=0, payload=b"", delivered_at=0)
    message = "node 2: a source at or above 2**63 cannot be read as a Spark BIGINT"
    for fmt in ("epto", "epto-jvm"):
        df = spark.read.format(fmt).load(str(tmp_path))
        with pytest.raises(Exception, match=re.escape(message)):
            df.select("source").collect()
    # The JVM reader decodes only the columns asked for: the others read.
    jvm = spark.read.format("epto-jvm").load(str(tmp_path))
    assert jvm.select("seq").collect()[0][0] == 1


@pytest.mark.parametrize("lose", ["middle", "tail"])
def test_data_loss_as_in_python(spark: Any, tmp_path: Path, lose: str) -> None:
    _, exists = lossy_logs(tmp_path, lose=lose)
    with pytest.raises(
        Exception, match=r"epto.spark.jvm.DataLossError: .*failOnDataLoss=false to skip"
    ):
        spark.read.format("epto-jvm").load(str(tmp_path)).count()
    python, jvm = both(spark, tmp_path, failOnDataLoss="false", maxRecordsPerPartition="13")
    assert everything(jvm) == everything(python)
    assert jvm.count() == len(exists)
    start = {"startingOffsets": '{"0": 500}'}
    with pytest.raises(Exception, match=re.escape("node 0: offset 500 is outside the log's")):
        spark.read.format("epto-jvm").options(**start).load(str(tmp_path)).count()


def test_node_and_offset_filters_cut_what_is_read(spark: Any, tmp_path: Path) -> None:
    timed_logs(tmp_path)  # nodes 0 and 1, 40 records each, ts = offset
    damaged = list_segments(tmp_path / "1")[0].path
    data = bytearray(damaged.read_bytes())
    data[60] ^= 0xFF  # reading node 1's first segment fails
    damaged.write_bytes(bytes(data))
    jvm = spark.read.format("epto-jvm").load(str(tmp_path))
    wanted = jvm.filter("node = 0 AND offset >= 5 AND offset < 10")
    assert offsets(wanted) == {(0, i) for i in range(5, 10)}
    assert not re.search(r"\bFilter\b", wanted._jdf.queryExecution().executedPlan().toString())
    mixed = jvm.filter("node IN (0) AND ts > 30 AND offset <= 35")
    assert offsets(mixed) == {(0, i) for i in range(31, 36)}
    assert offsets(jvm.filter("node > 0 AND offset >= 38")) == {(1, 38), (1, 39)}
    assert jvm.filter("node = 7").count() == jvm.filter("node = 0 AND offset < 0").count() == 0
    with pytest.raises(Exception, match="damaged record"):
        jvm.filter("offset < 3").collect()  # node 1 is read: its first records are damaged
