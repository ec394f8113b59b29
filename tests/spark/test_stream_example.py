"""examples/spark_stream.py runs twice on the same logs and checkpoint, the
second run continuing both; a checkpoint of other logs is a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import epto
from epto.log import check_logs, list_nodes, read_log

pytestmark = [pytest.mark.spark, pytest.mark.slow]
HOME = Path(epto.__file__).resolve().parent.parent
EXAMPLE = HOME / "examples" / "spark_stream.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--processes", "3", "--rate", "10", "--seconds", "1", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(HOME)},
    )


def sources(logs: Path) -> set[int]:
    return {r.source for node in list_nodes(logs) for r in read_log(logs / str(node))}


def test_a_second_run_continues_the_logs_and_the_query(tmp_path: Path) -> None:
    logs, checkpoint = tmp_path / "logs", tmp_path / "checkpoint"
    first = run("--logs", str(logs), "--checkpoint", str(checkpoint))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "duplicates 0" in first.stdout and "total order ok" in first.stdout
    before = check_logs(logs)[0]["deliveries"]
    assert sources(logs) <= {0, 1, 2} and before > 0

    second = run("--logs", str(logs), "--checkpoint", str(checkpoint))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "continuing: these processes broadcast as sources 3 and up" in second.stdout
    summary, _ = check_logs(logs)
    assert summary["integrity"]["duplicates"] == 0 and summary["order"]["ok"]
    assert summary["deliveries"] > before and sources(logs) & {3, 4, 5}
    assert list_nodes(logs) == [0, 1, 2]  # the same three members, one log each
    assert "duplicates 0" in second.stdout and "total order ok" in second.stdout

    other = run("--logs", str(tmp_path / "other"), "--checkpoint", str(checkpoint))
    assert other.returncode == 1
    assert other.stderr.strip().splitlines() == [
        f"spark_stream.py: checkpoint {checkpoint} belongs to the logs in {logs}, "
        f"not {tmp_path / 'other'}; pass a new --checkpoint"
    ]
    assert not (tmp_path / "other").exists()
