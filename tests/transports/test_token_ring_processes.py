"""``epto node --mode token-ring`` as separate OS processes on 127.0.0.1: five
members deliver one sequence (each member starts once, so an event's ``seq``
is compared by its count within the start: ``seq & COUNT_MASK``); the member
that holds the token (read from its ``--status`` file) is killed with SIGKILL
and the survivors resume within the bound docs/token-ring.md derives from the
timeouts; a new identity joins a running group through ``--contact``."""

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

import pytest

from epto._incarnation import COUNT_MASK
from epto.check import check
from epto.tokenring import TokenRingConfig

from .processes import free_ports, spawn, stop_all, wait_for_line

HOLD = 1.0
"""``--token-hold``: the holder keeps the token a second, long enough to read
its status file and kill it while it holds the token."""
_RING = TokenRingConfig(token_hold=HOLD)
# Ordering after a killed holder, section "Killing the token holder" of
# docs/token-ring.md: the survivors suspect the holder (suspect_timeout,
# checked every heartbeat_interval), one consensus instance regenerates the
# token (at most change_timeout on a live majority), and a message is stable
# once k core members hold it: (k - 1) token holds.
SLACK = 2.0
"""Scheduling slack for a loaded two-core machine; the bound plus the slack
stays below exclude_timeout, so the test fails if ordering only resumes when
the victim is excluded rather than when it is suspected."""


def recovery_bound(members: int) -> float:
    k = _RING.effective_k(members, members - 1)
    return (
        _RING.suspect_timeout
        + _RING.heartbeat_interval
        + _RING.change_timeout
        + (k - 1) * _RING.token_hold
    )


def _argv(pid: int, pids: list[int], ports: list[int], *extra: str) -> list[str]:
    peers = [f"--peer={p}=127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)]
    argv = [sys.executable, "-m", "epto.cli", "node", "--transport=trio", "--mode=token-ring"]
    argv += [f"--id={pid}", f"--bind=127.0.0.1:{ports[pids.index(pid)]}", *peers]
    return [*argv, f"--seed={pid}", "--stdin", *extra]


def _say(proc: subprocess.Popen[str], lines: list[str]) -> None:
    assert proc.stdin is not None
    for line in lines:
        proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _read_deliveries(
    proc: subprocess.Popen[str], n: int, timeout: float, pending: bytearray
) -> list[tuple[int, int, str]]:
    """The next ``n`` deliveries ``proc`` prints, within ``timeout`` seconds.

    Reads the pipe's file descriptor directly: a buffered ``readline`` may pull
    several lines at once and leave the selector waiting on an empty pipe.
    ``pending`` keeps the bytes after the last line read, across calls."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            while len(out) < n and b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                r = json.loads(line)
                out.append((r["source"], r["seq"] & COUNT_MASK, r["payload"]))
            if len(out) == n:
                return out
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"{len(out)} of {n} deliveries within {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"process exited ({proc.poll()}) after {len(out)} of {n}")
            pending += chunk


def test_five_processes_deliver_the_same_sequence(tmp_path: Path) -> None:
    per_node = 10
    pids = [1, 2, 3, 4, 5]
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    total = per_node * len(pids)
    procs = []
    try:
        for pid in pids:
            out = tmp_path / f"{pid}.jsonl"
            procs.append(spawn(_argv(pid, pids, ports, f"--expect={total}", f"--output={out}")))
        for proc in procs:
            wait_for_line(proc, "ready", timeout=30)
        for i in range(per_node):
            for pid, proc in zip(pids, procs, strict=True):
                _say(proc, [f"command {i} from {pid}"])
        for proc in procs:
            assert proc.wait(timeout=60) == 0
        sequences = {}
        for pid in pids:
            records = [json.loads(x) for x in (tmp_path / f"{pid}.jsonl").read_text().splitlines()]
            sequences[pid] = [(r["source"], r["seq"] & COUNT_MASK) for r in records]
        broadcast = {(p, s) for p in pids for s in range(per_node)}
        report = check(sequences, broadcast=broadcast)
        assert report.ok, report.summary()
        assert all(sequences[p] == sequences[1] for p in pids)
    finally:
        stop_all(procs)


def _status(path: Path) -> dict[str, object] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return json.loads(text) if text.endswith("\n") else None


def _find_fresh_holder(paths: dict[int, Path], timeout: float) -> int:
    """The member that took the token less than half a hold ago (so it keeps
    it for at least half a hold more), from the ``--status`` files."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, path in paths.items():
            status = _status(path)
            since = status and status.get("token_since")
            if isinstance(since, float) and time.time() - since < HOLD / 2:
                return pid
        time.sleep(0.01)
    raise AssertionError(f"no member took the token within {timeout} s")


@pytest.mark.parametrize("members", [3, 5])
def test_survivors_resume_after_the_token_holder_is_killed(members: int, tmp_path: Path) -> None:
    """SIGKILL the member that holds the token, while it holds it, once
    everything broadcast so far is delivered everywhere. The token dies with
    it; the survivors (a majority) regenerate it and order new commands, all
    in the same sequence, within the documented bound."""
    assert recovery_bound(members) + SLACK < _RING.exclude_timeout
    per_node = 5
    pids = list(range(1, members + 1))
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    paths = {pid: tmp_path / f"{pid}.status" for pid in pids}
    procs = {}
    buffers = {pid: bytearray() for pid in pids}
    try:
        for pid in pids:
            extra = [f"--token-hold={HOLD}", f"--status={paths[pid]}", "--duration=120"]
            procs[pid] = spawn(_argv(pid, pids, ports, *extra))
        for proc in procs.values():
            wait_for_line(proc, "ready", timeout=30)
        for i in range(per_node):
            for pid, proc in procs.items():
                _say(proc, [f"before {i} from {pid}"])
        before = {
            pid: _read_deliveries(proc, per_node * len(pids), 30, buffers[pid])
            for pid, proc in procs.items()
        }
        victim = _find_fresh_holder(paths, timeout=30)
        procs[victim].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        assert procs[victim].wait(timeout=10) == -signal.SIGKILL
        last = _status(paths[victim])
        assert last is not None and last["holds_token"] is True, last
        survivors = {pid: proc for pid, proc in procs.items() if pid != victim}
        for i in range(per_node):
            for pid, proc in survivors.items():
                _say(proc, [f"after {i} from {pid}"])
        # Ordering resumes (a first delivery everywhere) within the bound; a
        # command that reached the new sequencer too late for its first visit
        # waits one more rotation of the token (the core's size times a hold).
        bound = recovery_bound(members)
        rotation = (members - 1) * HOLD
        after = {}
        for pid, proc in survivors.items():
            left = killed_at + bound + SLACK - time.monotonic()
            after[pid] = _read_deliveries(proc, 1, left, buffers[pid])
        resumed = time.monotonic() - killed_at
        for pid, proc in survivors.items():
            left = killed_at + bound + rotation + SLACK - time.monotonic()
            n = per_node * len(survivors) - 1
            after[pid] += _read_deliveries(proc, n, left, buffers[pid])
        done = time.monotonic() - killed_at
        print(f"killed holder {victim} of {members}: resumed {resumed:.2f} s, all {done:.2f} s")
        sequences = {pid: [(s, q) for s, q, _ in before[pid] + after[pid]] for pid in survivors}
        broadcast = {(p, s) for p in pids for s in range(per_node)}
        broadcast |= {(p, s) for p in survivors for s in range(per_node, 2 * per_node)}
        report = check(sequences, broadcast=broadcast)
        assert report.ok, report.summary()
        first = sequences[min(survivors)]
        assert all(sequences[p] == first for p in survivors)
        assert sorted(payload for _, _, payload in after[min(survivors)]) == sorted(
            f"after {i} from {p}" for p in survivors for i in range(per_node)
        )
        for pid in survivors:
            status = _status(paths[pid])
            assert status is not None
            core = status["core"]
            assert isinstance(core, list) and victim not in core, status
            assert survivors[pid].poll() is None, f"survivor {pid} exited"
    finally:
        stop_all(list(procs.values()))


def test_a_new_process_joins_through_one_contact() -> None:
    """Three members run; a fourth process with a new id is given only member
    2's address (``--contact``). It is admitted, and from then on all four
    deliver the same sequence, the newcomer's commands included."""
    pids = [1, 2, 3]
    ports = free_ports(4, socket.SOCK_STREAM)
    procs = {}
    buffers = {pid: bytearray() for pid in (*pids, 4)}
    try:
        for pid in pids:
            procs[pid] = spawn(_argv(pid, pids, ports[:3], "--duration=60"))
        for proc in procs.values():
            wait_for_line(proc, "ready", timeout=30)
        argv = [sys.executable, "-m", "epto.cli", "node", "--mode=token-ring", "--id=4"]
        argv += [f"--bind=127.0.0.1:{ports[3]}", f"--contact=2=127.0.0.1:{ports[1]}"]
        procs[4] = spawn([*argv, "--seed=4", "--stdin", "--duration=60"])
        wait_for_line(procs[4], "joined 4", timeout=30)
        for i in range(3):
            for pid, proc in procs.items():
                _say(proc, [f"command {i} from {pid}"])
        got = {pid: _read_deliveries(proc, 12, 30, buffers[pid]) for pid, proc in procs.items()}
        sequences = {pid: [(s, q) for s, q, _ in got[pid]] for pid in got}
        report = check(sequences, broadcast={(p, s) for p in procs for s in range(3)})
        assert report.ok, report.summary()
        assert all(sequences[p] == sequences[1] for p in procs)
    finally:
        stop_all(list(procs.values()))


def test_a_member_paused_past_exclude_timeout_exits_excluded(tmp_path: Path) -> None:
    """Member 3 is stopped (SIGSTOP) until the others have excluded it (after
    exclude_timeout; read from member 1's status file). When it runs again it
    learns that it is out of the view, prints ``excluded 3`` and exits with
    status 3 (it must rejoin under a new id); the others go on delivering."""
    pids = [1, 2, 3]
    ports = free_ports(3, socket.SOCK_STREAM)
    status = tmp_path / "1.status"
    timeouts = ["--exclude-timeout=1.0", "--duration=60"]
    procs = {
        pid: spawn(_argv(pid, pids, ports, *timeouts, f"--status={tmp_path / f'{pid}.status'}"))
        for pid in pids
    }
    buffers = {pid: bytearray() for pid in pids}
    try:
        for proc in procs.values():
            wait_for_line(proc, "ready", timeout=30)
        procs[3].send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while (s := _status(status)) is None or s["members"] != [1, 2]:
            assert time.monotonic() < deadline, f"3 not excluded: {s}"
            time.sleep(0.02)
        procs[3].send_signal(signal.SIGCONT)
        wait_for_line(procs[3], "excluded 3", timeout=30)
        assert procs[3].wait(timeout=30) == 3
        _say(procs[1], ["after the exclusion"])
        for pid in (1, 2):
            assert _read_deliveries(procs[pid], 1, 30, buffers[pid]) == [
                (1, 0, "after the exclusion")
            ]
    finally:
        stop_all(list(procs.values()))
