"""Six OS processes in four overlapping groups over trio TCP on loopback
(``examples/atoms_group.py``) deliver in pairwise-consistent order: every
member delivers every message of its groups, and any two processes agree on
the order of the messages they both deliver."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from epto.transports._ports import free_ports

from epto.check import check_pairwise

ROOT = Path(__file__).resolve().parents[2]
GROUPS = {0: [1, 2, 3, 4], 1: [3, 4, 5, 6], 2: [1, 2, 5, 6], 3: [1, 3, 5]}
MESSAGES = 40
WAIT = 60.0


def test_six_processes_in_four_overlapping_groups_agree_pairwise(tmp_path: Path) -> None:
    pids = sorted({p for members in GROUPS.values() for p in members})
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    addresses = {pid: f"127.0.0.1:{port}" for pid, port in zip(pids, ports, strict=True)}
    config = tmp_path / "atoms.json"
    config.write_text(json.dumps({"groups": GROUPS, "addresses": addresses}))
    procs = {}
    try:
        for pid in pids:
            procs[pid] = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "examples" / "atoms_group.py"),
                    f"--id={pid}",
                    f"--config={config}",
                    f"--messages={MESSAGES}",
                    f"--output={tmp_path / f'{pid}.jsonl'}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        deadline = time.monotonic() + WAIT
        for pid, proc in procs.items():
            assert proc.stdout is not None
            line = proc.stdout.readline()  # "complete", or "" if it died
            assert line.strip() == "complete", f"process {pid} ended without completing"
            assert time.monotonic() < deadline, "the group took too long"
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    sequences = {}
    latencies: dict[int, list[float]] = {g: [] for g in GROUPS}
    addressed = {}
    for pid in pids:
        records = [
            json.loads(line) for line in (tmp_path / f"{pid}.jsonl").read_text().splitlines()
        ]
        sequences[pid] = [(r["source"], r["seq"]) for r in records]
        for r in records:
            addressed[(r["source"], r["seq"])] = frozenset(GROUPS[r["group"]])
            latencies[r["group"]].append(r["delivered"] - r["sent"])
    report = check_pairwise(sequences, groups=addressed, broadcast=set(addressed))
    assert report.ok, report.summary()
    published = sum(MESSAGES * len(members) for members in GROUPS.values())
    assert len(addressed) == published
    assert report.deliveries == sum(MESSAGES * len(m) ** 2 for m in GROUPS.values())
    for group, values in latencies.items():
        values.sort()
        p50, top = values[len(values) // 2] * 1000, values[-1] * 1000
        print(f"group {group}: p50 {p50:.1f} ms, max {top:.1f} ms")
