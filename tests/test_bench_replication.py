"""``epto bench replication``'s parent process: a worker that does not answer
in time is reported as that system's failure, and the run goes on."""

from __future__ import annotations

import argparse
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
