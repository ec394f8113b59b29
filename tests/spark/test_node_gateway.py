"""``epto node --gateway``: Spark writes into a group started from the command line."""

from __future__ import annotations

import base64
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from epto.transports._ports import free_ports

from epto.spark import SinkRow, SinkRows

pytestmark = pytest.mark.spark

NODE = [sys.executable, "-m", "epto.cli", "node", "--transport=trio", "--mode=token-ring"]


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def _wait_for_ready(proc: subprocess.Popen[str], timeout: float) -> list[str]:
    """``proc``'s stderr lines up to its ready line (read from the descriptor,
    so that two lines written at once are both seen)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            part = os.read(fd, 4096)
            if not part:
                raise AssertionError(f"process exited ({proc.poll()}) before ready: {data!r}")
            data += part
            lines = data.decode(errors="replace").splitlines()
            if any(line.startswith("ready ") for line in lines):
                return lines
    raise AssertionError(f"no ready line within {timeout} s: {data!r}")


def _stop_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stderr):
            if stream is not None:
                stream.close()


def _rows(path: Path) -> list[SinkRow]:
    """The sink rows in a node's delivery lines, each identity once."""
    dedup, rows = SinkRows(), []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.endswith("}"):
            continue  # a line still being written
        record = json.loads(line)
        payload = (
            base64.b64decode(record["payload_b64"])
            if "payload_b64" in record
            else record["payload"].encode()
        )
        rows += dedup.feed(payload) or []
    return rows


def _wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_a_dataframe_written_to_a_command_line_group_is_delivered_once_everywhere(
    spark: Any, tmp_path: Path
) -> None:
    """Three ``epto node`` processes, member 1 with ``--gateway`` and a token
    file; ``df.write.format("epto")`` through it; every member's output has
    every row exactly once."""
    token = tmp_path / "token"
    token.write_text("s3cret\n", encoding="utf-8")
    token.chmod(0o600)
    pids = (1, 2, 3)
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    peers = [f"--peer={pid}=127.0.0.1:{port}" for pid, port in zip(pids, ports, strict=True)]
    outputs = {pid: tmp_path / f"{pid}.jsonl" for pid in pids}
    procs: list[subprocess.Popen[str]] = []
    try:
        for pid, port in zip(pids, ports, strict=True):
            argv = [*NODE, f"--id={pid}", f"--bind=127.0.0.1:{port}", *peers, "--stdin"]
            argv.append(f"--output={outputs[pid]}")
            if pid == 1:
                argv += ["--gateway=127.0.0.1:0", f"--gateway-token-file={token}"]
            procs.append(_spawn(argv))
        lines = {pid: _wait_for_ready(proc, 30) for pid, proc in zip(pids, procs, strict=True)}
        (address,) = (line.split()[2] for line in lines[1] if line.startswith("gateway 1 "))
        n = 200
        df = spark.range(0, n, numPartitions=2).selectExpr(
            "lpad(cast(id as string), 4, '0') as value"
        )
        (
            df.write.format("epto")
            .option("gateway", address)
            .option("token", "s3cret")
            .option("timeout", "20")
            .mode("append")
            .save()
        )
        assert _wait_for(lambda: all(len(_rows(p)) >= n for p in outputs.values()), 20)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()  # end of input: the node stops
        for proc in procs:
            assert proc.wait(timeout=20) == 0
    finally:
        _stop_all(procs)
    expected = [f"{i:04d}".encode() for i in range(n)]
    for pid, path in outputs.items():
        rows = _rows(path)
        assert sorted(r.value for r in rows) == expected, pid
        assert len({(r.stream, r.batch, r.partition, r.row) for r in rows}) == n, pid


def test_a_gateway_token_file_others_can_read_is_refused_in_one_line(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n", encoding="utf-8")
    token.chmod(0o644)
    for path, reason in ((token, "accessible by other users"), (tmp_path, "a directory")):
        argv = [*NODE, "--id=1", "--gateway=127.0.0.1:0", f"--gateway-token-file={path}"]
        done = subprocess.run(
            [*argv, "--duration=1"], capture_output=True, text=True, timeout=30, env=os.environ
        )
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and reason in done.stderr, done.stderr
