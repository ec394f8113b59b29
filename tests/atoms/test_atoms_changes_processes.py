"""Six OS processes over trio TCP on loopback (``examples/atoms_changes.py``):
while every node publishes to its current groups, the coordinator adds a
group and then removes another. Every message is delivered to every member
of its group in the epoch it was published in, and any two processes agree
on the order of the messages they both deliver."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from epto.transports._ports import free_ports

from epto.check import check_pairwise

ROOT = Path(__file__).resolve().parents[2]
GROUPS = {0: [1, 2, 3, 4], 1: [3, 4, 5, 6], 2: [1, 2, 5, 6]}
CHANGES = [{"after": 8, "add": {"3": [1, 3, 5]}}, {"after": 16, "remove": [0]}]
MESSAGES = 24
WAIT = 60.0


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_a_group_added_and_one_removed_while_messages_flow(tmp_path: Path) -> None:
    pids = sorted({p for members in GROUPS.values() for p in members})
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    addresses = {pid: f"127.0.0.1:{port}" for pid, port in zip(pids, ports, strict=True)}
    config = tmp_path / "atoms.json"
    config.write_text(json.dumps({"groups": GROUPS, "addresses": addresses, "changes": CHANGES}))
    procs = {}
    outputs = {pid: tmp_path / f"{pid}.jsonl" for pid in pids}
    deadline = time.monotonic() + WAIT
    try:
        for pid in pids:
            procs[pid] = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "examples" / "atoms_changes.py"),
                    f"--id={pid}",
                    f"--config={config}",
                    f"--messages={MESSAGES}",
                    f"--output={outputs[pid]}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for pid, proc in procs.items():
            assert proc.stdout is not None
            line = proc.stdout.readline()  # "published", or "" if it died
            assert line.strip() == "published", f"process {pid} ended before its messages"
            assert time.monotonic() < deadline, "the group took too long"
        # Every publication is known now; wait (bounded) for the deliveries.
        while True:
            sent = [r for pid in pids for r in _records(outputs[pid]) if r["kind"] == "sent"]
            owed = sum(len(r["members"]) for r in sent)
            got = sum(1 for pid in pids for r in _records(outputs[pid]) if r["kind"] == "delivered")
            if got >= owed or time.monotonic() > deadline:
                break
            time.sleep(0.1)
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
    addressed: dict[tuple[int, int], frozenset[int]] = {}
    epochs: dict[int, set[int]] = {}
    for pid in pids:
        records = _records(outputs[pid])
        sequences[pid] = [(r["source"], r["seq"]) for r in records if r["kind"] == "delivered"]
        for r in records:
            if r["kind"] == "sent":
                addressed[(r["source"], r["seq"])] = frozenset(r["members"])
                epochs.setdefault(r["epoch"], set()).add(r["group"])
    report = check_pairwise(sequences, groups=addressed, broadcast=set(addressed))
    assert report.ok, report.summary()
    assert report.deliveries == sum(len(m) for m in addressed.values())
    # Messages flowed in all three epochs, to the groups of each.
    assert set(epochs) == {0, 1, 2}
    assert 3 not in epochs[0] and 3 in epochs[1] and 0 in epochs[1] and 0 not in epochs[2]
    print(f"{len(addressed)} messages, {report.deliveries} deliveries in epochs 0-2")
