"""Three ``epto node`` OS processes on 127.0.0.1, each broadcasting: every
process delivers every event in the same order, over trio UDP, ZeroMQ and
the token ring on TCP."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from epto._incarnation import COUNT_MASK
from epto.check import check
from epto.keys import generate_group_key, save_group_key
from epto.log import read_log

from .processes import free_ports, spawn, stop_all, wait_for_line

PER_NODE = 20


@pytest.mark.parametrize(
    ("transport", "options"),
    [
        ("trio", ()),
        ("zmq", ()),
        ("trio", ("sealed", "logged")),
        ("zmq", ("sealed",)),
        ("trio", ("token-ring", "sealed")),
    ],
    ids=["trio", "zmq", "trio-sealed-logged", "zmq-sealed", "token-ring-tcp-sealed"],
)
def test_three_processes_deliver_the_same_sequence(
    transport: str, options: tuple[str, ...], tmp_path: Path
) -> None:
    udp = transport == "trio" and "token-ring" not in options
    kind = socket.SOCK_DGRAM if udp else socket.SOCK_STREAM
    ports = free_ports(3, kind)
    pids = [1, 2, 3]
    procs = []
    try:
        for pid, port in zip(pids, ports, strict=True):
            peers = [f"--peer={p}=127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)]
            argv = [sys.executable, "-m", "epto.cli", "node", f"--transport={transport}"]
            argv += [f"--id={pid}", f"--bind=127.0.0.1:{port}", *peers]
            argv += ["--round-interval=0.02", "--stdin", f"--expect={3 * PER_NODE}"]
            argv += [f"--output={tmp_path / f'{pid}.jsonl'}", f"--seed={pid}"]
            if "sealed" in options:
                key_file = tmp_path / "group.key"
                if not key_file.exists():
                    save_group_key(key_file, generate_group_key())
                argv.append(f"--group-key-file={key_file}")
            if "logged" in options:
                argv.append(f"--log-dir={tmp_path / 'logs'}")
            if "cyclon" in options:
                argv.append("--cyclon")
            if "token-ring" in options:
                argv.append("--mode=token-ring")
            else:
                # A stability window of 25 rounds (0.5 s) rather than the
                # derived 10: a process descheduled for longer than the window
                # on a busy two-core machine would otherwise get a hole and
                # never reach --expect (order would still hold).
                argv.append("--ttl=25")
            procs.append(spawn(argv))
        for proc in procs:
            wait_for_line(proc, "ready", timeout=30)
        # Every process is bound before anyone speaks.
        for i in range(PER_NODE):
            for pid, proc in zip(pids, procs, strict=True):
                assert proc.stdin is not None
                proc.stdin.write(f"command {i} from {pid}\n")
                proc.stdin.flush()
        for proc in procs:
            assert proc.wait(timeout=60) == 0
        sequences = {}
        payloads = {}
        for pid in pids:
            lines = (tmp_path / f"{pid}.jsonl").read_text().splitlines()
            records = [json.loads(line) for line in lines]
            # Each member starts once: its k-th event is its incarnation's
            # k-th (docs/node.md, *Restart*).
            sequences[pid] = [(r["source"], r["seq"] & COUNT_MASK) for r in records]
            payloads[pid] = [r["payload"] for r in records]
        broadcast = {(p, s) for p in pids for s in range(PER_NODE)}
        report = check(sequences, broadcast=broadcast)
        assert report.ok, report.summary()
        assert sequences[1] == sequences[2] == sequences[3]
        if "logged" in options:
            for pid in pids:
                logged = [
                    (r.source, r.seq & COUNT_MASK) for r in read_log(tmp_path / "logs" / str(pid))
                ]
                assert logged == sequences[pid]
        assert sorted(payloads[1]) == sorted(
            f"command {i} from {p}" for p in pids for i in range(PER_NODE)
        )
    finally:
        stop_all(procs)
