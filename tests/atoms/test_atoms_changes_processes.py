"""Six OS processes over trio TCP on loopback (``examples/atoms_changes.py``).

* While every node publishes to its current groups, the coordinator adds a
  group and then removes another: every message is delivered to every
  member of its group in the epoch it was published in, and any two
  processes agree on the order of the messages they both deliver.
* A sequencing machine ends abruptly while messages flow; the coordinator's
  detector declares it crashed and moves its atoms: the survivors agree
  pairwise, nothing stays waiting, and every message published after the
  replacement is delivered to every live member of its group."""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from epto.transports._ports import free_ports

from epto.atoms import SequencingGraph
from epto.check import check_pairwise

ROOT = Path(__file__).resolve().parents[2]
GROUPS = {0: [1, 2, 3, 4], 1: [3, 4, 5, 6], 2: [1, 2, 5, 6]}
WAIT = 60.0
Records = dict[int, list[dict[str, Any]]]


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _readline(proc: subprocess.Popen[str], deadline: float) -> str:
    """The next line of ``proc``'s output, or "" at its end or the deadline."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(max(0.0, deadline - time.monotonic())):
            return ""
    return proc.stdout.readline()


def _deploy(
    tmp_path: Path, extra: dict[str, Any], *, messages: int, interval: float, down: int | None
) -> Records:
    """Run the six nodes until every live one has its publications back and
    every publication has reached its live members (bounded); their records."""
    pids = sorted({p for members in GROUPS.values() for p in members})
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    addresses = {pid: f"127.0.0.1:{port}" for pid, port in zip(pids, ports, strict=True)}
    config = tmp_path / "atoms.json"
    config.write_text(json.dumps({"groups": GROUPS, "addresses": addresses, **extra}))
    outputs = {pid: tmp_path / f"{pid}.jsonl" for pid in pids}
    live = [pid for pid in pids if pid != down]
    procs = {}
    deadline = time.monotonic() + WAIT
    try:
        for pid in pids:
            procs[pid] = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "examples" / "atoms_changes.py"),
                    f"--id={pid}",
                    f"--config={config}",
                    f"--messages={messages}",
                    f"--interval={interval}",
                    f"--output={outputs[pid]}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for pid in live:
            line = _readline(procs[pid], deadline)  # "published", or "" if it died
            assert line.strip() == "published", f"process {pid}: no 'published' in time"
        # Every publication is known now; wait (bounded) for the deliveries
        # owed (with a crash, those of the epoch after it), then for quiet.
        last, quiet = -1, 0
        while time.monotonic() < deadline and quiet < 5:
            records = {pid: _records(outputs[pid]) for pid in pids}
            sent = {
                (r["source"], r["seq"]): r
                for rs in records.values()
                for r in rs
                if r["kind"] == "sent" and r["epoch"] >= (0 if down is None else 1)
            }
            delivered = {
                (pid, (r["source"], r["seq"]))
                for pid in live
                for r in records[pid]
                if r["kind"] == "delivered"
            }
            owed = {(pid, e) for e, r in sent.items() for pid in set(r["members"]) - {down}}
            quiet = quiet + 1 if owed <= delivered and len(delivered) == last else 0
            last = len(delivered)
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
    return {pid: _records(outputs[pid]) for pid in pids}


def _published(records: Records) -> dict[tuple[int, int], dict[str, Any]]:
    return {
        (r["source"], r["seq"]): r for rs in records.values() for r in rs if r["kind"] == "sent"
    }


def _sequences(records: Records, live: list[int]) -> dict[int, list[tuple[int, int]]]:
    return {
        pid: [(r["source"], r["seq"]) for r in records[pid] if r["kind"] == "delivered"]
        for pid in live
    }


def test_a_group_added_and_one_removed_while_messages_flow(tmp_path: Path) -> None:
    changes = [{"after": 8, "add": {"3": [1, 3, 5]}}, {"after": 16, "remove": [0]}]
    records = _deploy(tmp_path, {"changes": changes}, messages=24, interval=0.02, down=None)
    published = _published(records)
    addressed = {eid: frozenset(r["members"]) for eid, r in published.items()}
    sequences = _sequences(records, sorted(records))
    report = check_pairwise(sequences, groups=addressed, broadcast=set(addressed))
    assert report.ok, report.summary()
    assert report.deliveries == sum(len(m) for m in addressed.values())
    epochs: dict[int, set[int]] = {}
    for r in published.values():
        epochs.setdefault(r["epoch"], set()).add(r["group"])
    # Messages flowed in all three epochs, to the groups of each.
    assert set(epochs) == {0, 1, 2}
    assert 3 not in epochs[0] and 3 in epochs[1] and 0 in epochs[1] and 0 not in epochs[2]
    print(f"{len(addressed)} messages, {report.deliveries} deliveries in epochs 0-2")


def test_a_crashed_sequencing_machine_is_found_and_replaced(tmp_path: Path) -> None:
    graph = SequencingGraph.build(GROUPS)
    down = max(a.host for a in graph.atoms.values())  # a machine, not the coordinator (1)
    assert down != 1
    # The crashed node ends 10 ticks after the coordinator is seen up; every
    # node publishes 15 ticks at least, and 15 ticks after the replacement.
    crash = {"node": down, "after": 10}
    extra = {"suspect_after": 1.0, "crash": crash, "until_epoch": 1, "ticks_after": 15}
    records = _deploy(tmp_path, extra, messages=15, interval=0.04, down=down)
    live = [pid for pid in sorted(records) if pid != down]
    published = _published(records)
    addressed = {eid: frozenset(r["members"]) for eid, r in published.items()}
    final = {pid: next(r for r in records[pid] if r["kind"] == "statistics") for pid in live}
    for pid, stats in final.items():
        assert stats["crashed"] == [down], (pid, stats)
        assert stats["epoch"] == stats["delivering_epoch"] == 1, (pid, stats)
        assert stats["pending"] == 0, (pid, stats)  # nothing stays waiting
        assert set(stats["rejected"]) <= {"from-crashed"}, (pid, stats)

    def expected(pid: int, eid: tuple[int, int]) -> bool:
        # After the replacement (epoch 1), every message to every live member.
        return pid in live and pid in addressed[eid] and published[eid]["epoch"] == 1

    sequences = _sequences(records, live)
    report = check_pairwise(
        sequences, groups=addressed, broadcast=set(addressed), expected=expected
    )
    assert report.violating_pairs == 0 and not report.integrity_violations, report.summary()
    assert report.total_stuck == 0, report.summary()
    after = [eid for eid, r in published.items() if r["epoch"] == 1]
    assert len(after) > 20  # traffic went on after the replacement
    lost = sum(final[pid]["lost"] for pid in live)
    print(
        f"{len(addressed)} messages ({len(after)} after the replacement), "
        f"{report.deliveries} deliveries, {lost} publications lost with node {down}"
    )
