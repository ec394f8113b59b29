"""Helpers to run nodes as separate OS processes on 127.0.0.1, bounded waits."""

from __future__ import annotations

import selectors
import subprocess
import time
from collections.abc import Sequence

from epto.transports._ports import free_ports as free_ports


def wait_for_line(
    proc: subprocess.Popen[str], prefix: str, timeout: float, *, stdout: bool = False
) -> str:
    """The first line of ``proc``'s stderr (or stdout) starting with ``prefix``."""
    stream = proc.stdout if stdout else proc.stderr
    assert stream is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            line = stream.readline()
            if not line:
                raise AssertionError(f"process exited ({proc.poll()}) before {prefix!r}")
            if line.startswith(prefix):
                return line
    raise AssertionError(f"no {prefix!r} line within {timeout} s")


def spawn(argv: Sequence[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def stop_all(procs: Sequence[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
