"""Files that cannot work are refused in one line before a command starts:
the key files of ``epto node``
(missing, a directory, readable by others, malformed, of another kind), its
``--output``, ``--status`` and ``--log-dir``, and the files ``epto keygen``
creates and reads. No traceback, a non-zero exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epto.cli import main

pytest.importorskip("cryptography")

NODE = ["node", "--id=1", "--peer=2=127.0.0.1:9", "--duration=0.2"]


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


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    def secret(name: str, data: bytes, mode: int = 0o600) -> Path:
        path = tmp_path / name
        path.write_bytes(data)
        os.chmod(path, mode)
        return path

    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    assert main(["keygen", "group", str(tmp_path / "group.key")]) == 0
    assert main(["keygen", "signing", str(tmp_path / "n1.key"), "--pid=1"]) == 0
    return {
        "missing": tmp_path / "missing.key",
        "adir": tmp_path / "adir",
        "afile": tmp_path / "afile",
        "nodir": tmp_path / "nodir",
        "open": secret("open.key", bytes(range(32)).hex().encode(), 0o644),
        "nothex": secret("nothex.key", b"not a key\n"),
        "notjson": secret("notjson.roster", b"{ not json"),
        "group": tmp_path / "group.key",
        "signing": tmp_path / "n1.key",
        "public": tmp_path / "n1.key.pub",
    }


NODE_CASES = [
    ("--group-key-file", "missing", "{path}: No such file or directory"),
    ("--group-key-file", "adir", "{path} is a directory, not a key file"),
    ("--group-key-file", "open", "{path} is accessible by other users"),
    ("--group-key-file", "nothex", "{path} is neither a key file of epto keygen"),
    ("--group-key-file", "signing", "{path} is not an epto-group-key file"),
    ("--signing-key", "missing", "{path}: No such file or directory"),
    ("--signing-key", "adir", "{path} is a directory, not a key file"),
    ("--signing-key", "group", "{path} is not an epto-signing-key file"),
    ("--roster", "missing", "{path}: No such file or directory"),
    ("--roster", "adir", "{path} is a directory, not a key file"),
    ("--roster", "notjson", "{path} is not a key file"),
    ("--roster", "public", "{path} is not an epto-roster file"),
]


@pytest.mark.parametrize(("option", "name", "said"), NODE_CASES)
def test_epto_node_refuses_a_key_file_in_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], option: str, name: str, said: str
) -> None:
    path = files[name]
    status, err = _run([*NODE, f"{option}={path}"], capsys)
    assert status != 0
    assert len(err) == 1 and err[0].startswith("epto node: "), err
    assert said.format(path=path) in err[0]


@pytest.mark.parametrize(
    ("option", "where", "said"),
    [
        ("--output", "nodir/out.jsonl", "--output {path}: no such directory: {parent}"),
        ("--output", "adir", "--output {path} is a directory"),
        ("--output", "afile/out.jsonl", "--output {path}: {parent} is not a directory"),
        ("--status", "nodir/status.json", "--status {path}: no such directory: {parent}"),
        ("--status", "adir", "--status {path} is a directory"),
        ("--log-dir", "afile", "--log-dir {path}: {path} is not a directory"),
        ("--log-dir", "afile/logs/more", "--log-dir {path}: {afile} is not a directory"),
    ],
)
def test_epto_node_refuses_an_output_path_in_one_line(
    tmp_path: Path,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    option: str,
    where: str,
    said: str,
) -> None:
    path = tmp_path / where
    status, err = _run([*NODE, f"{option}={path}"], capsys)
    assert status != 0
    assert err == [f"epto node: {said.format(path=path, parent=path.parent, afile=files['afile'])}"]
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["group", "{nodir}/g.key"], "{nodir}/g.key: no such directory: {nodir}"),
        (["signing", "{nodir}/s.key"], "{nodir}/s.key: no such directory: {nodir}"),
        (["roster", "{nodir}/r.json", "{public}"], "{nodir}/r.json: no such directory: {nodir}"),
        (["group", "{adir}"], "{adir} is a directory"),
        (["group", "{afile}/g.key"], "{afile}/g.key: {afile} is not a directory"),
        (["roster", "{nodir}.json", "{missing}"], "{missing}: No such file or directory"),
        (["roster", "{nodir}.json", "{notjson}"], "{notjson} is not a key file"),
    ],
)
def test_epto_keygen_refuses_a_path_in_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, err = _run(["keygen", *(a.format(**files) for a in argv)], capsys)
    assert status != 0
    assert len(err) == 1 and err[0].startswith(f"epto keygen: {said.format(**files)}"), err
    assert not files["nodir"].exists()


def test_the_command_itself_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    for argv, prefix in (
        ([*NODE, f"--group-key-file={tmp_path}"], "epto node: "),
        ([*NODE, f"--output={tmp_path / 'nodir' / 'out'}"], "epto node: "),
        (["keygen", "group", str(tmp_path / "nodir" / "g.key")], "epto keygen: "),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "epto", *argv], capture_output=True, text=True, timeout=120
        )
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix), done.stderr
