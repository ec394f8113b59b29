"""What a newcomer types wrong in the first hour is refused in one line on
standard error with a non-zero exit status: the parser's errors name the
option and point to ``--help``
instead of printing twenty lines of usage, an option of another command
(``epto simulate --n``, as ``epto params --n``) is accepted or named, and a
value out of range that a command did not check is one line, not a
traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from epto.cli import build_parser, main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit status and standard error of ``epto ARGV``, as the interpreter
    reports a ``SystemExit`` (a message goes to stderr, status 1)."""
    try:
        status = main(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            status = 1
        else:
            status = int(exc.code or 0)
    return status, capsys.readouterr().err.strip().splitlines()


def _help(prog: str) -> str:
    return f" (see '{prog} --help')"


PARSER_ERRORS = [
    ([], "epto: error: the following arguments are required: COMMAND" + _help("epto")),
    (["nosuch"], "epto: error: argument COMMAND: invalid choice: 'nosuch'"),
    (
        ["simulate", "--n", "0"],
        "epto simulate: error: argument --processes/-n/--n: must be a positive integer, got 0"
        + _help("epto simulate"),
    ),
    (
        ["simulate", "--n", "-3"],
        "epto simulate: error: argument --processes/-n/--n: must be a positive integer, got -3",
    ),
    (
        ["simulate", "--n", "abc"],
        "epto simulate: error: argument --processes/-n/--n: must be a positive integer, got 'abc'",
    ),
    (["simulate", "--events", "abc"], "epto simulate: error: argument --events: invalid int"),
    (
        ["simulate", "--stray", "1"],
        "epto simulate: error: unrecognized arguments: --stray 1" + _help("epto simulate"),
    ),
    (["params", "--n", "abc"], "epto params: error: argument --n: invalid int value: 'abc'"),
    (["bench", "nosuch"], "epto bench: error: argument TOPIC: invalid choice: 'nosuch'"),
    (
        ["bench", "core", "--stray"],
        "epto bench core: error: unrecognized arguments: --stray" + _help("epto bench core"),
    ),
    (["bench", "wire", "--payload", "-1"], "epto bench wire: error: argument --payload: must"),
    (["bench", "cyclon", "-n", "0"], "epto bench cyclon: error: argument -n: must be a positive"),
    (["demo", "--round-interval", "0"], "epto demo: error: argument --round-interval: must be"),
    (["demo", "--timeout", "-1"], "epto demo: error: argument --timeout: must be a positive"),
    (["keygen", "group"], "epto keygen group: error: the following arguments are required: path"),
    (
        ["node", "--id", "1", "--peer", "1=127.0.0.1:0", "--fanout", "0"],
        "epto node: error: argument --fanout: must be a positive integer, got 0",
    ),
    (
        ["node", "--id", "1", "--peer", "1=127.0.0.1:0", "--duration", "-1"],
        "epto node: error: argument --duration: must be a positive number, got -1",
    ),
    (
        ["node", "--id", "1", "--peer", "1=127.0.0.1:0", "--expect", "0"],
        "epto node: error: argument --expect: must be a positive integer, got 0",
    ),
]


@pytest.mark.parametrize(("argv", "said"), PARSER_ERRORS, ids=lambda v: " ".join(v) or "-")
def test_a_wrong_option_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, err = _run(argv, capsys)
    assert status == 2
    assert len(err) == 1 and err[0].startswith(said), err
    assert err[0].endswith("--help')"), err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["params", "--n", "0"], "epto params: n must be an integer of at least 2 processes"),
        (["bench", "core", "--processes", "0"], "epto bench core: n must be an integer of at"),
        (["bench", "udp_scale", "--nodes", "1"], "epto bench udp_scale: n must be an integer"),
        (["bench", "replication", "--commands", "0"], "epto bench replication: --commands must"),
        (
            ["bench", "replication", "--systems", "epto,pysyncobj"],
            "epto bench replication: --systems: unknown ['epto']; choose from epto-trio,",
        ),
        (["bench", "cyclon", "-n", "1"], "epto bench cyclon: -n must be at least 2 processes"),
    ],
)
def test_a_value_out_of_range_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, err = _run(argv, capsys)
    assert status == 2
    assert len(err) == 1 and err[0].startswith(said), err


def test_simulate_takes_n_as_epto_params_does() -> None:
    parser = build_parser()
    for flag in ("--n", "-n", "--processes"):
        assert parser.parse_args(["simulate", flag, "8"]).processes == 8


def test_analyze_refuses_a_path_without_logs_before_starting_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = _run(["analyze", str(tmp_path / "nonexistent")], capsys)
    assert (status, err) == (2, [f"epto analyze: {tmp_path / 'nonexistent'} is not a directory"])
    status, err = _run(["analyze", str(tmp_path)], capsys)
    assert (status, err) == (
        2,
        [f"epto analyze: no delivery logs in {tmp_path} (one sub-directory per node)"],
    )


def test_the_command_prints_one_line_and_help_still_works() -> None:
    def epto(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "epto", *args], capture_output=True, text=True, timeout=120
        )

    for argv in (["simulate", "--n", "0"], ["bench", "nosuch"], ["simulate", "--events", "x"]):
        done = epto(*argv)
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for argv in (["--help"], ["simulate", "--help"], ["bench", "--help"]):
        done = epto(*argv)
        assert done.returncode == 0 and done.stdout.startswith("usage: epto"), argv
