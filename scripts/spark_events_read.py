"""Read cost of the Spark source's two row modes (docs/spark.md, "One row per
event"): ``rows=events`` (the default: the group's order once) against
``rows=per-node`` (every node's log), on ``--nodes`` logs that hold the same
order of ``--events`` events each; best wall time of three runs of
``count()`` and of a read of every column (a ``noop`` write)::

    python scripts/spark_events_read.py --events 200000 --nodes 3

Wall-clock figures; on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import epto.spark
from epto.log import DeliveryLogWriter


def write_logs(root: Path, events: int, nodes: int) -> None:
    for node in range(nodes):
        with DeliveryLogWriter(root, node, flush_every=4096) as w:
            for k in range(events):
                w.append_fields(
                    source=k % 7, seq=k // 7, ts=k + 1, payload=b"x" * 32, delivered_at=k
                )


def best(action: Any, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="epto-events-read-"))
    try:
        write_logs(root, args.events, args.nodes)
        spark = epto.spark.session(args.master)
        spark.sparkContext.setLogLevel("ERROR")
        for rows in ("per-node", "events"):
            df = spark.read.format("epto").option("rows", rows).load(str(root))
            counted = best(df.count)
            every = best(lambda d=df: d.write.format("noop").mode("overwrite").save())
            print(
                f"rows={rows:<9} {df.count():>9,} rows: count() {counted:.2f} s, "
                f"every column {every:.2f} s (best wall of 3)"
            )
        print(f"load average {os.getloadavg()[0]:.1f}")
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
