"""``spark.read.format("epto")`` and ``spark.readStream.format("epto")``.

A PySpark 4 Python data source over a directory of delivery logs (one
sub-directory per node, see :mod:`epto.log`). By default (``rows=events``)
it reads the group's order once, one row per event (:mod:`epto.spark._events`
plans it); with ``rows=per-node`` every node's log, offsets being delivery
indices per node, ``{"<node>": <next index>}``. The options are Kafka's
(:mod:`epto.spark._options`). Reads are columnar (:mod:`epto.spark._columnar`):
Arrow batches built in bulk from segment bytes, with only the columns of the
schema the reader was given. docs/spark.md lists the options and semantics.

Size: Spark's data-source surface in one place: the batch reader, the stream
reader and their partitions share the option handling, the two row modes and
the one-line error translation; the planning and decoding they call live in
``_events`` and ``_columnar``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from .._errors import ConfigurationError, EptoError
from ..log import LogGapError, list_nodes, node_directory
from ._columnar import COLUMN_TYPES, decode, extent, first_at_or_after, scan_frames
from ._events import (
    START,
    Cursor,
    EventsLossError,
    Plan,
    pack_runs,
    plan,
    read_runs,
    trim_runs,
)
from ._network import NetworkLogs
from ._options import (
    EARLIEST,
    LATEST,
    ByTimestamp,
    Offsets,
    SourceOptions,
    Spec,
    from_json,
    limit_offsets,
    parse_options,
    to_json,
)
from ._pushdown import Pushed, planned_with_pushdown

try:  # Spark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - Spark 4.0 / 4.1

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark versions without the mix-in."""


SCHEMA_DDL = (
    "node BIGINT, offset BIGINT, source BIGINT, seq BIGINT, ts BIGINT, tag STRING, "
    "payload BINARY, delivered_at TIMESTAMP, broadcast_at TIMESTAMP, signature BINARY"
)
"""The rows' schema; ``payload`` plays the part of Kafka's ``value``."""

ARROW_SCHEMA = pa.schema(list(COLUMN_TYPES.items()))
BATCH_ROWS = 65536

Range = tuple[str, int, int, int]
"""``(node_dir, node, start, end)``: records ``start <= index < end`` of one node."""


class DataLossError(EptoError):
    """Records a query should read are gone (and ``failOnDataLoss`` is true)."""


class EventsPartition(InputPartition):
    """Runs of the group's order (:mod:`epto.spark._events`) that one task reads."""

    def __init__(self, runs: Sequence[Any]) -> None:
        super().__init__(tuple(runs))
        self.runs = tuple(runs)


def events_partitions(options: SourceOptions, runs: Sequence[Any]) -> list[EventsPartition]:
    parts = pack_runs(runs, options.max_records_per_partition, options.min_partitions)
    return [EventsPartition(p) for p in parts] or [EventsPartition([])]


def read_partition(
    options: SourceOptions, columns: Sequence[str], partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, EventsPartition):
        if options.servers:
            return _read_over_network(options, partition.runs, columns)
        return read_runs(partition.runs, columns)
    assert isinstance(partition, EptoPartition)
    return read_ranges(
        partition.ranges, fail_on_data_loss=options.fail_on_data_loss, columns=columns
    )


def _read_over_network(
    options: SourceOptions, runs: Sequence[Any], columns: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    logs = NetworkLogs(options.servers, options.token)
    try:
        yield from read_runs(runs, columns, logs.frames)
    finally:
        logs.close()


def _plan_events(options: SourceOptions, start: Cursor, **kwargs: Any) -> Plan:
    logs = NetworkLogs(options.servers, options.token) if options.servers else None
    try:
        return plan(
            logs or options.path, start, fail_on_data_loss=options.fail_on_data_loss, **kwargs
        )
    except EventsLossError as exc:
        raise DataLossError(str(exc)) from None
    finally:
        if logs is not None:
            logs.close()


class EptoPartition(InputPartition):
    """Ranges ``(node_dir, node, start, end)`` that one Spark task reads."""

    def __init__(self, ranges: Sequence[Range]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def columns_of(schema: StructType | None) -> tuple[str, ...]:
    """The columns to produce: the source's schema, or the subset a user gave
    with ``.schema(...)`` (same names and types, any order)."""
    if schema is None:
        return tuple(COLUMN_TYPES)
    from pyspark.sql.pandas.types import to_arrow_type

    out = []
    for field in schema.fields:
        want = COLUMN_TYPES.get(field.name)
        if want is None or to_arrow_type(field.dataType, timezone="UTC") != want:
            raise ConfigurationError(
                f"the epto source has no column {field.name} {field.dataType.simpleString()}; "
                f"a schema given to it must take its columns from: {SCHEMA_DDL}"
            )
        out.append(field.name)
    return tuple(out)


def read_ranges(
    ranges: Sequence[Range],
    *,
    fail_on_data_loss: bool = True,
    columns: Sequence[str] = tuple(COLUMN_TYPES),
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``columns`` of the rows in ``ranges``, in index order per node.

    With ``fail_on_data_loss``, a missing index in a range raises
    :class:`DataLossError`; without it, every record of the range that exists is
    read and the missing ones are skipped (whatever the range's bounds). A node
    directory this host cannot see raises :class:`EptoError` naming it.
    """
    for node_dir, node, start, end in ranges:
        if not os.path.isdir(node_dir):
            raise EptoError(
                f"{node_dir} is not visible on host {socket.gethostname()}: executors read the "
                "logs at the driver's absolute path (use a file system shared by every worker)"
            )
        try:
            for data, positions in scan_frames(
                node_dir, start, end, skip_missing=not fail_on_data_loss
            ):
                batch = decode(data, positions, node, columns)
                for at in range(0, batch.num_rows, BATCH_ROWS):
                    yield batch.slice(at, BATCH_ROWS)
        except LogGapError as exc:  # only raised with fail_on_data_loss
            raise DataLossError(f"{exc} (set failOnDataLoss=false to skip)") from exc


def pack(
    root: str, start: Offsets, end: Offsets, max_records: int, min_partitions: int | None = None
) -> list[EptoPartition]:
    """Split ``[start[n], end[n])`` per node into even partitions: at least
    ``min_partitions``, none above ``max_records`` offsets; ranges of several
    nodes share a partition."""
    total = sum(max(0, end[n] - start[n]) for n in end)
    count = max(min_partitions or 1, -(-total // max_records))
    size = max(1, -(-total // count))
    parts: list[EptoPartition] = []
    current: list[Range] = []
    used = 0
    for node in sorted(end):
        lo, hi = start[node], end[node]
        node_dir = str(node_directory(root, node))
        while lo < hi:
            take = min(hi - lo, size - used)
            current.append((node_dir, node, lo, lo + take))
            used += take
            lo += take
            if used >= size:
                parts.append(EptoPartition(current))
                current, used = [], 0
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
            held = extent(node_directory(root, n))
            out[n] = (held.first, max(held.end, held.durable_end or 0))
        return out

    def resolve(
        self, name: str, spec: Spec, bounds: dict[int, tuple[int, int]], *, default: int
    ) -> Offsets:
        """Per-node offsets for every node of ``bounds``; ``default`` for nodes
        that ``spec`` does not name. Names of nodes without a log raise."""
        named = spec.per_node if isinstance(spec, ByTimestamp) else spec
        if isinstance(named, dict):
            unknown = sorted(set(named) - set(bounds))
            if unknown:
                raise ConfigurationError(
                    f"{name} names node(s) {unknown} with no log under {self.options.path} "
                    f"(nodes there: {sorted(bounds) or 'none'})"
                )
        out = {}
        for node, (first, end) in bounds.items():
            if isinstance(spec, ByTimestamp):
                out[node] = self._by_time(name, spec, node, first, end, default)
                continue
            if spec == "earliest":
                want = EARLIEST
            elif spec == "latest":
                want = LATEST
            else:
                assert isinstance(spec, dict)
                want = spec.get(node, default)
            out[node] = first if want == EARLIEST else end if want == LATEST else want
        return out

    def _by_time(
        self, name: str, spec: ByTimestamp, node: int, first: int, end: int, default: int
    ) -> int:
        millis = spec.millis(node)
        if millis is None:
            return first if default == EARLIEST else end
        found = first_at_or_after(node_directory(self.options.path, node), millis * 1000)
        if found is not None:
            return found
        if name.startswith("starting") and self.options.timestamp_strategy == "error":
            option = "startingTimestamp" if spec.every is not None else "startingOffsetsByTimestamp"
            raise ConfigurationError(
                f"{option}: node {node} has no record delivered at or after {millis} ms "
                "(set startingOffsetsByTimestampStrategy=latest to start at its end)"
            )
        return end

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


def _explicit(spec: Spec, node: int) -> bool:
    """Whether ``spec`` names an offset or a time for ``node`` (not "latest")."""
    if isinstance(spec, ByTimestamp):
        return spec.millis(node) is not None
    return isinstance(spec, dict) and spec.get(node, LATEST) != LATEST


class EptoBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, columns: Sequence[str]) -> None:
        self.options = options
        self.columns = tuple(columns)
        self.pushed: Pushed | None = None

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        if not opts.per_node:
            runs = _plan_events(opts, START, final_only=False).runs
            runs = trim_runs(runs, opts.events_start, opts.events_end)
            return events_partitions(opts, runs)
        planner = _Planner(opts)
        bounds = planner.bounds()
        wanted = planner.resolve("startingOffsets", opts.starting, bounds, default=EARLIEST)
        start = planner.check_start(wanted, bounds)
        end = planner.resolve("endingOffsets", opts.ending, bounds, default=LATEST)
        for node in sorted(end):
            if _explicit(opts.ending, node) and end[node] < wanted[node]:
                raise ConfigurationError(
                    f"node {node}: the ending offset {end[node]} is before the starting "
                    f"offset {wanted[node]} (as the Kafka source, a read cannot go backwards)"
                )
        end = {n: max(start[n], min(end[n], bounds[n][1])) for n in end}
        if self.pushed is not None:
            start, end = self.pushed.apply(start, end)
        parts = pack(opts.path, start, end, opts.max_records_per_partition, opts.min_partitions)
        return parts or [EptoPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, self.columns, partition)


class EptoFilteringReader(EptoBatchReader):
    """A batch reader that takes filters on ``node`` and ``offset``
    (:mod:`epto.spark._pushdown`); created only when Spark pushes filters."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        if not self.options.per_node:  # node and offset are not per-node here
            yield from filters
            return
        self.pushed = Pushed()
        for flt in filters:
            if not self.pushed.take(flt):
                yield flt


class EptoStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self,
        options: SourceOptions,
        columns: Sequence[str] = tuple(COLUMN_TYPES),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.columns = tuple(columns)
        self._planner = _Planner(options)
        self._cursor: Offsets | None = None
        self._target: Offsets | None = None
        self._clock = clock
        self._last_trigger: float | None = None
        self._events_cursor: Cursor | None = None
        self._events_target: Cursor | None = None

    def initialOffset(self) -> dict[str, Any]:
        if not self.options.per_node:
            if self.options.events_start:
                return self._cursor_at(self.options.events_start).to_json()
            if self.options.starting == "latest":
                return self._events_plan(START).cursor.to_json()
            return START.to_json()
        bounds = self._planner.bounds()
        start = self._planner.resolve(
            "startingOffsets", self.options.starting, bounds, default=EARLIEST
        )
        self._cursor = start
        return to_json(start)

    def _cursor_at(self, offset: int) -> Cursor:
        """A stream's start at ``{"offset": N}``: after the final events below it."""
        final = self._events_plan(START)
        if final.cursor.next < offset:
            raise ConfigurationError(
                f'startingOffsets {{"offset": {offset}}} is past the group\'s final order '
                f"({final.cursor.next} events)"
            )
        below = sum(max(0, min(run[5], offset - run[6])) for run in final.runs)
        return self._events_plan(START, limit=below).cursor

    def _events_plan(self, start: Cursor, limit: int | None = None) -> Plan:
        return _plan_events(self.options, start, final_only=True, limit=limit)

    def prepareForTriggerAvailableNow(self) -> None:
        if not self.options.per_node:
            self._events_target = self._events_plan(self._events_cursor or START).cursor
            return
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
        if not self.options.per_node:
            return self._latest_events(start, limit)
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
        elif self._delay(sum(avail[n] - begin[n] for n in avail)):
            return to_json(given)  # fewer than minOffsetsPerTrigger: no micro-batch yet
        end = avail if max_rows is None else limit_offsets(begin, avail, max_rows)
        result = {**given, **end}  # nodes whose directory vanished keep their offsets
        self._cursor = result
        return to_json(result)

    def _latest_events(self, start: dict[str, Any] | None, limit: Any) -> dict[str, Any]:
        if start is None:
            given = self._events_cursor or START
            max_rows = self.options.max_offsets_per_trigger
        else:
            given = Cursor.from_json(start)
            max_rows = getattr(limit, "max_rows", None)
        upto = self._events_target  # trigger(availableNow=True): what was there at start
        result = _plan_events(
            self.options, given, final_only=upto is None, limit=max_rows, upto=upto
        )
        backlog = result.cursor.next - given.next if result.runs else 0
        if self._delay(backlog):
            return given.to_json()
        self._events_cursor = result.cursor
        return result.cursor.to_json()

    def _delay(self, backlog: int) -> bool:
        """Kafka's ``minOffsetsPerTrigger``: wait while fewer records are available,
        unless ``maxTriggerDelay`` passed since the last micro-batch was planned.
        ``trigger(availableNow=True)`` never waits."""
        least = self.options.min_offsets_per_trigger
        if least is None or backlog == 0:
            return False
        now = self._clock()
        overdue = (
            self._last_trigger is None
            or (now - self._last_trigger) * 1000 >= self.options.max_trigger_delay_ms
        )
        if backlog < least and not overdue:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict[str, Any]:
        if not self.options.per_node:
            return self._events_plan(self._events_cursor or START).cursor.to_json()
        return to_json({n: end for n, (_, end) in self._planner.bounds().items()})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if not self.options.per_node:
            upto = Cursor.from_json(end)
            since = Cursor.from_json(start)
            if upto.after is None or upto.after == since.after:
                return []
            runs = _plan_events(self.options, since, final_only=False, upto=upto).runs
            return events_partitions(self.options, runs)
        bounds = self._planner.bounds()
        stop = from_json(end)
        begin = from_json(start)
        first = {n: begin.get(n, bounds.get(n, (0, 0))[0]) for n in stop}
        first = self._planner.check_start(first, bounds)
        stop = {n: max(first[n], stop[n]) for n in stop}
        opts = self.options
        return pack(opts.path, first, stop, opts.max_records_per_partition, opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, self.columns, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: logs are never deleted by the reader."""


class EptoDataSource(DataSource):
    """The ``epto`` format: delivery logs as rows (schema :data:`SCHEMA_DDL`).

    ``.schema("node BIGINT, offset BIGINT")`` (any subset of the columns) reads
    only those columns: Spark's Python data sources do not prune columns
    themselves, so this is how a query skips decoding payloads."""

    @classmethod
    def name(cls) -> str:
        return "epto"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> EptoBatchReader:
        kind = EptoFilteringReader if planned_with_pushdown() else EptoBatchReader
        return kind(parse_options(self.options, streaming=False), columns_of(schema))

    def streamReader(self, schema: StructType) -> EptoStreamReader:
        return EptoStreamReader(parse_options(self.options, streaming=True), columns_of(schema))
