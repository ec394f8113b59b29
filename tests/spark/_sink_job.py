"""A streaming query that writes rows into a group through the ``epto`` sink.

Run in its own process (``local[2,4]``: two cores, a task may fail three
times) by tests/spark/test_sink.py::

    python _sink_job.py GATEWAY WORKDIR ROWS FILES FAIL_AT

It writes ``FILES`` parquet files of consecutive numbers ``0 .. ROWS-1``,
streams them two files per micro-batch into the sink (``value`` is the number
as text, zero-padded), with a UDF that raises on its first attempt at the
number ``FAIL_AT`` (-1: never), and prints one JSON line: the query's id,
the batches and the rows per batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    gateway, work, rows, files, fail_at = sys.argv[1:6]
    total, nfiles, fail = int(rows), int(files), int(fail_at)
    import epto.spark

    spark = epto.spark.session(
        "local[2,4]", app_name="epto-sink-test", **{"spark.sql.shuffle.partitions": "2"}
    )
    spark.sparkContext.setLogLevel("OFF")
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    source = Path(work) / "numbers"
    per = total // nfiles
    for i in range(nfiles):
        hi = total if i == nfiles - 1 else (i + 1) * per
        spark.range(i * per, hi, numPartitions=1).write.parquet(str(source / f"part-{i:03d}"))
    inputs = Path(work) / "input"
    inputs.mkdir()
    for i in range(nfiles):
        (f,) = (source / f"part-{i:03d}").glob("*.parquet")
        f.rename(inputs / f"{i:03d}.parquet")

    @F.udf("string")  # type: ignore[misc]
    def text(n: int) -> str:
        ctx = TaskContext.get()
        if n == fail and ctx is not None and ctx.attemptNumber() == 0:
            raise RuntimeError(f"injected failure at {n}")
        return f"{n:07d}"

    stream = (
        spark.readStream.schema("id BIGINT")
        .option("maxFilesPerTrigger", "2")
        .parquet(str(inputs))
        .select(text("id").alias("value"))
    )
    query = (
        stream.writeStream.format("epto")
        .option("gateway", gateway)
        .option("timeout", "60")
        .option("checkpointLocation", str(Path(work) / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    progress = [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]
    query.stop()
    print(json.dumps({"id": str(query.id), "progress": progress}))
    spark.stop()


if __name__ == "__main__":
    main()
