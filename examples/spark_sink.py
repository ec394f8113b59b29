"""Spark writes rows into a running group: the ``epto`` sink and its gateway.

Starts a group of token-ring members on 127.0.0.1 (a trio loop in a
background thread; member 1 runs a :class:`epto.spark.Gateway` on a free
port), writes ``--rows`` rows of ``--row-bytes`` bytes with
``df.write.format("epto")`` (or, with ``--stream``, a streaming query over
parquet files, two files per micro-batch), waits until every member delivered
every row once (de-duplicated with :class:`epto.spark.SinkRows`) and prints
rows per second from the start of the write to the last member's last row
(after an untimed warm-up write of 1,000 rows).

    python examples/spark_sink.py --rows 100000
    python examples/spark_sink.py --rows 100000 --stream --master local[2]

Needs ``pip install 'epto[spark]'`` and Java 17.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio
from epto.transports import NodeConfig, open_node
from epto.transports._ports import free_ports

import epto.spark
from epto.tokenring import TokenRingConfig


def run_group(n: int, max_payload: int, ready: Any, stop: threading.Event) -> None:
    """Run ``n`` members until ``stop``; ``ready(gateway, rows)`` once listening."""
    members = {
        pid: f"127.0.0.1:{port}"
        for pid, port in enumerate(free_ports(n, socket.SOCK_STREAM), start=1)
    }
    rows = {pid: epto.spark.SinkRows() for pid in members}

    async def consume(pid: int, node: Any) -> None:
        async for delivery in node:
            rows[pid].feed(delivery.event.payload)

    async def main() -> None:
        ring = TokenRingConfig(heartbeat_interval=0.05, suspect_timeout=2.0, exclude_timeout=5.0)
        async with AsyncExitStack() as stack:
            nodes = {}
            for pid, address in members.items():
                config = NodeConfig(
                    pid=pid, bind=address, members=members, mode="token-ring", tokenring=ring
                )
                nodes[pid] = await stack.enter_async_context(open_node(config))
            async with trio.open_nursery() as nursery:
                gateway = epto.spark.Gateway(
                    nodes[1],
                    max_payload=max_payload,
                    on_delivery=lambda d: rows[1].feed(d.event.payload),
                )
                await nursery.start(gateway.run)
                for pid in range(2, n + 1):
                    nursery.start_soon(consume, pid, nodes[pid])
                ready(gateway, rows)
                while not stop.is_set():
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--row-bytes", type=int, default=100)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--max-payload", type=int, default=60_000, help="bytes per event")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--stream", action="store_true", help="a streaming query, not a batch")
    parser.add_argument("--master", help="Spark master URL (default: local[2])")
    args = parser.parse_args()

    started: dict[str, Any] = {}
    ready_event = threading.Event()
    stop = threading.Event()

    def ready(gateway: epto.spark.Gateway, rows: dict[int, epto.spark.SinkRows]) -> None:
        started.update(gateway=gateway, rows=rows)
        ready_event.set()

    group = threading.Thread(
        target=run_group, args=(args.members, args.max_payload, ready, stop), daemon=True
    )
    group.start()
    if not ready_event.wait(60):
        raise SystemExit("the group did not start")
    gateway, rows = started["gateway"], started["rows"]
    spark = epto.spark.session(args.master, app_name="epto-sink")
    spark.sparkContext.setLogLevel("ERROR")
    pad = "x" * max(0, args.row_bytes - 10)
    df = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(
        f"concat(lpad(cast(id as string), 10, '0'), '{pad}') as value"
    )

    def delivered(count: int) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all(r.statistics.rows >= count for r in rows.values()):
                return True
            time.sleep(0.01)
        return False

    try:
        # A first write warms Spark up (its Python workers, the data source's
        # planning); it is not timed.
        warm = 1000
        df.limit(warm).write.format("epto").option("gateway", gateway.address).mode("append").save()
        delivered(warm)
        if args.stream:
            work = Path(tempfile.mkdtemp(prefix="epto-sink-"))
            df.repartition(args.partitions * 4).write.parquet(str(work / "in"))
            t0 = time.perf_counter()
            query = (
                spark.readStream.schema("value STRING")
                .option("maxFilesPerTrigger", str(args.partitions))
                .parquet(str(work / "in"))
                .writeStream.format("epto")
                .option("gateway", gateway.address)
                .option("checkpointLocation", str(work / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
        else:
            t0 = time.perf_counter()
            df.write.format("epto").option("gateway", gateway.address).mode("append").save()
        delivered(warm + args.rows)
        elapsed = time.perf_counter() - t0
    finally:
        spark.stop()
        stop.set()
        group.join(30)
    per_member = {pid: r.statistics.rows - warm for pid, r in rows.items()}
    print(
        f"{args.rows} rows of {args.row_bytes} bytes into {args.members} members in "
        f"{elapsed:.1f} s: {args.rows / elapsed:,.0f} rows/s "
        f"({gateway.statistics.events} events); rows delivered per member {per_member}"
    )


if __name__ == "__main__":
    main()
