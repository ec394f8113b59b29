"""A token-ring member restarted under its own id, as OS processes: ``epto
node --mode token-ring`` on 127.0.0.1 with ``--log-dir``. One of three
members is killed with SIGKILL and started again with the same id, bind
address, peers and log directory; the group admits it back (a later
incarnation), the others deliver what it broadcasts afterwards, and ``epto
check`` passes over every log. Three of five killed at once and started
again on their directories vote as themselves (the member's vote kept in
the directory) and are each ready within seconds; without their votes (the
vote files removed) a majority restart waits, safely. A second live
process with the id and the directory of a running member is refused with
one line and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from epto.cli import main

from .processes import free_ports, spawn, stop_all, wait_for_line

PIDS = [1, 2, 3]


def _argv(
    pid: int, ports: list[int], log_dir: Path, *extra: str, pids: list[int] = PIDS
) -> list[str]:
    peers = [f"--peer={p}=127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)]
    argv = [sys.executable, "-m", "epto.cli", "node", "--transport=trio", "--mode=token-ring"]
    argv += [f"--id={pid}", f"--bind=127.0.0.1:{ports[pids.index(pid)]}", *peers]
    return [*argv, f"--seed={pid}", "--stdin", f"--log-dir={log_dir}", *extra]


def _say(proc: subprocess.Popen[str], *lines: str) -> None:
    assert proc.stdin is not None
    for line in lines:
        proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _until_payloads(
    proc: subprocess.Popen[str], wanted: set[str], timeout: float, pending: bytearray
) -> None:
    """Read ``proc``'s deliveries until every payload of ``wanted`` came."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    left_over = set(wanted)
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while left_over:
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                left_over.discard(json.loads(line)["payload"])
            if not left_over:
                return
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"still missing {sorted(left_over)} after {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"process exited ({proc.poll()}), missing {left_over}")
            pending += chunk


def test_a_member_killed_and_started_again_under_its_id_comes_back(tmp_path: Path) -> None:
    ports = free_ports(len(PIDS), socket.SOCK_STREAM)
    logs = tmp_path / "logs"
    procs: dict[int, subprocess.Popen[str]] = {}
    pending = {p: bytearray() for p in PIDS}
    everyone: list[subprocess.Popen[str]] = []
    try:
        for pid in PIDS:
            procs[pid] = spawn(_argv(pid, ports, logs))
            everyone.append(procs[pid])
        for pid in PIDS:
            wait_for_line(procs[pid], "ready", timeout=30)
        for pid in PIDS:
            _say(procs[pid], f"before {pid}")
        before = {f"before {p}" for p in PIDS}
        for pid in PIDS:
            _until_payloads(procs[pid], before, 30, pending[pid])
        procs[3].send_signal(signal.SIGKILL)
        procs[3].wait(timeout=10)
        # The same id, bind address, peers and log directory.
        procs[3] = spawn(_argv(3, ports, logs))
        everyone.append(procs[3])
        pending[3] = bytearray()
        wait_for_line(procs[3], "ready", timeout=30)
        # Said at once: it leaves when the group has admitted the member back.
        _say(procs[3], "after 3")
        for pid in PIDS:
            _until_payloads(procs[pid], {"after 3"}, 30, pending[pid])
        # Back in the view: it delivers what the others broadcast from now on.
        _say(procs[1], "after 1")
        for pid in PIDS:
            _until_payloads(procs[pid], {"after 1"}, 30, pending[pid])
        for pid in PIDS:
            assert procs[pid].stdin is not None
            procs[pid].stdin.close()  # end of input: the member stops
        for pid in PIDS:
            assert procs[pid].wait(timeout=30) == 0
    finally:
        stop_all(everyone)
    assert main(["check", str(logs)]) == 0


def test_a_second_live_process_of_a_member_is_refused(tmp_path: Path) -> None:
    ports = free_ports(len(PIDS), socket.SOCK_STREAM)
    logs = tmp_path / "logs"
    first = spawn(_argv(1, ports, logs))
    try:
        wait_for_line(first, "ready", timeout=30)
        # Same id, same directory (another port: the first holds its own).
        other = free_ports(1, socket.SOCK_STREAM)[0]
        argv = _argv(1, ports, logs)
        argv = [a if not a.startswith("--bind=") else f"--bind=127.0.0.1:{other}" for a in argv]
        second = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=None)
        assert second.returncode != 0
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "already runs" in lines[0] and "Traceback" not in second.stderr
    finally:
        stop_all([first])


def _payloads_within(proc: subprocess.Popen[str], seconds: float, pending: bytearray) -> set[str]:
    """The payloads ``proc`` delivers within ``seconds``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    got: set[str] = set()
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(left):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                got.add(json.loads(line)["payload"])
    return got


def test_a_majority_killed_and_started_again_without_its_votes_never_splits(
    tmp_path: Path,
) -> None:
    """Two of three members SIGKILLed and started again at once on their log
    directories, their kept votes removed (``member-ID.vote.*``, as after a
    disk lost or ``durability="off"``): they ask to be admitted (they never
    found a group of their own next to member 1), nothing is delivered
    anywhere while the group has no majority of the members that held its
    order, and ``epto check`` passes over every log. The documented way
    out, every member stopped and started again on a new directory (a new
    group), delivers again."""
    ports = free_ports(len(PIDS), socket.SOCK_STREAM)
    logs = tmp_path / "logs"
    procs: dict[int, subprocess.Popen[str]] = {}
    pending = {p: bytearray() for p in PIDS}
    everyone: list[subprocess.Popen[str]] = []
    try:
        for pid in PIDS:
            procs[pid] = spawn(_argv(pid, ports, logs))
            everyone.append(procs[pid])
        for pid in PIDS:
            wait_for_line(procs[pid], "ready", timeout=30)
        for pid in PIDS:
            _say(procs[pid], f"before {pid}")
        before = {f"before {p}" for p in PIDS}
        for pid in PIDS:
            _until_payloads(procs[pid], before, 30, pending[pid])
        for pid in (2, 3):
            procs[pid].send_signal(signal.SIGKILL)
        for pid in (2, 3):
            procs[pid].wait(timeout=10)
            for vote in logs.glob(f"member-{pid}.vote.*"):
                vote.unlink()
            procs[pid] = spawn(_argv(pid, ports, logs))
            everyone.append(procs[pid])
            pending[pid] = bytearray()
        for pid in (2, 3):
            wait_for_line(procs[pid], "ready", timeout=30)
        for pid in PIDS:
            _say(procs[pid], f"during {pid}")
        for pid in PIDS:
            assert not _payloads_within(procs[pid], 1.5, pending[pid]), pid
        stop_all(list(procs.values()))
        assert main(["check", str(logs)]) == 0
        # A new group: every member on a new directory.
        fresh = tmp_path / "fresh"
        for pid in PIDS:
            procs[pid] = spawn(_argv(pid, ports, fresh))
            everyone.append(procs[pid])
            pending[pid] = bytearray()
        for pid in PIDS:
            wait_for_line(procs[pid], "ready", timeout=30)
        for pid in PIDS:
            _say(procs[pid], f"again {pid}")
        for pid in PIDS:
            _until_payloads(procs[pid], {f"again {p}" for p in PIDS}, 30, pending[pid])
    finally:
        stop_all(everyone)
    assert main(["check", str(fresh)]) == 0


def test_three_of_five_killed_and_started_again_at_once_come_back(tmp_path: Path) -> None:
    """Three of five members SIGKILLed at once and started again with the
    same ids and log directories (where each kept its vote): each is ready
    (in the view, its own broadcast delivered back to it) well within 10 s
    of its start, the group delivers what every member broadcasts
    afterwards, and ``epto check`` passes over every log (no position lost
    or holding two events)."""
    pids = [1, 2, 3, 4, 5]
    down = [3, 4, 5]
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    logs = tmp_path / "logs"
    procs: dict[int, subprocess.Popen[str]] = {}
    pending = {p: bytearray() for p in pids}
    everyone: list[subprocess.Popen[str]] = []
    try:
        for pid in pids:
            procs[pid] = spawn(_argv(pid, ports, logs, pids=pids))
            everyone.append(procs[pid])
        for pid in pids:
            wait_for_line(procs[pid], "ready", timeout=30)
        for pid in pids:
            _say(procs[pid], f"before {pid}")
        for pid in pids:
            _until_payloads(procs[pid], {f"before {p}" for p in pids}, 30, pending[pid])
        for pid in down:
            assert any(logs.glob(f"member-{pid}.vote.*")), pid
            procs[pid].send_signal(signal.SIGKILL)
        for pid in down:
            procs[pid].wait(timeout=10)
        started = {}
        for pid in down:
            started[pid] = time.monotonic()
            procs[pid] = spawn(_argv(pid, ports, logs, pids=pids))
            everyone.append(procs[pid])
            pending[pid] = bytearray()
        up = {}
        for pid in down:
            wait_for_line(procs[pid], "ready", timeout=30)
            up[pid] = time.monotonic() - started[pid]
            _say(procs[pid], f"back {pid}")
        ready = {}
        for pid in down:
            _until_payloads(procs[pid], {f"back {pid}"}, 30, pending[pid])
            ready[pid] = time.monotonic() - started[pid]
        # The figure asked for is under 10 s; the bound asserted is generous,
        # since most of it is the interpreter starting on a loaded machine.
        print(
            "restarted members, seconds from spawn: node up",
            {p: round(t, 2) for p, t in up.items()},
            "ready",
            {p: round(t, 2) for p, t in ready.items()},
        )
        assert all(t < 20.0 for t in ready.values()), ready
        for pid in pids:
            _say(procs[pid], f"after {pid}")
        after = {f"after {p}" for p in pids}
        for pid in pids:
            _until_payloads(procs[pid], after, 30, pending[pid])
        for pid in pids:
            assert procs[pid].stdin is not None
            procs[pid].stdin.close()
        for pid in pids:
            assert procs[pid].wait(timeout=30) == 0
    finally:
        stop_all(everyone)
    assert main(["check", str(logs)]) == 0
