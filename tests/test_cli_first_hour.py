"""What a newcomer meets first on the command line: ``python -m epto`` runs
the command, ``epto check`` on a path without logs says so (exit 2, one
line) instead of reporting an empty run as "ok", and ``epto node`` refuses
options that cannot work in one line, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _epto(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epto", *args], capture_output=True, text=True, timeout=120
    )


def test_python_dash_m_epto_runs_the_command() -> None:
    done = _epto("--help")
    assert done.returncode == 0
    assert "check" in done.stdout and "simulate" in done.stdout


def test_check_of_a_missing_directory_is_an_error_of_one_line(tmp_path: Path) -> None:
    done = _epto("check", str(tmp_path / "nonexistent"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"epto check: no such directory: {tmp_path / 'nonexistent'}"
    ]


def test_check_of_a_directory_without_logs_is_an_error(tmp_path: Path) -> None:
    done = _epto("check", str(tmp_path))
    assert done.returncode == 2
    assert "ok" not in done.stdout
    assert "no delivery logs" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_node_options_that_cannot_work_are_refused_in_one_line() -> None:
    base = ["node", "--id", "1", "--peer", "1=127.0.0.1:1", "--duration", "0.1"]
    for extra, said in (
        (["--bind", "nonsense"], "address must be 'host:port', got 'nonsense'"),
        (["--peer", "2=nonsense"], "address must be 'host:port', got 'nonsense'"),
        (["--round-interval", "-1"], "round_interval must be a positive finite number"),
        (["--group-key-file", "/nonexistent/key"], "No such file or directory"),
    ):
        done = _epto(*base, *extra)
        assert done.returncode != 0, extra
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("epto node: "), (extra, done.stderr)
        assert said in lines[0], (extra, lines)


def test_a_node_that_stops_before_its_expected_deliveries_says_so() -> None:
    done = _epto(
        "node", "--id", "1", "--peer", "1=127.0.0.1:0", "--expect", "5", "--duration", "0.3"
    )
    assert done.returncode == 4
    assert "stopped after 0 of the 5 deliveries expected" in done.stderr
