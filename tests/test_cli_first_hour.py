"""What a newcomer meets first on the command line: ``python -m epto`` runs
the command, and ``epto check`` on a path without logs says so (exit 2, one
line) instead of reporting an empty run as "ok"."""

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
