"""``epto bench replication``'s parent process: a worker that does not answer
in time is reported as that system's failure, and the run goes on; EpTO's
losses are reported; ``--stall`` stops a worker and continues it."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from epto.benchmarks import replication


def _args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    replication.add_arguments(parser)
    args = parser.parse_args(["--commands", "5", "--timeout", "1"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_a_worker_that_misses_the_deadline_is_a_failed_row_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = _args()
    # The parent waits 10 ms in all: no spawned interpreter starts that fast.
    monkeypatch.setattr(replication, "_RESULT_GRACE", 0.01 - args.timeout)
    started = time.monotonic()
    row = replication._measure("pysyncobj", args)
    assert "no result within 0.01 s" in row["error"], row
    # The late workers were stopped, not waited for (a join of 10 s each).
    assert time.monotonic() - started < 20


def test_the_loss_notes_say_where_epto_lost_copies_and_nothing_when_none_were() -> None:
    none = {"sent": 10, "received": 10, "late": 0, "holes": 0, "send_failures": 0}
    assert replication._loss_notes(none) == []
    lost = {"sent": 10, "received": 7, "late": 5, "holes": 2, "send_failures": 1}
    assert replication._loss_notes(lost) == [
        "3 of 10 datagrams dropped by the kernel",
        "1 send failures",
        "5 copies refused as late",
        "2 holes",
    ]


def test_a_stalled_worker_is_continued_after_its_stall() -> None:
    # The worker's side of --stall: the process stops itself; the parent's
    # side continues it once it has been stopped for the stall's length.
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSTOP); print('continued')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        replication._resume_stalled(proc.pid, 0.05, time.monotonic() + 30)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out.strip() == "continued"


def test_an_incomplete_run_shows_no_cpu_figure_to_compare() -> None:
    # Its workers count CPU until the timeout, not until the last command.
    row = {
        "system": "epto-trio",
        "throughput": 1000.0,
        "local_p50": 0.01,
        "local_p99": 0.02,
        "all_p50": 0.01,
        "all_p99": 0.02,
        "cpu": 7.5,
        "applied": 8936,
        "complete": False,
    }
    line = replication._row(row, 3000)
    assert "incomplete: 8936 of 9000" in line
    assert "cpu 7.50 s until the timeout" in line
    assert " 7.50 " not in line.split("  incomplete")[0]
    complete = replication._row({**row, "complete": True, "applied": 9000}, 3000)
    assert "7.50" in complete and "timeout" not in complete
