"""The driver of tests/spark/test_standalone.py, run in its own process::

    python _cluster_job.py MASTER LOGDIR OUTDIR [LOGSERVER TOKEN]

It prints one JSON object: the batch read's records (through the Python
source and through the JVM reader), where the workers
imported ``epto`` from, and the rows a streaming query (delivery logs to
parquet files, with a checkpoint, ``availableNow``) wrote after its first run
and after a restart from its checkpoint, with five records appended to every
log in between. With a log server's address and token, a second streaming
query reads the group's order (``rows=events``) through it
(``epto.servers``), over the same two runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = ["node", "offset", "source", "seq", "ts", "tag", "payload"]


def stream_once(spark: Any, logdir: str, out: Path) -> list[list[Any]]:
    from pyspark.sql import functions as F

    query = (
        spark.readStream.format("epto")
        .option("rows", "per-node")
        .option("startingOffsets", "earliest")
        .load(logdir)
        .select(*COLUMNS)
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    query.stop()
    rows = spark.read.parquet(str(out / "data")).select(
        *COLUMNS[:6], F.lower(F.hex("payload")).alias("payload")
    )
    return [list(r) for r in rows.collect()]


def stream_network(spark: Any, server: str, token: str, out: Path) -> list[list[Any]]:
    query = (
        spark.readStream.format("epto")
        .option("epto.servers", server)
        .option("epto.token", token)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25")
        .load()
        .select("offset", "source", "seq")
        .writeStream.format("parquet")
        .option("path", str(out / "net-data"))
        .option("checkpointLocation", str(out / "net-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    query.stop()
    rows = spark.read.parquet(str(out / "net-data")).orderBy("offset")
    return [list(r) for r in rows.collect()]


def main() -> None:
    master, logdir, outdir = sys.argv[1:4]
    server, token = [*sys.argv[4:6], "", ""][:2]
    import epto
    import epto.spark
    from epto.log import DeliveryLogWriter, list_nodes

    spark = epto.spark.session(master, app_name="epto-standalone")
    spark.sparkContext.setLogLevel("ERROR")

    df = spark.read.format("epto").option("rows", "per-node").load(logdir)
    batch = [[*r[:6], bytes(r[6]).hex()] for r in df.select(*COLUMNS).collect()]
    # The JVM reader, shipped to the executors in spark.jars by session()
    # (not there without javac: then the Python source's rows stand in).
    jvm_batch = batch
    if epto.spark.jvm_jar() is not None:
        jvm = spark.read.format("epto-jvm").load(logdir).select(*COLUMNS)
        jvm_batch = [[*r[:6], bytes(r[6]).hex()] for r in jvm.collect()]

    def where(_: object) -> str:
        import epto

        return str(epto.__file__)

    imported = spark.sparkContext.parallelize([0], 1).map(where).collect()
    first = stream_once(spark, logdir, Path(outdir))
    net_first = stream_network(spark, server, token, Path(outdir)) if server else []
    for node in list_nodes(logdir):
        with DeliveryLogWriter(logdir, node) as w:
            for i in range(5):
                w.append_fields(source=7, seq=i, ts=10**6 + i, payload=b"late", delivered_at=1)
    second = stream_once(spark, logdir, Path(outdir))
    net_second = stream_network(spark, server, token, Path(outdir)) if server else []
    events = spark.read.format("epto").load(logdir).select("offset", "source", "seq")
    print(
        json.dumps(
            {
                "batch": batch,
                "jvm_batch": jvm_batch,
                "workers_import": imported,
                "driver": epto.__file__,
                "first": first,
                "second": second,
                "net_first": net_first,
                "net_second": net_second,
                "events": [list(r) for r in events.collect()],
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
