"""``./dev`` says what it does while it sets a machine up: a line before each
step, and every few seconds
while pip runs, instead of a minute of silence. The install step runs here
with a stand-in Python whose pip only sleeps: nothing is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

DEV = Path(__file__).resolve().parents[1] / "dev"

FAKE_PYTHON = """#!/usr/bin/env bash
# A stand-in for python3: "-m venv DIR" makes DIR/bin/python this script;
# pip sleeps, prints a line and succeeds (or fails with FAKE_PIP_FAILS=1);
# "import epto.transports" fails, so the install is due.
case "$*" in
    "-m venv "*)
        mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
    *"--upgrade pip"*)
        echo "Requirement already satisfied: pip" ;;
    *"-e .[dev]"*)
        echo "Collecting pyspark"; sleep ${FAKE_SLEEP:-3}; echo "Building wheel for epto"
        [ "${FAKE_PIP_FAILS:-0}" = 1 ] && { echo "ERROR: no such package"; exit 1; }
        echo "Successfully installed epto" ;;
    *) exit 1 ;;
esac
"""


def _ensure_venv(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    script = f'source "{DEV}" && ensure_venv && echo "PATH=$PATH"'
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHON": str(fake),
            "DEV_VENV": str(tmp_path / "venv"),
            "DEV_PROGRESS_EVERY": "1",
            **env,
        },
    )


def test_dev_parses() -> None:
    subprocess.run(["bash", "-n", str(DEV)], check=True)


def test_the_install_says_each_step_and_its_progress(tmp_path: Path) -> None:
    done = _ensure_venv(tmp_path)
    assert done.returncode == 0, done.stderr
    said = done.stderr.splitlines()
    steps = [line.split(" (")[0].split(":")[1].strip() for line in said if "  still" not in line]
    assert steps == [
        f"creating the virtual environment {tmp_path / 'venv'} with {tmp_path / 'python3'}",
        f"installing the project into {tmp_path / 'venv'}",
        "upgrading pip",
        "installing the project and its dev extras",
        steps[-1],
    ]
    assert steps[-1].startswith("installed in ")
    progress = [line for line in said if "still installing the project after" in line]
    assert progress, said
    assert all(line.startswith("dev:   still installing the project after ") for line in progress)
    assert "Collecting pyspark" in progress[0]
    assert (tmp_path / "venv" / ".epto-installed").is_file()
    assert f"PATH={tmp_path / 'venv' / 'bin'}:" in done.stdout
    assert "Successfully installed epto" in (tmp_path / "venv" / "install.log").read_text()


def test_a_failed_install_shows_the_log_and_fails(tmp_path: Path) -> None:
    done = _ensure_venv(tmp_path, FAKE_PIP_FAILS="1")
    assert done.returncode == 1
    assert "ERROR: no such package" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"dev: installation failed; see {tmp_path / 'venv' / 'install.log'}"
    )
    assert not (tmp_path / "venv" / ".epto-installed").exists()


@pytest.mark.parametrize("command", ["test", "demo", "shell"])
def test_the_commands_are_still_there(command: str) -> None:
    assert f"\n    {command})\n" in DEV.read_text()
