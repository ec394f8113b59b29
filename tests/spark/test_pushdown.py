"""Filters on ``node`` and ``offset`` prune before reading when Spark pushes
filters (``spark.sql.python.filterPushdown.enabled``); without it, Spark
filters after the read; the rows are the same either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epto.log import list_segments
from epto.spark._pushdown import Pushed

from .test_kafka_options import offsets, timed_logs

pytestmark = pytest.mark.spark

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def test_pushed_filters_cut_ranges() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual

    pushed = Pushed()
    assert pushed.take(In(("node",), (1, 2, 9)))
    assert pushed.take(GreaterThan(("offset",), 4))
    assert pushed.take(LessThanOrEqual(("offset",), 20))
    assert not pushed.take(EqualTo(("ts",), 3))
    assert not pushed.take(EqualTo(("node",), "1"))
    start, end = pushed.apply({0: 0, 1: 0, 2: 10, 3: 0}, {0: 50, 1: 50, 2: 12, 3: 50})
    assert (start, end) == ({1: 5, 2: 10}, {1: 21, 2: 12})
    empty = Pushed()
    assert empty.take(EqualTo(("offset",), 99))
    assert empty.apply({0: 0}, {0: 50}) == ({0: 50}, {0: 50})


def test_filters_prune_nodes_and_offsets_before_reading(spark: Any, tmp_path: Path) -> None:
    timed_logs(tmp_path)  # nodes 0 and 1, 40 records each, ts = offset
    damaged = list_segments(tmp_path / "1")[0].path
    data = bytearray(damaged.read_bytes())
    data[60] ^= 0xFF  # node 1's first segment no longer reads back
    damaged.write_bytes(bytes(data))

    def query(where: str) -> Any:
        return (
            spark.read.format("epto").option("rows", "per-node").load(str(tmp_path)).filter(where)
        )

    wanted = "node = 0 AND offset >= 5 AND offset < 10"
    assert spark.conf.get(PUSHDOWN) == "false"
    with pytest.raises(Exception, match="damaged record"):
        query(wanted).collect()  # Spark reads node 1, then filters
    spark.conf.set(PUSHDOWN, "true")
    try:
        assert offsets(query(wanted)) == {(0, i) for i in range(5, 10)}
        # IN on node and a filter the source leaves to Spark (ts) together.
        mixed = query("node IN (0) AND ts > 30 AND offset <= 35")
        assert offsets(mixed) == {(0, i) for i in range(31, 36)}
        with pytest.raises(Exception, match="damaged record"):
            query("offset < 3").collect()  # node 1 is read: its first records are damaged
    finally:
        spark.conf.set(PUSHDOWN, "false")
