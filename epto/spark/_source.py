"""``spark.read.format("epto")`` and ``spark.readStream.format("epto")``.

A PySpark 4 Python data source over a directory of delivery logs (one
sub-directory per node, see :mod:`epto.log`). Offsets are delivery indices
per node, ``{"<node>": <next index>}``, and the options are shaped like the
Kafka source's. docs/spark.md lists them with their semantics.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from .._errors import EptoError
from ..log import LogGapError, iter_raw, list_nodes, log_extent, node_directory
from ..log._segment import FLAG_HAS_BROADCAST, FLAG_OUT_OF_ORDER
from ._options import (
    EARLIEST,
    LATEST,
    Offsets,
    SourceOptions,
    from_json,
    limit_offsets,
    parse_options,
    to_json,
)

try:  # Spark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - Spark 4.0 / 4.1

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark versions without the mix-in."""


SCHEMA_DDL = (
    "node BIGINT, index BIGINT, source BIGINT, seq BIGINT, ts BIGINT, tag STRING, "
    "payload BINARY, delivered_at TIMESTAMP, broadcast_at TIMESTAMP"
)
"""The rows' schema; ``payload`` plays the part of Kafka's ``value``."""

ARROW_SCHEMA = pa.schema(
    [
        ("node", pa.int64()),
        ("index", pa.int64()),
        ("source", pa.int64()),
        ("seq", pa.int64()),
        ("ts", pa.int64()),
        ("tag", pa.string()),
        ("payload", pa.binary()),
        ("delivered_at", pa.timestamp("us", tz="UTC")),
        ("broadcast_at", pa.timestamp("us", tz="UTC")),
    ]
)
BATCH_ROWS = 65536


class DataLossError(EptoError):
    """Records a query should read are gone (and ``failOnDataLoss`` is true)."""


class EptoPartition(InputPartition):
    """Ranges ``(node_dir, node, start, end)`` that one Spark task reads."""

    def __init__(self, ranges: Sequence[tuple[str, int, int, int]]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def read_ranges(
    ranges: Sequence[tuple[str, int, int, int]], *, fail_on_data_loss: bool = True
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the rows in ``ranges``, in index order per node.

    With ``fail_on_data_loss``, a missing index in a range raises
    :class:`DataLossError`; without it, every record of the range that exists is
    read and the missing ones are skipped (whatever the range's bounds).
    """
    tags = ("in-order", "out-of-order")
    for node_dir, node, start, end in ranges:
        cols: list[list[Any]] = [[] for _ in range(8)]
        index_c, source_c, seq_c, ts_c, tag_c, payload_c, delivered_c, broadcast_c = cols
        try:
            for index, source, seq, ts, delivered, broadcast, flags, _sig, payload in iter_raw(
                node_dir, start, end, skip_missing=not fail_on_data_loss
            ):
                index_c.append(index)
                source_c.append(source)
                seq_c.append(seq)
                ts_c.append(ts)
                tag_c.append(tags[flags & FLAG_OUT_OF_ORDER])
                payload_c.append(payload)
                delivered_c.append(delivered)
                broadcast_c.append(broadcast if flags & FLAG_HAS_BROADCAST else None)
                if len(index_c) >= BATCH_ROWS:
                    yield _batch(node, cols)
                    for c in cols:
                        c.clear()
        except LogGapError as exc:  # only raised with fail_on_data_loss
            raise DataLossError(f"{exc} (set failOnDataLoss=false to skip)") from exc
        if index_c:
            yield _batch(node, cols)


def _batch(node: int, cols: list[list[Any]]) -> pa.RecordBatch:
    n = len(cols[0])
    arrays = [pa.array([node] * n, pa.int64())]
    arrays += [pa.array(c, t) for c, t in zip(cols, ARROW_SCHEMA.types[1:], strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def pack(root: str, start: Offsets, end: Offsets, max_records: int) -> list[EptoPartition]:
    """Split ``[start[n], end[n])`` per node into partitions of at most ``max_records``."""
    parts: list[EptoPartition] = []
    current: list[tuple[str, int, int, int]] = []
    size = 0
    for node in sorted(end):
        lo, hi = start[node], end[node]
        node_dir = str(node_directory(root, node))
        while lo < hi:
            take = min(hi - lo, max_records - size)
            current.append((node_dir, node, lo, lo + take))
            size += take
            lo += take
            if size >= max_records:
                parts.append(EptoPartition(current))
                current, size = [], 0
    if current:
        parts.append(EptoPartition(current))
    return parts


class _Planner:
    """Resolves offsets against what the logs hold now."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def bounds(self) -> dict[int, tuple[int, int]]:
        """``(first, end)`` per node, where ``end`` is one past the last record
        found or, when the tail was lost, the end the log's manifest recorded as
        durable: offsets cover the lost records, so that reading them raises
        (``failOnDataLoss=true``) or skips exactly them (``false``)."""
        root = self.options.path
        out = {}
        for n in list_nodes(root):
            extent = log_extent(node_directory(root, n))
            out[n] = (extent.first, max(extent.end, extent.durable_end or 0))
        return out

    def resolve(
        self, spec: str | Offsets, bounds: dict[int, tuple[int, int]], *, default: int
    ) -> Offsets:
        out = {}
        for node, (first, end) in bounds.items():
            if spec == "earliest":
                want = EARLIEST
            elif spec == "latest":
                want = LATEST
            else:
                assert isinstance(spec, dict)
                want = spec.get(node, default)
            out[node] = first if want == EARLIEST else end if want == LATEST else want
        return out

    def check_start(self, start: Offsets, bounds: dict[int, tuple[int, int]]) -> Offsets:
        """Start offsets moved past data that is gone, or an error."""
        out = {}
        for node, index in start.items():
            first, end = bounds.get(node, (index, index))
            if index < first or index > end:
                if self.options.fail_on_data_loss:
                    raise DataLossError(
                        f"node {node}: offset {index} is outside the log's [{first}, {end}] "
                        "(set failOnDataLoss=false to skip)"
                    )
                index = first if index < first else end
            out[node] = index
        return out


class EptoBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[EptoPartition]:
        planner = _Planner(self.options)
        bounds = planner.bounds()
        start = planner.check_start(
            planner.resolve(self.options.starting, bounds, default=EARLIEST), bounds
        )
        end = planner.resolve(self.options.ending, bounds, default=LATEST)
        end = {n: max(start[n], min(end[n], bounds[n][1])) for n in end}
        parts = pack(self.options.path, start, end, self.options.max_records_per_partition)
        return parts or [EptoPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EptoPartition)
        return read_ranges(partition.ranges, fail_on_data_loss=self.options.fail_on_data_loss)


class EptoStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner = _Planner(options)
        self._cursor: Offsets | None = None
        self._target: Offsets | None = None

    def initialOffset(self) -> dict[str, int]:
        bounds = self._planner.bounds()
        start = self._planner.resolve(self.options.starting, bounds, default=EARLIEST)
        self._cursor = start
        return to_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {n: end for n, (_, end) in self._planner.bounds().items()}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        """Spark 4.2+ passes ``(start, limit)``; 4.0 and 4.1 pass nothing, and then
        the reader continues from the offsets it returned last."""
        bounds = self._planner.bounds()
        if start is None:
            given = dict(self._cursor) if self._cursor is not None else {}
            max_rows = self.options.max_offsets_per_trigger
        else:
            given = from_json(start)
            max_rows = getattr(limit, "max_rows", None)
        begin = {n: given.get(n, first) for n, (first, _) in bounds.items()}
        avail = {n: max(end, begin[n]) for n, (_, end) in bounds.items()}
        if self._target is not None:
            avail = {n: max(begin[n], min(avail[n], self._target.get(n, begin[n]))) for n in avail}
        end = avail if max_rows is None else limit_offsets(begin, avail, max_rows)
        result = {**given, **end}  # nodes whose directory vanished keep their offsets
        self._cursor = result
        return to_json(result)

    def reportLatestOffset(self) -> dict[str, int]:
        return to_json({n: end for n, (_, end) in self._planner.bounds().items()})

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[EptoPartition]:
        bounds = self._planner.bounds()
        stop = from_json(end)
        begin = from_json(start)
        first = {n: begin.get(n, bounds.get(n, (0, 0))[0]) for n in stop}
        first = self._planner.check_start(first, bounds)
        stop = {n: max(first[n], stop[n]) for n in stop}
        return pack(self.options.path, first, stop, self.options.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EptoPartition)
        return read_ranges(partition.ranges, fail_on_data_loss=self.options.fail_on_data_loss)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: logs are never deleted by the reader."""


class EptoDataSource(DataSource):
    """The ``epto`` format: delivery logs as rows (schema :data:`SCHEMA_DDL`)."""

    @classmethod
    def name(cls) -> str:
        return "epto"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> EptoBatchReader:
        return EptoBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> EptoStreamReader:
        return EptoStreamReader(parse_options(self.options, streaming=True))
