"""A member killed and started again under its own id, over real processes:
``epto node`` (EpTO on UDP, then on ZeroMQ) with a delivery log, SIGKILLed
and restarted with the same id, address and log directory. The others
deliver what it broadcasts afterwards, it delivers theirs, and ``epto
check`` passes on every log (no duplicate, no order cycle)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .processes import free_ports, spawn, stop_all, wait_for_line

PER_NODE = 5
PIDS = (1, 2, 3)


def _node(transport: str, pid: int, ports: dict[int, int], tmp: Path, output: str) -> list[str]:
    argv = [sys.executable, "-m", "epto.cli", "node", f"--transport={transport}"]
    argv += [f"--id={pid}", f"--bind=127.0.0.1:{ports[pid]}"]
    argv += [f"--peer={p}=127.0.0.1:{q}" for p, q in ports.items()]
    # A stability window of 25 rounds of 20 ms: a process descheduled on a
    # busy two-core machine keeps its events in order (see test_processes).
    argv += ["--round-interval=0.02", "--ttl=25", "--stdin", f"--log-dir={tmp / 'logs'}"]
    argv += [f"--output={tmp / output}", f"--seed={pid}"]
    return argv


def _payloads(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["payload"] for line in path.read_text().splitlines() if line]


def _wait_for(path: Path, wanted: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if wanted <= set(_payloads(path)):
            return
        time.sleep(0.05)
    missing = sorted(wanted - set(_payloads(path)))
    raise AssertionError(f"{path.name} lacks {missing[:5]} (of {len(missing)}) after {timeout} s")


def _say(proc: subprocess.Popen[str], lines: list[str]) -> None:
    assert proc.stdin is not None
    for line in lines:
        proc.stdin.write(line + "\n")
    proc.stdin.flush()


@pytest.mark.parametrize("transport", ["trio", "zmq"])
def test_an_epto_member_restarted_under_its_id_is_itself_again(
    transport: str, tmp_path: Path
) -> None:
    kind = socket.SOCK_DGRAM if transport == "trio" else socket.SOCK_STREAM
    ports = dict(zip(PIDS, free_ports(len(PIDS), kind), strict=True))
    procs = {pid: spawn(_node(transport, pid, ports, tmp_path, f"{pid}.jsonl")) for pid in PIDS}
    everyone = list(procs.values())
    try:
        for proc in procs.values():
            wait_for_line(proc, "ready", timeout=30)
        before = {f"before {i} from {pid}" for pid in PIDS for i in range(PER_NODE)}
        for pid, proc in procs.items():
            _say(proc, [f"before {i} from {pid}" for i in range(PER_NODE)])
        for pid in PIDS:
            _wait_for(tmp_path / f"{pid}.jsonl", before, timeout=60)

        procs[3].kill()  # SIGKILL: no flush, no goodbye
        procs[3].wait(timeout=10)
        procs[3] = again = spawn(_node(transport, 3, ports, tmp_path, "3-again.jsonl"))
        everyone.append(again)
        wait_for_line(again, "ready", timeout=30)

        after = {f"after {i} from {pid}" for pid in PIDS for i in range(PER_NODE)}
        for pid, proc in procs.items():
            _say(proc, [f"after {i} from {pid}" for i in range(PER_NODE)])
        for output in ("1.jsonl", "2.jsonl", "3-again.jsonl"):
            _wait_for(tmp_path / output, after, timeout=60)
        # The restarted member delivers nothing its first start delivered.
        assert not set(_payloads(tmp_path / "3-again.jsonl")) & before
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()  # --stdin without --expect: stop at end of input
        for proc in procs.values():
            assert proc.wait(timeout=60) == 0
    finally:
        stop_all(everyone)

    checked = subprocess.run(
        [sys.executable, "-m", "epto.cli", "check", str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Two starts of member 3, one identity file: the second start's number
    # is above the first's.
    record = json.loads((tmp_path / "logs" / "member-3.json").read_text())
    assert record["pid"] == 3 and record["incarnation"] >= 2


def test_a_second_live_process_with_the_same_id_and_directory_is_refused(
    tmp_path: Path,
) -> None:
    ports = dict(zip((1, 2), free_ports(2), strict=True))
    first = spawn(_node("trio", 1, ports, tmp_path, "1.jsonl"))
    try:
        wait_for_line(first, "ready", timeout=30)
        second = subprocess.run(
            _node("trio", 1, {1: free_ports(1)[0], 2: ports[2]}, tmp_path, "1b.jsonl"),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    finally:
        stop_all([first])
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert "member 1 already runs in another process" in lines[0]
