"""``df.write.format("epto")`` and ``df.writeStream.format("epto")``: broadcast rows.

Each Spark task connects to a :class:`~epto.spark.Gateway` (option
``gateway``, ``host:port``), sends its partition's ``value`` column packed
into sink events, and succeeds once the gateway's node delivered all of them.
A row's identity is (stream, batch, partition, row number): the stream is the
streaming query's id (``streamId`` overrides it) or, for a batch write, an id
drawn once per write on the driver; the batch is the micro-batch id (0 for a
batch write). Members de-duplicate with :class:`~epto.spark.SinkRows`.
docs/spark-sink.md has the guarantees.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ._client import MAX_TOKEN, GatewayClient, parse_address, send_rows
from ._rows import MAX_STREAM_ID
from ._source import EptoDataSource as _LogSource

QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


class SinkCommitMessage(WriterCommitMessage):
    """What one task sent: its partition, attempt, rows and events."""

    def __init__(self, partition: int, attempt: int, rows: int, events: int) -> None:
        self.partition = partition
        self.attempt = attempt
        self.rows = rows
        self.events = events


class _Settings:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.gateway = options.get("gateway")
        if not self.gateway:
            raise ValueError('the epto sink needs .option("gateway", "host:port")')
        parse_address(self.gateway)  # on the driver, before any task starts
        self.token = options.get("token", "").encode()
        if len(self.token) > MAX_TOKEN:
            # The gateway would refuse its frame as too large, in every task.
            raise ValueError(f"the epto sink's token has at most {MAX_TOKEN} bytes")
        timeout = options.get("timeout", "60")
        try:
            self.timeout = float(timeout)
        except ValueError:
            self.timeout = math.nan
        if not 0 < self.timeout < math.inf:
            raise ValueError(
                f"the epto sink's timeout must be a positive number of seconds, not {timeout!r}"
            )
        self.stream = options.get("streamId")
        if self.stream is not None and not 0 < len(self.stream.encode()) <= MAX_STREAM_ID:
            raise ValueError(f"streamId must have 1 to {MAX_STREAM_ID} bytes")
        fields = {f.name: f for f in schema.fields}
        value = fields.get("value")
        if value is None or not isinstance(value.dataType, BinaryType | StringType):
            raise ValueError(
                "the epto sink writes a column named 'value' of type BINARY or STRING; "
                f"the DataFrame has {schema.simpleString()}"
            )
        self.index = schema.fieldNames().index("value")


def _values(rows: Iterator[Any], index: int) -> Iterator[bytes]:
    for row in rows:
        value = row[index]
        if value is None:
            raise ValueError("the epto sink cannot broadcast a NULL value")
        yield value.encode() if isinstance(value, str) else bytes(value)


def _write(settings: _Settings, stream: str, batch: int, rows: Iterator[Any]) -> SinkCommitMessage:
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    assert settings.gateway is not None
    with GatewayClient(settings.gateway, token=settings.token, timeout=settings.timeout) as client:
        count = send_rows(client, stream, batch, partition, _values(rows, settings.index))
        return SinkCommitMessage(partition, attempt, count, client.events)


class SinkWriter(DataSourceWriter):
    """A batch write: one stream id for the whole write, batch 0."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = _Settings(options, schema)
        self.stream = self.settings.stream or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return _write(self.settings, self.stream, 0, iterator)


class SinkStreamWriter(DataSourceStreamWriter):
    """A streaming write: the query's id and the micro-batch id name the rows."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = _Settings(options, schema)

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty(QUERY_ID) if ctx is not None else None
        batch = ctx.getLocalProperty(BATCH_ID) if ctx is not None else None
        if batch is None or (query is None and self.settings.stream is None):
            raise RuntimeError("the epto sink found no streaming query or batch id in the task")
        return _write(self.settings, self.settings.stream or str(query), int(batch), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every row was delivered when its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be taken back: rows of finished tasks were delivered."""


class EptoDataSource(_LogSource):
    """The ``epto`` format: reads delivery logs, writes rows into a group."""

    def writer(self, schema: StructType, overwrite: bool) -> SinkWriter:
        return SinkWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> SinkStreamWriter:
        return SinkStreamWriter(self.options, schema)
