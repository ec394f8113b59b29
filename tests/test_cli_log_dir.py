"""``epto node --log-dir DIR`` (and ``epto editor --data-dir DIR``) creates
DIR when it is missing, as ``mkdir`` would, and refuses a missing parent in
one line naming it, before the node starts (docs/transports.md, *Command
line*): a mistyped path is said, not created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epto.cli import main
from epto.cli._files import directory_problem

NODE = ["node", "--id=1", "--peer=2=127.0.0.1:9", "--duration=0.2"]


def test_a_missing_parent_is_refused_and_nothing_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for where in ("nonexistent/x", "nonexistent/deeper/x"):
        path = tmp_path / where
        with pytest.raises(SystemExit) as caught:
            main([*NODE, f"--log-dir={path}"])
        parent = path.parent
        assert caught.value.code == f"epto node: --log-dir {path}: no such directory: {parent}"
        assert not (tmp_path / "nonexistent").exists()
    assert capsys.readouterr().out == ""


def test_the_directory_itself_is_created_and_holds_the_log(tmp_path: Path) -> None:
    path = tmp_path / "logs"
    assert main([*NODE, f"--log-dir={path}"]) == 0
    assert path.is_dir() and (path / "1").is_dir()
    # The same directory again (a restart on its log) is fine.
    assert main([*NODE, f"--log-dir={path}"]) == 0


def test_relative_paths_follow_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert directory_problem("logs") is None
    assert directory_problem(".") is None
    assert directory_problem("a/b") == "a/b: no such directory: a"
    assert directory_problem("afile") == "afile: afile is not a directory"
    assert directory_problem("afile/x") == "afile/x: afile is not a directory"
    os.mkdir("a")
    assert directory_problem("a/b") is None


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["simulate", "-n", "5", "--events", "5", "-q", "--log-dir", "{path}"], "--log-dir"),
        (["simulate", "-n", "5", "--events", "5", "-q", "--json", "{path}"], "--json"),
        (["simulate", "-n", "5", "--events", "5", "-q", "--plot", "{path}"], "--plot"),
        (["check", "{logs}", "--out", "{path}"], "--out"),
        (["analyze", "{logs}", "--out", "{path}"], "--out"),
    ],
)
def test_the_other_commands_refuse_a_missing_parent_before_they_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    """The same rule for the directories and files the other commands write,
    said before a run or an analysis (it failed with a traceback after a
    simulation, or created every missing directory), with their status for
    invalid options: 2 (1 means a violated property for these commands)."""
    logs = tmp_path / "logs"
    (logs / "1").mkdir(parents=True)
    path = tmp_path / "nonexistent" / "x"
    status = main([a.format(path=path, logs=logs) for a in argv])
    command = argv[0]
    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"epto {command}: {option} {path}: no such directory: {path.parent}"
    ]
    assert not (tmp_path / "nonexistent").exists()


def test_the_editors_data_dir_follows_the_same_rule(tmp_path: Path) -> None:
    path = tmp_path / "nonexistent" / "x"
    with pytest.raises(SystemExit) as caught:
        main(["editor", "--id=1", f"--data-dir={path}"])
    assert caught.value.code == f"epto editor: --data-dir {path}: no such directory: {path.parent}"
    assert not (tmp_path / "nonexistent").exists()
