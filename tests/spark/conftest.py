"""One local SparkSession for every Spark test (starting one costs 5-20 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import epto.spark

    session = epto.spark.session(
        "local[2]",
        app_name="epto-tests",
        **{"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
