"""Verifying and measuring delivery logs on Spark.

Total order: the distinct "a right before b" pairs of in-order deliveries are
reduced on Spark, and the driver decides acyclicity on what is left. An edge
whose ends increase in the key ``(ts, source, seq)`` is "forward"; a graph of
forward edges only is acyclic (the key is a topological order). A cycle needs
at least one backward edge; its largest-key event starts a backward edge and
its smallest-key event ends one, so every event of every cycle lies in
``[min target of a backward edge, max source of a backward edge]``. Only the
edges inside that interval go to the driver, where
:func:`epto.check.find_cycles` finds one witnessed cycle per strongly
connected component: the same cycles as on the whole graph. A correct EpTO
run delivers in key order, so nothing is collected at all. (If one event id
appears with two timestamps the key is not a function of the event, and every
edge goes to the driver.)
"""

from __future__ import annotations

import os
import time
from typing import Any

from .._delivery_check import find_cycles
from ..log import list_nodes, node_directory
from ..log._broadcasts import MANIFEST
from ..log._log_check import data_loss
from ..log._summary import (
    EXAMPLES,
    HISTOGRAM_BINS,
    histogram_edges,
    holes_section,
    integrity_section,
    order_section,
    summary,
    verdict_text,
    write_outputs,
)
from ._columnar import extent
from ._jvm import FORMAT as JVM_FORMAT
from ._jvm import reader_error
from ._session import register, session

MISSING_SAMPLE_NODES = 100
ROWS_PER_SHUFFLE_PARTITION = 1_000_000


def analyze(
    logdir: str | os.PathLike[str],
    *,
    master: str | None = None,
    out: str | os.PathLike[str] | None = None,
    spark: Any = None,
    plot: bool = True,
) -> dict[str, Any]:
    """Analyse a directory of delivery logs on Spark; returns the summary dict.

    ``master``: a Spark master URL (default: ``local[2]`` in this process,
    bound to 127.0.0.1; without a master, a session already active in this
    process is used). ``spark``: an existing session to use instead (it is
    left running). ``out``: a directory for ``summary.json`` and
    ``analysis.png``. The summary has the same shape as ``epto check``'s.

    Data loss raises, as ``epto check`` does, rather than counting what is
    left as if it were everything: :class:`~epto.log.LogGapError` (or
    :class:`~epto.log.LogTailLostError`) when a log's extent shows it (records
    before its first segment, a lost tail; checked before Spark starts), and
    the reader's ``DataLossError`` when a segment in the middle is missing.
    """
    started = time.perf_counter()
    loss = data_loss(logdir)
    if loss is not None:
        raise loss
    if spark is None and master is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    own = spark is None
    if own:
        spark = session(master, app_name="epto-analyze")
    else:
        register(spark)
    root = os.path.abspath(logdir)
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    spark.conf.set(key, str(shuffle_partitions(root, spark.sparkContext.defaultParallelism)))
    try:
        result, histogram = _run(spark, root)
    except Exception as exc:
        error = reader_error(exc)  # the JVM reader's error inside Spark's job failure
        if error is None:
            raise
        raise error from None
    finally:
        spark.conf.set(key, before)
        if own:
            spark.stop()
    result["seconds"] = round(time.perf_counter() - started, 3)
    if out is not None:
        write_outputs(result, out, histogram=histogram, plot=plot)
    return result


def shuffle_partitions(root: str, parallelism: int) -> int:
    """Shuffle partitions for an analysis of ``root``: one per
    :data:`ROWS_PER_SHUFFLE_PARTITION` records, at least the cluster's default
    parallelism (Spark's own default, 200, is far too many for small logs and
    too few for billions of records). Counted from the logs' extents, which
    reads only each node's last segment."""
    records = 0
    for node in list_nodes(root):
        held = extent(node_directory(root, node))
        records += max(held.end, held.durable_end or 0) - held.first
    return max(1, parallelism, -(-records // ROWS_PER_SHUFFLE_PARTITION))


def _run(spark: Any, root: str) -> tuple[dict[str, Any], list[tuple[float, int]]]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # Only these columns are decoded (a schema given to the Python source prunes
    # the rest; the JVM reader prunes to the columns each job uses).
    cols = "node BIGINT, offset BIGINT, source BIGINT, seq BIGINT, ts BIGINT, tag STRING, "
    schema = cols + "delivered_at TIMESTAMP, broadcast_at TIMESTAMP"
    try:  # the JVM reader when the session has it (epto.spark.session() loads it)
        base = spark.read.format(JVM_FORMAT).schema(schema).load(root)
    except Exception as exc:
        if "DATA_SOURCE_NOT_FOUND" not in str(exc):
            raise
        # No epto-jvm jar on this session's classpath (no javac where it was built).
        reader = spark.read.format("epto").option("rows", "per-node")  # nodes against each other
        base = reader.schema(schema).load(root)
    base = base.persist(StorageLevel.MEMORY_AND_DISK)
    manifest_path = os.path.join(root, MANIFEST)
    manifest = None
    if os.path.exists(manifest_path):
        # The header's names, so Spark's CSV header check stays quiet; the
        # time is renamed to keep it apart from the logs' broadcast_at column.
        manifest = spark.read.csv(
            manifest_path, header=True, schema="source BIGINT, seq BIGINT, broadcast_at BIGINT"
        ).withColumnRenamed("broadcast_at", "sent")
    try:
        # Integrity and holes: one row per (node, event) with its count.
        per_event = base.groupBy("node", "source", "seq").agg(
            F.count("*").alias("c"),
            F.sum(F.when(F.col("tag") == "out-of-order", 1).otherwise(0)).alias("ooo"),
            F.min("ts").alias("ts_lo"),
            F.max("ts").alias("ts_hi"),
        )
        per_event = per_event.persist(StorageLevel.MEMORY_AND_DISK)
        events_df = per_event.groupBy("source", "seq").agg(
            (F.min("ts_lo") != F.max("ts_hi")).alias("conflict")
        )
        ev = events_df.agg(
            F.count("*").alias("n"), F.sum(F.col("conflict").cast("long")).alias("conflicts")
        ).first()
        events, conflicts = int(ev["n"]), int(ev["conflicts"] or 0)
        node_rows = (
            per_event.groupBy("node")
            .agg(
                F.count("*").alias("distinct"),
                F.sum("c").alias("deliveries"),
                F.sum("ooo").alias("ooo"),
                F.sum(F.col("c") - 1).alias("dups"),
            )
            .collect()
        )
        deliveries = sum(int(r["deliveries"]) for r in node_rows)
        out_of_order = sum(int(r["ooo"]) for r in node_rows)
        nodes = sorted(int(r["node"]) for r in node_rows)
        holes = {int(r["node"]): events - int(r["distinct"]) for r in node_rows}
        duplicates = sum(int(r["dups"]) for r in node_rows)
        found = [
            ("duplicate", int(r["node"]), (int(r["source"]), int(r["seq"])), int(r["c"]) - 1)
            for r in per_event.filter("c > 1")
            .orderBy("node", "source", "seq")
            .limit(EXAMPLES)
            .collect()
        ]
        never: int | None = None
        if manifest is not None:
            lost = per_event.join(manifest, ["source", "seq"], "left_anti")
            never = lost.count()
            found += [
                ("never-broadcast", int(r["node"]), (int(r["source"]), int(r["seq"])), 1)
                for r in lost.orderBy("node", "source", "seq").limit(EXAMPLES).collect()
            ]
        missing = _missing_sample(spark, per_event, events_df, holes)

        order = _order(base, conflicts)
        delay, histogram = _delays(base, manifest)
    finally:
        base.unpersist()
        if "per_event" in locals():
            per_event.unpersist()
    result = summary(
        root=root,
        nodes=len(nodes),
        deliveries=deliveries,
        events=events,
        out_of_order=out_of_order,
        order=order,
        integrity=integrity_section(found, duplicates=duplicates, never_broadcast=never),
        holes=holes_section(holes, missing),
        delay_ms=delay,
        engine=f"spark {spark.version} ({spark.sparkContext.master})",
    )
    return result, histogram


def _missing_sample(
    spark: Any, per_event: Any, events_df: Any, holes: dict[int, int]
) -> dict[int, list[tuple[int, int]]]:
    """Up to ten missing events (smallest ids) for up to 100 nodes with holes."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lacking = sorted(n for n, h in holes.items() if h)[:MISSING_SAMPLE_NODES]
    if not lacking:
        return {}
    who = spark.createDataFrame([(n,) for n in lacking], "node BIGINT")
    absent = (
        events_df.select("source", "seq")
        .crossJoin(who)
        .join(per_event.select("node", "source", "seq"), ["node", "source", "seq"], "left_anti")
    )
    w = Window.partitionBy("node").orderBy("source", "seq")
    rows = absent.withColumn("r", F.row_number().over(w)).filter("r <= 10").collect()
    out: dict[int, list[tuple[int, int]]] = {}
    for r in sorted(rows, key=lambda r: (r["node"], r["source"], r["seq"])):
        out.setdefault(int(r["node"]), []).append((int(r["source"]), int(r["seq"])))
    return out


def _order(base: Any, conflicts: int) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("node").orderBy("offset")
    pairs = (
        base.filter(F.col("tag") == "in-order")
        .select(
            "node",
            F.lag("source").over(w).alias("ps"),
            F.lag("seq").over(w).alias("pq"),
            F.lag("ts").over(w).alias("pt"),
            "source",
            "seq",
            "ts",
        )
        .filter(F.col("ps").isNotNull())
        .filter((F.col("ps") != F.col("source")) | (F.col("pq") != F.col("seq")))
    )
    edges = pairs.groupBy("ps", "pq", "pt", "source", "seq", "ts").agg(
        F.min("node").alias("witness")
    )
    edges = edges.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        src = F.struct("pt", "ps", "pq")
        dst = F.struct("ts", "source", "seq")
        back = src > dst
        stats = edges.agg(
            F.count("*").alias("distinct"),
            F.sum(back.cast("long")).alias("n"),
            F.min(F.when(back, dst)).alias("lo"),
            F.max(F.when(back, src)).alias("hi"),
        ).first()
        n_backward = int(stats["n"] or 0)
        distinct = int(stats["distinct"])
        if conflicts:
            kept = edges
        elif n_backward == 0:
            kept = None
        else:
            lo, hi = stats["lo"], stats["hi"]
            lo_c = F.struct(*(F.lit(int(v)).cast("long") for v in lo))
            hi_c = F.struct(*(F.lit(int(v)).cast("long") for v in hi))
            kept = edges.filter((src >= lo_c) & (src <= hi_c) & (dst >= lo_c) & (dst <= hi_c))
        graph: dict[tuple[tuple[int, int], tuple[int, int]], int] = {}
        if kept is not None:
            rows = kept.orderBy("pt", "ps", "pq", "ts", "source", "seq").toLocalIterator()
            for r in rows:
                key = ((int(r["ps"]), int(r["pq"])), (int(r["source"]), int(r["seq"])))
                graph[key] = min(graph.get(key, r["witness"]), int(r["witness"]))
    finally:
        edges.unpersist()
    return order_section(
        find_cycles(graph),
        distinct_edges=distinct,
        backward_edges=n_backward,
        edges_to_driver=len(graph),
    )


def _delays(base: Any, manifest: Any) -> tuple[dict[str, Any] | None, list[tuple[float, int]]]:
    from pyspark.sql import functions as F

    sent = F.unix_micros("broadcast_at")
    frame = base
    if manifest is not None:
        frame = base.join(F.broadcast(manifest), ["source", "seq"], "left")
        sent = F.coalesce(sent, F.col("sent"))
    delays = frame.select(((F.unix_micros("delivered_at") - sent) / 1000.0).alias("d")).filter(
        F.col("d").isNotNull()
    )
    stats = delays.agg(
        F.count("*").alias("count"),
        F.avg("d").alias("mean"),
        F.min("d").alias("min"),
        F.max("d").alias("max"),
        F.percentile_approx("d", [0.5, 0.9, 0.99], 10000).alias("q"),
    ).first()
    if not stats["count"]:
        return None, []
    lo, width = histogram_edges(float(stats["min"]), float(stats["max"]))
    bucket = F.least(F.floor((F.col("d") - lo) / width), F.lit(HISTOGRAM_BINS - 1))
    hist = delays.groupBy(bucket.alias("b")).count().collect()
    histogram = sorted((lo + int(r["b"]) * width, int(r["count"])) for r in hist)
    q = stats["q"]
    return {
        "count": int(stats["count"]),
        "mean": float(stats["mean"]),
        "min": float(stats["min"]),
        "p50": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "max": float(stats["max"]),
    }, histogram


def main_text(result: dict[str, Any]) -> str:
    return verdict_text(result) + f"\nanalysis took {result['seconds']:.1f} s"
