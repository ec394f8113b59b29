"""``epto node --mode token-ring`` as separate OS processes on 127.0.0.1: five
members deliver one sequence, and after a member is killed with SIGKILL the
survivors keep delivering the same sequence."""

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

from epto.check import check
from epto.tokenring import TokenRingConfig

from .processes import free_ports, spawn, stop_all, wait_for_line

# The node's failure handling, with the command's default timeouts: a silent
# member is suspected (light view change, the token is regenerated) and then
# excluded; a survivor needs at most about the sum before ordering resumes.
_DEFAULTS = TokenRingConfig()
_RECOVERY = (
    _DEFAULTS.suspect_timeout
    + _DEFAULTS.token_timeout
    + _DEFAULTS.exclude_timeout
    + 3 * _DEFAULTS.change_timeout
)
# A loaded two-core machine may deschedule a process for seconds.
RECOVERY_WAIT = 2 * _RECOVERY + 10.0


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
                out.append((r["source"], r["seq"], r["payload"]))
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
            sequences[pid] = [(r["source"], r["seq"]) for r in records]
        broadcast = {(p, s) for p in pids for s in range(per_node)}
        report = check(sequences, broadcast=broadcast)
        assert report.ok, report.summary()
        assert all(sequences[p] == sequences[1] for p in pids)
    finally:
        stop_all(procs)


@pytest.mark.parametrize("members", [3, 5])
def test_survivors_keep_delivering_after_a_member_is_killed(members: int) -> None:
    """SIGKILL node 1 (the token holder is not observable from outside the
    process, so the victim is fixed) once everything it broadcast is delivered
    everywhere; the survivors, still a majority, order and deliver new
    commands within a wait derived from the timeouts."""
    per_node = 10
    pids = list(range(1, members + 1))
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    procs = []
    buffers = {pid: bytearray() for pid in pids}
    try:
        for pid in pids:
            procs.append(spawn(_argv(pid, pids, ports, "--duration=120")))
        for proc in procs:
            wait_for_line(proc, "ready", timeout=30)
        for i in range(per_node):
            for pid, proc in zip(pids, procs, strict=True):
                _say(proc, [f"before {i} from {pid}"])
        before = {
            pid: _read_deliveries(proc, per_node * len(pids), 30, buffers[pid])
            for pid, proc in zip(pids, procs, strict=True)
        }
        victim = procs[0]
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        survivors = dict(zip(pids[1:], procs[1:], strict=True))
        for i in range(per_node):
            for pid, proc in survivors.items():
                _say(proc, [f"after {i} from {pid}"])
        after = {
            pid: _read_deliveries(proc, per_node * len(survivors), RECOVERY_WAIT, buffers[pid])
            for pid, proc in survivors.items()
        }
        sequences = {pid: [(s, q) for s, q, _ in before[pid] + after[pid]] for pid in survivors}
        broadcast = {(p, s) for p in pids for s in range(per_node)}
        broadcast |= {(p, s) for p in survivors for s in range(per_node, 2 * per_node)}
        report = check(sequences, broadcast=broadcast)
        assert report.ok, report.summary()
        assert all(sequences[p] == sequences[2] for p in survivors)
        # Everything broadcast after the kill comes from a survivor.
        assert sorted(payload for _, _, payload in after[2]) == sorted(
            f"after {i} from {p}" for p in survivors for i in range(per_node)
        )
        for pid, proc in survivors.items():
            assert proc.poll() is None, f"survivor {pid} exited"
    finally:
        stop_all(procs)
