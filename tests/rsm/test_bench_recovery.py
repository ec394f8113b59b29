"""``epto bench recovery`` in its smallest configuration: a replica SIGKILLed
and restarted with its id and data directory, one round, a small state; the
command completes and prints its rows. No figure and no verdict on the
library is asserted (a run that fails prints a failure row, which is what
the benchmark is for): only that the harness finishes, bounded, and prints
one row per run and one summary row per system."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

from epto.benchmarks import recovery

ROOT = Path(__file__).resolve().parents[2]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    recovery.add_arguments(parser)
    return parser.parse_args(
        ["--state-mb", "0.05", "--rounds", "1", "--missed", "3", "--down", "0.2", *argv]
    )


@pytest.fixture(autouse=True)
def _workers_find_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned workers import epto afresh: they need the checkout on their path.
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), path) if p))


def _rows(out: str, label: str) -> list[str]:
    return [
        line for line in out.splitlines() if re.match(rf"\s*round 1 {re.escape(label)}\s", line)
    ]


def test_a_restarted_token_ring_replica_is_timed_and_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = recovery.run(_args("--systems", "token-ring", "--scenarios", "one", "--timeout", "20"))
    out = capsys.readouterr().out
    assert out.startswith("command: epto bench recovery --systems token-ring"), out
    (row,) = _rows(out, "token-ring")
    # Either a measured row (times from the spawn, the value the first
    # command returned) or a failure row that says where the run stopped.
    measured = re.search(r"ready [\d.]+s, first command [\d.]+s \(incr -> \d+\), cpu", row)
    assert measured or " failed: " in row, out
    (summary,) = [line for line in out.splitlines() if re.match(r"token-ring\s+0\.05MB", line)]
    assert re.search(r"\d/1", summary), out
    assert status == (0 if measured and ";" not in row else 1), out
    assert out.rstrip().splitlines()[-1].startswith("took "), out


def test_pysyncobj_restarts_a_follower_and_its_value_is_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("pysyncobj")
    status = recovery.run(
        _args(
            "--systems",
            "pysyncobj",
            "--scenarios",
            "one",
            "--pysyncobj-cases",
            "follower",
            "--timeout",
            "20",
        )
    )
    out = capsys.readouterr().out
    (row,) = _rows(out, "pysyncobj/follower")
    if " failed: " in row:  # PySyncObj's liveness is not what this test is about
        assert status == 1, out
        return
    # 5 incr before the crash, 3 while down: the restarted replica's first
    # incr continues from the group's counter.
    assert "(incr -> 9)" in row, out
    assert status == 0, out


def test_unknown_names_are_refused() -> None:
    from epto import ConfigurationError

    with pytest.raises(ConfigurationError, match="--systems"):
        recovery.run(_args("--systems", "zookeeper"))
    with pytest.raises(ConfigurationError, match="--scenarios"):
        recovery.run(_args("--scenarios", "two"))
