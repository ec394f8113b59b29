"""Key files that are not regular files (a FIFO, a directory, a device such
as /dev/zero, a socket) are refused by the one key loader in one line naming
the file, without reading them, whatever command takes the file; a field of
the wrong size names the file too."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import epto
from epto import keys
from epto.cli import main

pytest.importorskip("cryptography")

NODE = ["node", "--id=1", "--peer=2=127.0.0.1:9", "--duration=0.2"]
LOADERS = (keys.load_group_key, keys.load_signing_key, keys.load_roster, keys.load_public_key)


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, tuple[Path, str]]]:
    """Paths that are not regular files, with what the refusal calls them."""
    fifo = tmp_path / "group.fifo"
    os.mkfifo(fifo, 0o600)
    (tmp_path / "adir").mkdir(mode=0o700)
    sock_path = tmp_path / "a.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    out = {
        "fifo": (fifo, "a FIFO"),
        "dir": (tmp_path / "adir", "a directory"),
        "socket": (sock_path, "a socket"),
        "zero": (Path("/dev/zero"), "a character device"),
    }
    # A symbolic link is followed: what it points to decides.
    (tmp_path / "link.key").symlink_to(fifo)
    out["link"] = (tmp_path / "link.key", "a FIFO")
    try:
        yield out
    finally:
        sock.close()


@pytest.mark.parametrize("kind", ["fifo", "dir", "socket", "zero", "link"])
def test_every_loader_refuses_what_is_not_a_regular_file(
    specials: dict[str, tuple[Path, str]], kind: str
) -> None:
    path, said = specials[kind]
    for load in LOADERS:
        with pytest.raises(epto.ConfigurationError) as caught:
            load(path)
        assert str(caught.value) == f"{path} is {said}, not a key file"


def _one_line(argv: list[str]) -> tuple[int, list[str]]:
    """``epto ARGV`` in a fresh interpreter, with a bound: a command that
    blocked on a FIFO would fail here instead of hanging the suite."""
    done = subprocess.run(
        [sys.executable, "-m", "epto", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stderr.strip().splitlines()


def test_a_fifo_given_to_epto_node_or_epto_editor_is_refused_at_once(
    specials: dict[str, tuple[Path, str]],
) -> None:
    fifo, _ = specials["fifo"]
    for argv, prefix in (
        ([*NODE, f"--group-key-file={fifo}"], "epto node: "),
        ([*NODE, f"--signing-key={fifo}"], "epto node: "),
        ([*NODE, f"--roster={fifo}"], "epto node: "),
        (["editor", "--id=1", "--duration=0.2", f"--group-key-file={fifo}"], "epto editor: "),
    ):
        status, err = _one_line(argv)
        assert status != 0
        assert err == [f"{prefix}{fifo} is a FIFO, not a key file"], argv


def test_keygen_roster_refuses_a_public_key_that_is_a_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["keygen", "roster", str(tmp_path / "r.json"), "/dev/zero"])
    assert status != 0
    assert capsys.readouterr().err.strip() == (
        "epto keygen: /dev/zero is a character device, not a key file"
    )
    assert not (tmp_path / "r.json").exists()


def _doc(path: Path, doc: dict[str, object], mode: int = 0o600) -> Path:
    path.write_text(json.dumps(doc))
    os.chmod(path, mode)
    return path


def test_a_field_of_the_wrong_size_names_the_file(tmp_path: Path) -> None:
    five = base64.b64encode(b"12345").decode()
    good = base64.b64encode(bytes(32)).decode()
    cases = [
        (
            keys.load_group_key,
            _doc(
                tmp_path / "g.key",
                {"type": "epto-group-key", "key_id": 1, "cipher": "aes-256-gcm", "secret": five},
            ),
            "secret must be 32 bytes, not 5",
        ),
        (
            keys.load_group_key,
            _doc(
                tmp_path / "id.key",
                {"type": "epto-group-key", "key_id": 0, "cipher": "aes-256-gcm", "secret": good},
            ),
            "GroupKey.key_id must be in 1..255, got 0",
        ),
        (
            keys.load_group_key,
            _doc(
                tmp_path / "b.key",
                {"type": "epto-group-key", "key_id": True, "cipher": "aes-256-gcm", "secret": good},
            ),
            "key_id must be an integer",
        ),
        (
            keys.load_signing_key,
            _doc(tmp_path / "s.key", {"type": "epto-signing-key", "private": five, "public": good}),
            "private must be 32 bytes, not 5",
        ),
        (
            keys.load_public_key,
            _doc(tmp_path / "p.pub", {"type": "epto-public-key", "public": "%%%"}, 0o644),
            "public is not base64",
        ),
        (
            keys.load_roster,
            _doc(tmp_path / "r.json", {"type": "epto-roster", "members": {"2": five}}, 0o644),
            "key of 2 must be 32 bytes, not 5",
        ),
        (
            keys.load_roster,
            _doc(tmp_path / "u.json", {"type": "epto-roster", "members": {"\u00b2": good}}, 0o644),
            "member id '\u00b2' is not an integer",
        ),
    ]
    for load, path, said in cases:
        with pytest.raises(epto.ConfigurationError) as caught:
            load(path)
        assert str(caught.value) == f"{path}: {said}"


def test_epto_node_names_the_file_of_a_short_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    five = base64.b64encode(b"12345").decode()
    path = _doc(
        tmp_path / "g.key",
        {"type": "epto-group-key", "key_id": 1, "cipher": "aes-256-gcm", "secret": five},
    )
    with pytest.raises(SystemExit) as caught:
        main([*NODE, f"--group-key-file={path}"])
    assert caught.value.code == f"epto node: {path}: secret must be 32 bytes, not 5"


def test_a_deeply_nested_key_file_is_refused_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b'{"x": ' + b"[" * 200_000)
    os.chmod(path, 0o600)
    for load in LOADERS:
        with pytest.raises(epto.ConfigurationError, match=r"deep\.json is not a key file"):
            load(path)


def test_a_missing_key_file_is_one_line_for_every_command(tmp_path: Path) -> None:
    missing = tmp_path / "missing.key"
    with pytest.raises(epto.ConfigurationError) as caught:
        keys.load_group_key(missing)
    assert str(caught.value) == f"{missing}: No such file or directory"
    status, err = _one_line(["editor", "--id=1", "--duration=0.2", f"--group-key-file={missing}"])
    assert status != 0 and err == [f"epto editor: {missing}: No such file or directory"]


def test_a_signing_key_file_whose_halves_do_not_match_is_refused(tmp_path: Path) -> None:
    private, _ = keys.generate_signing_key()
    _, other_public = keys.generate_signing_key()
    doc = {
        "type": "epto-signing-key",
        "private": base64.b64encode(private).decode(),
        "public": base64.b64encode(other_public).decode(),
    }
    path = _doc(tmp_path / "mixed.key", doc)
    with pytest.raises(epto.ConfigurationError) as caught:
        keys.load_signing_key(path)
    assert str(caught.value) == f"{path}: public is not the public key of private"
