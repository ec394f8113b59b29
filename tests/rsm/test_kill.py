"""SIGKILL a replica process at random points while it writes snapshots and
while it fetches its state (real processes, loopback): it recovers or fetches
again, never loads a half-written snapshot, never applies a command twice."""

from __future__ import annotations

import random
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode
from epto.transports._ports import free_ports

from epto.endpoint import NodeConfig
from epto.rsm import SnapshotStore

from .kill_worker import Journal

WORKER = Path(__file__).resolve().parent / "kill_worker.py"


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30.0) -> str:
    """The first line of ``proc``'s output starting with ``prefix``, waiting
    at most ``timeout`` seconds (a silent worker fails the test, never hangs it)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"worker exited ({proc.poll()}) before {prefix!r}")
            if line.startswith(prefix):
                return line
    raise AssertionError(f"no {prefix!r} within {timeout} s")


def _port() -> int:
    return free_ports(1, socket.SOCK_STREAM)[0]


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


async def _recovered(data_dir: Path, port: int) -> list[int]:
    address = f"127.0.0.1:{port}"
    node = NodeConfig(mode="token-ring", pid=1, bind=address, members={1: address}, seed=1)
    async with ReplicatedNode(Journal(), node, ReplicaConfig(data_dir=str(data_dir))) as replica:
        machine = replica.machine
        assert isinstance(machine, Journal)
        return list(machine.seen)


@pytest.mark.slow
def test_killed_while_writing_snapshots_it_recovers_every_command_once(tmp_path: Path) -> None:
    rng = random.Random(17)
    data_dir = tmp_path / "writer"
    applied_before = 0
    loaded_snapshots = 0
    for point in range(16):
        port, transfer = free_ports(2, socket.SOCK_STREAM)
        proc = _spawn("write", str(data_dir), str(port), str(transfer))
        ready = _line(proc, "ready")
        assert int(ready.split()[1]) >= applied_before  # nothing applied was lost
        time.sleep(rng.uniform(0.2, 1.2))
        _kill(proc)
        store = SnapshotStore(data_dir / "snapshots")
        latest = store.latest()
        assert store.corrupt == 0  # a killed writer leaves a .tmp, never a bad snapshot
        loaded_snapshots += latest is not None
        seen = trio.run(_recovered, data_dir, _port())
        assert seen == list(range(len(seen))), f"point {point}: a command lost or applied twice"
        assert len(seen) >= applied_before
        applied_before = len(seen)
    assert applied_before > 30 and loaded_snapshots >= 8


@pytest.mark.slow
def test_killed_while_fetching_its_state_it_fetches_again(tmp_path: Path) -> None:
    rng = random.Random(23)
    ports = free_ports(6, socket.SOCK_STREAM)
    port, transfers = ports[0], [f"127.0.0.1:{p}" for p in ports[3:]]
    writer = _spawn(
        "write3",
        str(tmp_path / "writer"),
        ",".join(map(str, ports[:3])),
        ",".join(map(str, ports[3:])),
    )
    try:
        _line(writer, "ready", timeout=60)
        _line(writer, "applied 200", timeout=60)
        # One joining member (id 100, one data directory), killed at drawn
        # times and started again: each start is that member again, which the
        # three-member group admits in place of the start before.
        joiner_dir = tmp_path / "joiner"
        for _ in range(6):
            joiner = _spawn("join", str(joiner_dir), str(_port()), str(port), *transfers)
            time.sleep(rng.uniform(0.0, 0.8))
            if joiner.poll() is None:
                _kill(joiner)
        joiner = _spawn("join", str(joiner_dir), str(_port()), str(port), *transfers)
        try:
            _, applied, _ = _line(joiner, "ready", timeout=60).split()
            assert int(applied) >= 200
        finally:
            _kill(joiner)
    finally:
        _kill(writer)
    # The state it fetched was saved as its log's base: every command once.
    stored = SnapshotStore(joiner_dir / "snapshots").latest()
    assert stored is not None and stored.snapshot.applied >= 200
    journal = Journal()
    journal.restore(stored.snapshot.state)
    assert journal.seen == list(range(stored.snapshot.applied))
