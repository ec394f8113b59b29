"""``epto node --mode token-ring --optimistic PLANNER`` as three OS processes
on 127.0.0.1: every delivery is printed twice (tagged optimistic, then final),
``--expect`` counts final deliveries, and the three final orders agree."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from epto.transports._ports import free_ports

from epto.check import check


def test_three_processes_print_optimistic_then_final_deliveries(tmp_path: Path) -> None:
    pids = [1, 2, 3]
    # TCP ports (the token ring listens on TCP); each node's standard error
    # goes to a file, which never fills up and stops the node as a pipe
    # nobody reads would.
    ports = free_ports(3, socket.SOCK_STREAM)
    peers = [f"--peer={p}=127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)]
    procs = {}
    for pid, port in zip(pids, ports, strict=True):
        argv = [sys.executable, "-m", "epto", "node", "--mode=token-ring", "--optimistic=optimal"]
        argv += [f"--id={pid}", f"--bind=127.0.0.1:{port}", *peers, f"--seed={pid}"]
        argv += [f"--broadcast=m{pid}-{i}" for i in range(4)]
        argv += ["--expect=12", "--linger=1.0", f"--output={tmp_path / f'{pid}.jsonl'}"]
        with (tmp_path / f"{pid}.stderr").open("w") as stderr:
            procs[pid] = subprocess.Popen(argv, stderr=stderr, text=True)
    deadline = time.monotonic() + 60
    try:
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    report = {
        pid: (proc.returncode, (tmp_path / f"{pid}.stderr").read_text()[-2000:])
        for pid, proc in procs.items()
    }
    assert all(proc.returncode == 0 for proc in procs.values()), report
    finals = {}
    for pid in pids:
        lines = [json.loads(line) for line in (tmp_path / f"{pid}.jsonl").read_text().splitlines()]
        tags = [line["tag"] for line in lines]
        assert set(tags) <= {"optimistic", "final"}
        final = [(line["source"], line["seq"]) for line in lines if line["tag"] == "final"]
        optimistic = [
            (line["source"], line["seq"]) for line in lines if line["tag"] == "optimistic"
        ]
        assert len(final) == 12 and len(set(final)) == 12
        assert len(set(optimistic)) == len(optimistic) and set(optimistic) <= set(final)
        for eid in optimistic:  # an optimistic delivery comes before its final one
            assert optimistic.index(eid) <= lines.index(
                next(
                    line
                    for line in lines
                    if line["tag"] == "final" and (line["source"], line["seq"]) == eid
                )
            )
        finals[pid] = final
    assert not check(finals).order_violations
    assert len({tuple(seq) for seq in finals.values()}) == 1
