"""Spark sessions for the ``epto`` tools: local and loopback-bound by default."""

from __future__ import annotations

import os
import sys
from typing import Any


def register(spark: Any) -> None:
    """Make ``spark.read.format("epto")`` and ``spark.readStream.format("epto")`` work."""
    from ._source import EptoDataSource

    spark.dataSource.register(EptoDataSource)


def session(master: str | None = None, *, app_name: str = "epto", **conf: str) -> Any:
    """A SparkSession with the ``epto`` source registered.

    ``master=None`` runs Spark in this process on two cores (``local[2]``),
    bound to 127.0.0.1 with the web UI off; a ``spark://`` (or other) master
    URL runs on that cluster, whose workers need ``epto`` installed. Extra
    ``conf`` entries are passed to the builder.
    """
    from pyspark.sql import SparkSession

    master = master or "local[2]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings |= {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "4",
        }
    settings |= conf
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
