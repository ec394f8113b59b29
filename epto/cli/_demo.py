"""``epto demo``: the main job, on embedded defaults.

A local cluster of ``epto node`` processes (one OS process per node, UDP over
127.0.0.1, frames sealed under a fresh group key) broadcasts, gossips and
orders; every node writes a crash-safe delivery log; the logs then go to
Spark (``local[2]``) for the analysis, and the pure-Python checker gives its
verdict on the same logs beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from ._args import positive_float


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run a local cluster that gossips, orders, logs, and analyse its logs on Spark",
        description=(
            "Start a local EpTO cluster (one OS process per node, UDP on 127.0.0.1), "
            "broadcast from every node, write delivery logs, and analyse them on Spark."
        ),
    )
    p.add_argument("--nodes", type=int, default=5, help="processes in the cluster (default 5)")
    p.add_argument("--events", type=int, default=20, help="events each node broadcasts")
    p.add_argument(
        "--round-interval",
        type=positive_float,
        default=0.05,
        help="seconds (default 0.05, shorter than a node's 0.125 so that the demo ends sooner; "
        "the demo's nodes use the global clock, whose TTL is half the logical one's)",
    )
    p.add_argument("--transport", choices=("trio", "zmq"), default="trio")
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--master", help="Spark master URL (default: local[2] in this process)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark analysis")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds for the cluster")
    p.set_defaults(func=run)


def _wait_ready(proc: subprocess.Popen[str], err_file: Path, deadline: float) -> int:
    """Wait for the node's ``ready ID ADDRESS incarnation N`` line on its
    standard error and return N (its k-th event is ``(ID, N << 32 | k)``,
    docs/node.md *Restart*); exit with one line (the node's last) if it stops
    or is late."""
    while time.monotonic() < deadline:
        said = err_file.read_text(errors="replace")
        for line in said.splitlines():
            words = line.split()
            if words[:1] == ["ready"] and "incarnation" in words[:-1]:
                return int(words[words.index("incarnation") + 1])
        if proc.poll() is not None:
            last = (said.strip().splitlines() or ["(nothing)"])[-1]
            raise SystemExit(f"epto demo: a node exited before it was ready: {last} ({err_file})")
        time.sleep(0.05)
    raise SystemExit(f"epto demo: a node was not ready in time; see {err_file}")


def run(args: argparse.Namespace) -> int:
    from epto._incarnation import first_seq

    if args.nodes < 2 or args.events < 1:
        print("epto demo: needs at least 2 nodes and 1 event", file=sys.stderr)
        return 2
    out = Path(args.out)
    logs = out / "logs"
    if logs.exists():
        import shutil

        shutil.rmtree(logs)
    logs.mkdir(parents=True)
    key_file = out / "group.key"
    key_file.write_text(secrets.token_hex(32))
    key_file.chmod(0o600)

    n = args.nodes
    ids = list(range(1, n + 1))
    from epto.transports._ports import free_ports

    # ZeroMQ listens on TCP, trio's EpTO node on UDP: a port free for one
    # kind need not be free for the other.
    kind = socket.SOCK_STREAM if args.transport == "zmq" else socket.SOCK_DGRAM
    ports = dict(zip(ids, free_ports(n, kind), strict=True))
    peers = [f"--peer={i}=127.0.0.1:{ports[i]}" for i in ids]
    expected = n * args.events
    print(
        f"== cluster: {n} nodes ({args.transport}, 127.0.0.1), {args.events} events each, "
        f"round {args.round_interval * 1000:g} ms, global clock, sealed frames"
    )
    started = time.monotonic()
    deadline = started + args.timeout
    procs: dict[int, subprocess.Popen[str]] = {}
    handed_over: dict[int, float] = {}
    first: dict[int, int] = {}
    """Node id -> the seq of its first event."""
    """Wall time at which each node was handed its events to broadcast."""
    try:
        for i in ids:
            cmd = [
                sys.executable,
                "-m",
                "epto.cli",
                "node",
                f"--transport={args.transport}",
                f"--id={i}",
                f"--bind=127.0.0.1:{ports[i]}",
                *peers,
                "--clock=global",
                f"--round-interval={args.round_interval}",
                "--stdin",
                f"--expect={expected}",
                f"--duration={args.timeout}",
                f"--output={out / f'node-{i}.jsonl'}",
                f"--log-dir={logs}",
                f"--group-key-file={key_file}",
                f"--seed={i}",
            ]
            with open(out / f"node-{i}.err", "w") as err:
                procs[i] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=err, text=True)
        for i, proc in procs.items():
            first[i] = first_seq(_wait_ready(proc, out / f"node-{i}.err", deadline))
        # Every node is bound: broadcast now, so no early ball meets a closed port.
        for i, proc in procs.items():
            stdin: IO[str] | None = proc.stdin
            assert stdin is not None
            # The node broadcasts each line as it reads it: the time the lines
            # are handed over is each event's broadcast time (within the
            # node's reading delay), for the delay figures of the analysis.
            handed_over[i] = time.time()
            for k in range(args.events):
                stdin.write(f"node {i} event {k}\n")
            stdin.close()
        statuses = {
            i: proc.wait(timeout=max(1.0, deadline - time.monotonic())) for i, proc in procs.items()
        }
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
    elapsed = time.monotonic() - started

    from epto.check import check
    from epto.log import check_logs, micros, write_broadcasts
    from epto.log._summary import verdict_text

    # Node i's k-th broadcast is event (i, first[i] + k): the manifest lets
    # the checkers catch anything delivered that nobody broadcast, and gives
    # the delays.
    broadcast = {(i, first[i] + k) for i in ids for k in range(args.events)}
    write_broadcasts(
        logs,
        (
            (i, seq, micros(handed_over[i]) if i in handed_over else None)
            for i, seq in sorted(broadcast)
        ),
    )
    sequences = {}
    for i in ids:
        with open(out / f"node-{i}.jsonl") as f:
            sequences[i] = [(r["source"], r["seq"]) for r in map(json.loads, f)]
    report = check(sequences, broadcast=broadcast)
    delivered = {i: len(seq) for i, seq in sequences.items()}
    print(f"   ran {elapsed:.1f} s; exit statuses {sorted(set(statuses.values()))}")
    print(f"   deliveries per node: {delivered} (expected {expected} each)")
    print("   " + report.summary().replace("\n", "\n   "))

    python_verdict, _ = check_logs(logs)
    ok = report.ok and report.total_holes == 0 and all(v == expected for v in delivered.values())
    print(f"== epto check {logs} (pure Python)")
    print("   " + verdict_text(python_verdict).replace("\n", "\n   "))
    if args.no_spark:
        return 0 if ok else 1

    print(f"== epto analyze {logs} (Spark)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from epto.spark import analyze
    from epto.spark._analyze import main_text

    result = analyze(logs, master=args.master, out=out / "analysis")
    print("   " + main_text(result).replace("\n", "\n   "))
    agree = _verdicts(result) == _verdicts(python_verdict)
    print(f"   Spark and the Python checker agree: {agree}")
    print(f"   summary and plot: {out / 'analysis'}")
    return 0 if ok and agree else 1


def _verdicts(summary: dict[str, Any]) -> tuple[object, ...]:
    return (
        summary["order"]["violation_count"],
        summary["integrity"]["duplicates"],
        summary["integrity"]["never_broadcast"],
        summary["holes"]["total"],
        summary["deliveries"],
    )
