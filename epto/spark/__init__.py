"""Delivery logs in Apache Spark (PySpark 4 Python Data Source API).

One line registers the source::

    epto.spark.register(spark)   # then spark.read.format("epto").load(LOGDIR)

Batch reads also have a JVM reader, ``spark.read.format("epto-jvm")``: the
same rows, options and errors, with column pruning and filters pushed down;
:func:`session` builds it (:func:`jvm_jar`, needs ``javac``) and loads it.

``df.writeStream.format("epto").option("gateway", "host:port")`` broadcasts
rows into a running group through a :class:`Gateway` (a member that listens
for Spark tasks); members de-duplicate retried rows with :class:`SinkRows`.

:func:`sweep` runs independent seeded simulations (a :func:`grid` of
``SimulationSpec`` fields) on the executors and gathers their summaries;
:func:`standalone_cluster` starts a Spark master and workers on this machine,
to try cluster mode without a cluster.

:func:`analyze` verifies total order, integrity and agreement of a directory
of logs on Spark and measures delivery delays. Importing this package does not
import Spark; the functions do.
"""

from ._analyze import analyze as analyze
from ._gateway import Gateway as Gateway
from ._gateway import GatewayStatistics as GatewayStatistics
from ._jvm import jvm_jar as jvm_jar
from ._rows import SinkRow as SinkRow
from ._rows import SinkRows as SinkRows
from ._rows import SinkStatistics as SinkStatistics
from ._session import register as register
from ._session import session as session
from ._session import worker_settings as worker_settings
from ._standalone import standalone_cluster as standalone_cluster
from ._sweep import grid as grid
from ._sweep import simulate as simulate
from ._sweep import sweep as sweep

__all__ = [
    "Gateway",
    "GatewayStatistics",
    "SinkRow",
    "SinkRows",
    "SinkStatistics",
    "analyze",
    "grid",
    "jvm_jar",
    "register",
    "session",
    "simulate",
    "standalone_cluster",
    "sweep",
    "worker_settings",
]
