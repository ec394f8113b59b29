"""A running EpTO group streaming its deliveries into Spark Structured Streaming.

The group is a small in-process loop of ``epto.epidemic.Process`` objects driven in
real time (a background thread; every ball reaches its destinations at the
next round, a lossless lockstep network) that writes one delivery log per
process with wall-clock timestamps. A Structured Streaming query reads the
logs with the ``epto`` source and counts deliveries per source (and their mean
delay) in 2-second windows of ``delivered_at``, with a watermark and a checkpoint.

Run it twice with the same ``--logs`` and ``--checkpoint`` and the second run
continues: the group appends to the same logs with new event ids (its
processes take source ids after every source already in the logs; a log
directory is still one member, 0 .. N-1), and the query reads only what was
appended since. A checkpoint remembers its log directory; given with other
logs, the example stops with a one-line error instead of Spark's.

    python examples/spark_stream.py --seconds 30
    python examples/spark_stream.py --logs /tmp/l --checkpoint /tmp/c   # twice
    python examples/spark_stream.py --master spark://host:7077 --logs /shared/logs

Needs ``pip install 'epto[spark]'`` and Java 17.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import epto
import epto.epidemic
import epto.spark
import epto.wire
from epto.log import DeliveryLogs, list_nodes, micros, read_log

MARKER = "epto-logs"
"""The file in a checkpoint that names the log directory it reads."""


def next_source(root: Path) -> int:
    """One above every source already in the logs (0 for new logs)."""
    sources = [r.source for node in list_nodes(root) for r in read_log(root / str(node))]
    return max(sources, default=-1) + 1


def claim_checkpoint(checkpoint: Path, logs: Path) -> str | None:
    """Tie ``checkpoint`` to ``logs``; the reason it cannot be used, if any."""
    marker = checkpoint / MARKER
    if marker.exists():
        owner = marker.read_text().strip()
        if owner != str(logs):
            return f"checkpoint {checkpoint} belongs to the logs in {owner}, not {logs}"
        return None
    if checkpoint.exists() and any(checkpoint.iterdir()):
        return f"checkpoint {checkpoint} was not written by this example (no {MARKER} file)"
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{logs}\n")
    return None


def run_group(
    root: Path,
    n: int,
    rate: float,
    stop: threading.Event,
    *,
    round_seconds: float = 0.1,
    first_source: int = 0,
) -> None:
    """Broadcast ``rate`` events per second from random processes until ``stop``.

    Process ``k`` logs into directory ``k`` and broadcasts as source
    ``first_source + k``, so a later run (a larger ``first_source``) appends
    events with new ids to the same logs.
    """
    config = epto.Config.for_group(n, round_interval=round_seconds)
    membership = epto.epidemic.Membership(range(first_source, first_source + n))
    rng = random.Random(7 + first_source)
    procs = [
        epto.epidemic.Process(
            first_source + k,
            config,
            peers=epto.epidemic.FullView(first_source + k, membership),
            rng=random.Random(rng.random()),
            now=time.time(),
        )
        for k in range(n)
    ]
    sent: dict[epto.EventId, int] = {}
    inflight: list[tuple[int, int, epto.wire.Ball]] = []
    counter = 0
    # flush_every=1: each delivery reaches the OS at once, so Spark sees it.
    with DeliveryLogs(root, flush_every=1) as logs:
        next_round = time.time()
        while not stop.is_set():
            next_round += round_seconds
            time.sleep(max(0.0, next_round - time.time()))
            now = time.time()
            for src, dest, ball in inflight:
                procs[dest - first_source].receive(src, ball, now)
            inflight = []
            for _ in range(rng.randint(0, round(2 * rate * round_seconds))):
                p = procs[rng.randrange(n)]
                eid = p.broadcast(f"event {counter}".encode(), now)
                sent[eid] = micros(now)
                counter += 1
            for k, p in enumerate(procs):
                p.handle_timer(now)
                inflight += [(p.pid, d, b) for d, b in p.messages_to_send()]
                for d in p.deliveries():
                    logs.write(k, d, delivered_at=micros(now), broadcast_at=sent[d.event.id])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rate", type=float, default=20.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to run")
    parser.add_argument("--logs", type=Path, help="log directory (default: a temporary one)")
    parser.add_argument("--checkpoint", type=Path, help="checkpoint directory")
    parser.add_argument("--master", help="Spark master URL (default: local[2])")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="epto-stream-"))
    logs = (args.logs or work / "logs").resolve()
    checkpoint = (args.checkpoint or work / "checkpoint").resolve()
    problem = claim_checkpoint(checkpoint, logs)
    if problem:
        sys.exit(f"spark_stream.py: {problem}; pass a new --checkpoint")
    logs.mkdir(parents=True, exist_ok=True)
    first = next_source(logs)
    stop = threading.Event()
    group = threading.Thread(
        target=run_group,
        args=(logs, args.processes, args.rate, stop),
        kwargs={"first_source": first},
        daemon=True,
    )
    group.start()

    spark = epto.spark.session(args.master, app_name="epto-stream")
    spark.sparkContext.setLogLevel("ERROR")
    from pyspark.sql import functions as F

    deliveries = (
        spark.readStream.format("epto")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .load(str(logs))
    )
    delay_ms = (F.unix_micros("delivered_at") - F.unix_micros("broadcast_at")) / 1000
    counts = (
        deliveries.withWatermark("delivered_at", "4 seconds")
        .groupBy(F.window("delivered_at", "2 seconds"), "source")
        .agg(
            F.count("*").alias("deliveries"),
            F.round(F.avg(delay_ms), 1).alias("mean_delay_ms"),
        )
    )
    query = (
        counts.writeStream.outputMode("update")
        .format("console")
        .option("truncate", "false")
        .option("numRows", "40")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="2 seconds")
        .start()
    )
    print(f"logs in {logs}, checkpoint in {checkpoint}; running {args.seconds:g} s")
    if first:
        print(f"continuing: these processes broadcast as sources {first} and up")
    try:
        # Run for the time asked, and at least until three micro-batches ran
        # (starting a query takes a while on a busy machine), at most 5 minutes.
        started = time.time()
        while time.time() < started + 300 and (
            time.time() < started + args.seconds
            or sum(1 for p in query.recentProgress if p["numInputRows"]) < 3
        ):
            query.awaitTermination(1)
    finally:
        query.stop()
        stop.set()
        group.join()
        summary = epto.spark.analyze(logs, spark=spark)
        print(
            f"{summary['deliveries']} deliveries of {summary['events']} events; "
            f"total order {'ok' if summary['order']['ok'] else 'VIOLATED'}; "
            f"duplicates {summary['integrity']['duplicates']}; "
            f"holes {summary['holes']['total']}"
        )
        spark.stop()


if __name__ == "__main__":
    main()
