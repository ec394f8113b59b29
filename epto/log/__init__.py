"""Delivery logs: append-only, crash-safe files of what a node delivered.

``DeliveryLogWriter(root, node)`` appends :class:`epto.Delivery` objects to
``root/<node>/``; ``read_log(root/<node>, start)`` replays them from any
delivery index, also while the writer appends. docs/delivery-log.md describes
the format byte by byte and what survives a crash.
"""

from ._broadcasts import read_broadcasts as read_broadcasts
from ._broadcasts import write_broadcasts as write_broadcasts
from ._log_check import check_logs as check_logs
from ._observer import SimulationLogger as SimulationLogger
from ._reader import LogExtent as LogExtent
from ._reader import LogGapError as LogGapError
from ._reader import LogTailLostError as LogTailLostError
from ._reader import iter_raw as iter_raw
from ._reader import last_ordered_ts as last_ordered_ts
from ._reader import list_nodes as list_nodes
from ._reader import list_segments as list_segments
from ._reader import log_bounds as log_bounds
from ._reader import log_extent as log_extent
from ._reader import node_directory as node_directory
from ._reader import read_log as read_log
from ._reader import segment_ranges as segment_ranges
from ._segment import LogCorruptError as LogCorruptError
from ._segment import LogRecord as LogRecord
from ._segment import micros as micros
from ._writer import DeliveryLogs as DeliveryLogs
from ._writer import DeliveryLogWriter as DeliveryLogWriter

__all__ = [
    "check_logs",
    "read_broadcasts",
    "write_broadcasts",
    "DeliveryLogWriter",
    "DeliveryLogs",
    "LogCorruptError",
    "LogExtent",
    "LogGapError",
    "LogTailLostError",
    "LogRecord",
    "SimulationLogger",
    "iter_raw",
    "last_ordered_ts",
    "list_nodes",
    "list_segments",
    "log_bounds",
    "log_extent",
    "micros",
    "node_directory",
    "read_log",
    "segment_ranges",
]
