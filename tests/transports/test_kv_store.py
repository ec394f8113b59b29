"""The replicated key-value store example as three OS processes on 127.0.0.1:
after every replica's writes (with contended compare-and-set), all replicas
hold the same data."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .processes import free_ports, spawn, stop_all, wait_for_line

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kv_store.py"


def ask(proc: subprocess.Popen[str], line: str, prefix: str) -> str:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return wait_for_line(proc, prefix, timeout=30, stdout=True)


def state(proc: subprocess.Popen[str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(ask(proc, "dump", "state ")[len("state ") :])
    return result


def test_three_replicas_end_equal_and_a_late_joiner_catches_up() -> None:
    ports = free_ports(4)
    transfers = free_ports(4, socket.SOCK_STREAM)
    pids = [1, 2, 3, 4]
    peers = [f"--peer={p}=127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)]
    transfer_peers = [
        f"--peer-transfer={p}=127.0.0.1:{q}" for p, q in zip(pids, transfers, strict=True)
    ]
    procs = []

    def start(pid: int, *extra: str) -> subprocess.Popen[str]:
        argv = [sys.executable, str(EXAMPLE), f"--id={pid}", f"--bind=127.0.0.1:{ports[pid - 1]}"]
        argv += [f"--transfer=127.0.0.1:{transfers[pid - 1]}", "--round-interval=0.02"]
        proc = spawn([*argv, *peers, *transfer_peers, *extra])
        procs.append(proc)
        return proc

    try:
        for pid in pids[:3]:
            start(pid)
        for proc in procs:
            wait_for_line(proc, "ready", timeout=30)
        commands = 0
        for i in range(10):
            for pid, proc in zip(pids, procs, strict=False):
                writes = [
                    f"set own-{pid}-{i} v{i}",  # disjoint keys
                    f"set shared {pid}-{i}",  # last writer in the total order wins
                    f"cas counter {'-' if i == 0 else i - 1} {i}",  # contended
                ]
                if i % 3 == 2:
                    writes.append(f"del own-{pid}-{i - 1}")
                for w in writes:
                    assert proc.stdin is not None
                    proc.stdin.write(w + "\n")
                commands += len(writes)
                assert proc.stdin is not None
                proc.stdin.flush()
        _wait_applied(procs, commands)
        # A fourth replica (in every member list, its process started only
        # now) fetches the state, then takes part.
        late = start(4, "--join")
        wait_for_line(late, "caught up", timeout=60)
        assert late.stdin is not None
        late.stdin.write("set from-late yes\n")
        late.stdin.flush()
        commands += 1
        states = _wait_applied(procs, commands)
        assert [s["applied"] for s in states] == [commands] * 4
        assert states[0]["data"] == states[1]["data"] == states[2]["data"] == states[3]["data"]
        assert len({s["digest"] for s in states}) == 1
        data = states[0]["data"]
        assert data["counter"] == "9"  # some cas of every round won at every replica
        assert sum(s["cas_failed"] for s in states[:1]) == 20  # 30 cas, exactly 10 won
        assert "own-1-1" not in data
        assert data["own-3-9"] == "v9" and data["from-late"] == "yes"
        assert ask(procs[1], "get counter", "value ") == "value counter 9\n"
        status = json.loads(ask(late, "status", "status ")[len("status ") :])
        assert status["ready"] and status["transfers"] == 1
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("quit\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.wait(timeout=30) == 0
    finally:
        stop_all(procs)


def _wait_applied(procs: list[subprocess.Popen[str]], commands: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    states = [state(p) for p in procs]
    while any(s["applied"] < commands for s in states) and time.monotonic() < deadline:
        time.sleep(0.1)
        states = [state(p) for p in procs]
    return states
