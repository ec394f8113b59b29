"""Spark sessions for the ``epto`` tools: local and loopback-bound by default."""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path
from typing import Any

from . import _jvm

HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
"""Spark's setting that gives a Python worker's error as its last line only."""


def register(spark: Any) -> None:
    """Make the ``epto`` format work: ``spark.read``/``readStream`` of delivery
    logs, ``df.write``/``writeStream`` of rows into a group through a gateway."""
    from ._sink import EptoDataSource

    spark.dataSource.register(EptoDataSource)


def worker_settings() -> dict[str, str]:
    """Settings that let Spark's Python workers import this very ``epto``.

    Workers run ``PYSPARK_PYTHON`` when set, else this interpreter
    (``sys.executable``), whether or not a virtual environment is active. When
    ``epto`` is imported from a directory that is not a site-packages
    directory (a source checkout, an editable install, ``PYTHONPATH``), that
    directory goes first on the executors' ``PYTHONPATH``, so they import the
    same code as the driver.
    """
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    settings = {"spark.pyspark.python": python}
    # Not resolved: an editable install in strict mode links each file from a
    # build tree (epto/transports among them) to the checkout, and the
    # workers must import the tree the driver imports, not the checkout.
    home = os.path.abspath(Path(__file__).parent.parent.parent)
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if home not in sites:
        rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != home]
        settings["spark.executorEnv.PYTHONPATH"] = os.pathsep.join([home, *rest])
    return settings


def _export_to_jvm(settings: dict[str, str]) -> None:
    # The JVM that pyspark starts inherits this environment, and so do the
    # Python workers it runs for the driver (data source planning, and every
    # task in local mode).
    os.environ.setdefault("PYSPARK_PYTHON", settings["spark.pyspark.python"])
    path = settings.get("spark.executorEnv.PYTHONPATH")
    if path is not None:
        os.environ["PYTHONPATH"] = path


def session(master: str | None = None, *, app_name: str = "epto", **conf: str) -> Any:
    """A SparkSession with the ``epto`` source registered.

    ``master=None`` runs Spark in this process on two cores (``local[2]``),
    bound to 127.0.0.1 with the web UI off; a ``spark://`` (or other) master
    URL runs on that cluster, whose workers need ``epto`` installed. Extra
    ``conf`` entries are passed to the builder (and win). Python workers run
    this interpreter and import this ``epto`` (:func:`worker_settings`).

    Errors raised by the ``epto`` source reach the user as one line (the
    exception's type and message, without the Python worker's traceback):
    ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` is true, which
    hides the traceback of Python UDFs' errors too; pass it as ``"false"`` to
    see them.

    When ``javac`` is present, the JVM reader (``format("epto-jvm")``) is built
    on first use (:func:`jvm_jar`) and added to ``spark.jars``.
    """
    from pyspark.sql import SparkSession

    master = master or "local[2]"
    builder = SparkSession.builder.master(master).appName(app_name)
    workers = worker_settings()
    _export_to_jvm(workers)
    settings = workers | {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        HIDE_TRACEBACK: "true",
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings |= {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "4",
        }
    jar = _jvm.jvm_jar()
    if jar is not None:  # format("epto-jvm"); without javac, the Python source only
        given = conf.get("spark.jars")
        conf = conf | {"spark.jars": jar if not given else f"{given},{jar}"}
    settings |= conf
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
