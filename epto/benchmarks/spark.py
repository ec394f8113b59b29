"""Delivery-log write rate, Spark batch read rate and ``epto analyze`` time.

1. The virtual-time simulator runs a group with ``--log-dir``-style logging
   (one log per process, a broadcast manifest): the simulator-generated log.
2. Its deliveries are read back and written again ``--tiles`` times, each
   tile shifted past the previous one in sequence numbers, timestamps and
   times, so that every node's log is a longer run with the same shape and a
   consistent total order: the large log (the simulator itself cannot reach
   ten million deliveries in minutes). The log writer's rate is timed here.
3. Spark reads the large log (every column, payloads included) and
   ``epto analyze`` runs on it; both are timed, as is ``epto check`` (Python)
   on the simulator-generated log.
4. The large log is written as Parquet, and the same rows are read by the
   Python source (``epto``), the JVM reader (``epto-jvm``) and Parquet
   (every column, one column, ``count()``), best of ``--repeats`` runs each.
5. The group's order (``rows=events``) is read from the files, through a log
   server over loopback TCP (``epto.servers``), and as Parquet.

Wall-clock figures; on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=100, help="simulated processes")
    parser.add_argument("--events", type=int, default=1000, help="simulated events")
    parser.add_argument("--tiles", type=int, default=100, help="copies in the large log")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--master", help="Spark master URL (default: local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    parser.add_argument("--skip-analyze", action="store_true")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each read in the comparison (best kept)"
    )


def simulate(root: Path, processes: int, events: int) -> float:
    from epto.log import SimulationLogger
    from epto.transports.simulation import (
        SimulationObserver,
        SimulationSpec,
        run_simulation,
    )

    spec = SimulationSpec(processes=processes, events=events, rounds=max(10, events // 25))
    started = time.perf_counter()
    with SimulationLogger(root, flush_every=256) as logger:
        # SimulationLogger has SimulationObserver's methods without subclassing it.
        result = run_simulation(spec, observers=[cast(SimulationObserver, logger)])
    elapsed = time.perf_counter() - started
    print(
        f"simulate: {processes} processes, {events} events, {result.deliveries} deliveries "
        f"in {elapsed:.1f} s (wall, logging included)"
    )
    return elapsed


def tile(src: Path, dst: Path, tiles: int) -> int:
    """Write ``tiles`` shifted copies of every node's log; returns records written."""
    from epto.log import DeliveryLogWriter, list_nodes, read_broadcasts, read_log
    from epto.log import write_broadcasts as write_manifest

    logs = {n: list(read_log(src / str(n))) for n in list_nodes(src)}
    records = [r for rs in logs.values() for r in rs]
    seq_span = max(r.seq for r in records) + 1
    ts_span = max(r.ts for r in records) + 1
    t0 = min(r.delivered_at for r in records)
    time_span = max(r.delivered_at for r in records) - t0 + 1_000_000
    written = 0
    started, cpu = time.perf_counter(), time.process_time()
    for node, rs in logs.items():
        with DeliveryLogWriter(dst, node, flush_every=256) as w:
            for k in range(tiles):
                dt = k * time_span
                for r in rs:
                    w.append_fields(
                        source=r.source,
                        seq=r.seq + k * seq_span,
                        ts=r.ts + k * ts_span,
                        payload=r.payload,
                        delivered_at=r.delivered_at + dt,
                        broadcast_at=None if r.broadcast_at is None else r.broadcast_at + dt,
                        out_of_order=r.tag.value == "out-of-order",
                    )
            written += w.next_index
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    manifest = read_broadcasts(src) or {}
    write_manifest(
        dst,
        (
            (s, q + k * seq_span, None if at is None else at + k * time_span)
            for k in range(tiles)
            for (s, q), at in manifest.items()
        ),
    )
    size = sum(p.stat().st_size for p in dst.rglob("*.seg"))
    print(
        f"log writer: {written} records ({size / 2**20:.0f} MiB) in {elapsed:.1f} s = "
        f"{written / elapsed:,.0f} records/s wall, {written / cpu:,.0f} records per CPU second "
        "(flush every 256, fsync on segment close)"
    )
    return written


def _children_cpu() -> float | None:
    """CPU seconds (user + system, reaped children included) of this
    process's descendants: the JVM pyspark launched and its Python workers.
    ``None`` without ``/proc``, or when nothing runs under this process (a
    session on a JVM started elsewhere)."""
    stats: dict[int, tuple[int, float]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except FileNotFoundError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    for entry in entries:
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        # After the name: state, ppid, ... utime (14th field), stime, cutime, cstime.
        cpu = sum(int(f) for f in fields[11:15]) / tick
        stats[int(entry)] = (int(fields[1]), cpu)
    total, found, todo = 0.0, False, [os.getpid()]
    while todo:
        pid = todo.pop()
        children = [child for child, (parent, _) in stats.items() if parent == pid]
        for child in children:
            total += stats[child][1]
            found = True
        todo += children
    return total if found else None


def compare_reads(spark: Any, logs: Path, parquet: Path, records: int, repeats: int) -> None:
    """The same rows read by the Python source (``epto``), the JVM reader
    (``epto-jvm``, when the session has it) and Parquet: every column (a
    ``noop`` write materialises them all), one column (``ts``), and
    ``count()``: the best wall-clock time of ``repeats`` runs, and the median
    CPU time of the Spark processes (the JVM and its Python workers, from
    ``/proc``), steadier than wall time on a shared machine. The Python source
    builds every column of its schema (Spark does not prune columns of Python
    sources), so the last two are also timed with a schema of one column
    given to it; the JVM reader prunes columns itself."""
    from pyspark.sql import functions as F

    epto_df = spark.read.format("epto").option("rows", "per-node").load(str(logs))
    epto_df.write.mode("overwrite").parquet(str(parquet))
    parquet_df = spark.read.parquet(str(parquet))
    try:
        jvm_df = spark.read.format("epto-jvm").load(str(logs))
        jvm_df.schema  # noqa: B018 - fails here when the session has no epto-jvm jar
    except Exception as exc:
        print(f"(no epto-jvm reader in this session: {type(exc).__name__})")
        jvm_df = None
    ts_only = (
        spark.read.format("epto").option("rows", "per-node").schema("ts BIGINT").load(str(logs))
    )
    node_only = (
        spark.read.format("epto").option("rows", "per-node").schema("node BIGINT").load(str(logs))
    )

    def sources(python: Any, with_jvm: bool = True) -> dict[str, Any]:
        out = {"epto": python}
        if with_jvm and jvm_df is not None:
            out["epto-jvm"] = jvm_df
        return out | {"parquet": parquet_df}

    reads: list[tuple[str, dict[str, Any], Callable[[Any], object]]] = [
        (
            "all columns",
            sources(epto_df),
            lambda df: df.write.format("noop").mode("overwrite").save(),
        ),
        ("one column (ts)", sources(epto_df), lambda df: df.agg(F.sum("ts")).first()),
        ("  .schema(ts)", sources(ts_only, False), lambda df: df.agg(F.sum("ts")).first()),
        ("count()", sources(epto_df), lambda df: df.count()),
        ("  .schema(node)", sources(node_only, False), lambda df: df.count()),
    ]
    print(
        f"reads of the same {records:,} rows ({spark.sparkContext.master}): best wall time "
        f"of {repeats}, median CPU time of the Spark processes; (Nx) is the ratio to Parquet"
    )
    _time_reads(reads, repeats)


def compare_network_reads(spark: Any, logs: Path, parquet: Path, repeats: int) -> None:
    """One row per event (``rows=events``): the group's order read from the
    files, through a log server (:mod:`epto.spark._logserver`, in this
    process, serving the same directory over loopback TCP: ``epto.servers``),
    and the same rows as Parquet; every column and ``count()``. CPU time
    includes this process's (the log server's)."""
    import secrets

    from epto.spark._logserver import serve_in_thread

    files_df = spark.read.format("epto").load(str(logs))
    files_df.write.mode("overwrite").parquet(str(parquet))
    rows = spark.read.parquet(str(parquet)).count()
    token = secrets.token_hex(16)
    with serve_in_thread([logs], token.encode()) as (server,):
        net_df = (
            spark.read.format("epto")
            .option("epto.servers", server.address)
            .option("epto.token", token)
            .load()
        )
        dfs = {"files": files_df, "network": net_df, "parquet": spark.read.parquet(str(parquet))}
        reads: list[tuple[str, dict[str, Any], Callable[[Any], object]]] = [
            ("all columns", dfs, lambda df: df.write.format("noop").mode("overwrite").save()),
            ("count()", dfs, lambda df: df.count()),
        ]
        print(
            f"rows=events: the group's order, {rows:,} events, read from the files, over the "
            f"network and as Parquet ({spark.sparkContext.master}); CPU includes the driver's "
            "Python process (the log server)"
        )
        _time_reads(reads, repeats, with_self=True)
        print(f"  log server: {server.statistics}")


def _time_reads(
    reads: list[tuple[str, dict[str, Any], Callable[[Any], object]]],
    repeats: int,
    *,
    with_self: bool = False,
) -> None:
    """Run each read ``repeats`` times; print the best wall and median CPU time."""

    def cpu_now() -> float | None:
        children = _children_cpu()
        if children is None:
            return None
        return children + (time.process_time() if with_self else 0.0)

    for label, dfs, action in reads:
        wall: dict[str, float] = {}
        cpu: dict[str, float | None] = {}
        for name, df in dfs.items():
            times, cpus = [], []
            for _ in range(repeats):
                before = cpu_now()
                started = time.perf_counter()
                try:
                    action(df)
                except Exception as exc:  # e.g. a schema the source does not take
                    print(f"  {label:16} {name}: failed ({type(exc).__name__})")
                    break
                times.append(time.perf_counter() - started)
                after = cpu_now()
                if before is not None and after is not None:
                    cpus.append(after - before)
            if times:
                wall[name] = min(times)
                cpu[name] = sorted(cpus)[len(cpus) // 2] if cpus else None
        if "parquet" not in wall:
            continue
        base_wall, base_cpu = wall["parquet"], cpu["parquet"]
        for name in wall:
            line = (
                f"  {label:16} {name:9} wall {wall[name]:5.2f} s ({wall[name] / base_wall:4.1f}x)"
            )
            c = cpu[name]
            if c is not None and base_cpu is not None:
                line += f"   CPU {c:5.2f} s ({c / max(base_cpu, 0.01):4.1f}x)"
            print(line)


def run(args: argparse.Namespace) -> int:
    import epto.spark
    from epto.log import check_logs
    from epto.spark import analyze

    work = args.dir or Path(tempfile.mkdtemp(prefix="epto-bench-spark-"))
    sim, big = work / "sim", work / "large"
    for d in (sim, big):
        shutil.rmtree(d, ignore_errors=True)
    try:
        simulate(sim, args.processes, args.events)
        started = time.perf_counter()
        summary, _ = check_logs(sim)
        print(
            f"epto check (Python) on the simulator's log: {summary['deliveries']} records in "
            f"{time.perf_counter() - started:.1f} s, safety {'ok' if summary['ok'] else 'VIOLATED'}"
        )
        records = tile(sim, big, args.tiles)

        spark = epto.spark.session(args.master, app_name="epto-bench")
        spark.sparkContext.setLogLevel("ERROR")
        from pyspark.sql import functions as F

        for label, root, n in (("simulator log", sim, None), ("large log", big, records)):
            started = time.perf_counter()
            row = (
                spark.read.format("epto")
                .option("rows", "per-node")
                .load(str(root))
                .agg(F.count("*").alias("n"), F.sum(F.length("payload")).alias("bytes"))
                .first()
            )
            elapsed = time.perf_counter() - started
            assert n is None or row["n"] == n
            print(
                f"spark batch read ({label}): {row['n']} records, {row['bytes']} payload bytes "
                f"in {elapsed:.1f} s = {row['n'] / elapsed:,.0f} records/s "
                f"({spark.sparkContext.master})"
            )
        compare_reads(spark, big, work / "parquet", records, args.repeats)
        compare_network_reads(spark, big, work / "parquet-events", args.repeats)
        if not args.skip_analyze:
            for label, root in (("simulator log", sim), ("large log", big)):
                result = analyze(root, spark=spark)
                print(
                    f"epto analyze ({label}): {result['deliveries']} deliveries of "
                    f"{result['events']} events in {result['seconds']:.1f} s; safety "
                    f"{'ok' if result['ok'] else 'VIOLATED'}, holes {result['holes']['total']}, "
                    f"edges to the driver {result['order']['edges_to_driver']}"
                )
        spark.stop()
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0
