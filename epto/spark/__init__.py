"""Delivery logs in Apache Spark (PySpark 4 Python Data Source API).

One line registers the source::

    epto.spark.register(spark)   # then spark.read.format("epto").load(LOGDIR)

:func:`analyze` verifies total order, integrity and agreement of a directory
of logs on Spark and measures delivery delays. Importing this package does not
import Spark; the functions do.
"""

from ._analyze import analyze as analyze
from ._session import register as register
from ._session import session as session

__all__ = ["analyze", "register", "session"]
