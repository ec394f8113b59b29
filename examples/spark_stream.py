"""A running EpTO group streaming its deliveries into Spark Structured Streaming.

The group is a small in-process loop of ``epto.Process`` objects driven in
real time (a background thread; every ball reaches its destinations at the
next round, a lossless lockstep network) that writes one delivery log per
process with wall-clock timestamps. A Structured Streaming query reads the
logs with the ``epto`` source and counts deliveries per source (and their mean
delay) in 2-second windows of ``delivered_at``, with a watermark and a checkpoint; run it twice
with the same ``--checkpoint`` and the second run continues where the first
stopped.

    python examples/spark_stream.py --seconds 30
    python examples/spark_stream.py --master spark://host:7077 --logs /shared/logs

Needs ``pip install 'epto[spark]'`` and Java 17.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

import epto
import epto.spark
import epto.wire
from epto.log import DeliveryLogs, micros


def run_group(
    root: Path, n: int, rate: float, stop: threading.Event, *, round_seconds: float = 0.1
) -> None:
    """Broadcast ``rate`` events per second from random processes until ``stop``."""
    config = epto.Config.for_group(n, round_interval=round_seconds)
    membership = epto.Membership(range(n))
    rng = random.Random(7)
    procs = [
        epto.Process(
            pid,
            config,
            peers=epto.FullView(pid, membership),
            rng=random.Random(rng.random()),
            now=time.time(),
        )
        for pid in range(n)
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
                procs[dest].receive(src, ball, now)
            inflight = []
            for _ in range(rng.randint(0, round(2 * rate * round_seconds))):
                p = procs[rng.randrange(n)]
                eid = p.broadcast(f"event {counter}".encode(), now)
                sent[eid] = micros(now)
                counter += 1
            for p in procs:
                p.handle_timer(now)
                inflight += [(p.pid, d, b) for d, b in p.messages_to_send()]
                for d in p.deliveries():
                    logs.write(p.pid, d, delivered_at=micros(now), broadcast_at=sent[d.event.id])


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
    logs = args.logs or work / "logs"
    checkpoint = args.checkpoint or work / "checkpoint"
    logs.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    group = threading.Thread(
        target=run_group, args=(logs, args.processes, args.rate, stop), daemon=True
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
            f"holes {summary['holes']['total']}"
        )
        spark.stop()


if __name__ == "__main__":
    main()
