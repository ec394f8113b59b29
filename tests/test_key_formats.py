"""One loader for every key format ``epto node`` and ``epto keygen`` accept
(docs/security.md, *Key files*): every secret file gets the permission check,
raw keys are read as their exact 32 bytes, and ``epto node`` turns signing
keys and rosters into a signed node configuration."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import epto
from epto import keys
from epto.cli import build_parser, main
from epto.cli._node import _config

pytest.importorskip("cryptography")


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _node_config(*argv: str) -> object:
    args = build_parser().parse_args(["node", "--id=1", "--peer=2=127.0.0.1:9", *argv])
    return _config(args)


@pytest.mark.parametrize(
    "content",
    [bytes(range(32)).hex().encode(), bytes(range(32)).hex().encode() + b"\n", bytes(range(32))],
    ids=["hex", "hex-newline", "raw"],
)
def test_a_group_readable_key_is_refused_whatever_its_format(
    tmp_path: Path, content: bytes
) -> None:
    path = _write(tmp_path / "group.key", content, 0o644)
    with pytest.raises(epto.ConfigurationError, match=r"group\.key .*mode -rw-r--r--.*chmod 600"):
        keys.load_group_key(path)
    with pytest.raises(SystemExit, match="chmod 600"):
        main(
            ["node", "--id=1", "--peer=2=127.0.0.1:9", "--duration=0.2", f"--group-key-file={path}"]
        )
    os.chmod(path, 0o600)
    assert keys.load_group_key(path).secret == bytes(range(32))


def test_256_random_raw_keys_load_exactly(tmp_path: Path) -> None:
    rng = random.Random(2024)
    for i in range(256):
        raw = rng.randbytes(32)
        path = _write(tmp_path / f"k{i}", raw)
        assert keys.load_group_key(path).secret == raw
        config = _node_config(f"--group-key-file={path}")
        assert config.group_key is not None and config.group_key.secret == raw  # type: ignore[attr-defined]


def test_raw_keys_that_look_like_text_are_still_raw(tmp_path: Path) -> None:
    for raw in (b" " * 32, b"{" + bytes(31), b"\n" * 32, b"0" * 32):
        assert keys.load_group_key(_write(tmp_path / "k", raw)).secret == raw
        (tmp_path / "k").unlink()


def test_what_is_not_a_key_is_refused_with_the_file_named(tmp_path: Path) -> None:
    for content in (b"x" * 31, b"z" * 64, b"not a key file at all"):
        path = _write(tmp_path / "bad.key", content)
        with pytest.raises(epto.ConfigurationError, match=r"bad\.key"):
            keys.load_group_key(path)
        path.unlink()


def test_signing_keys_in_every_format(tmp_path: Path) -> None:
    private, public = keys.generate_signing_key()
    keys.save_signing_key(tmp_path / "json.key", private, public, pid=1)
    for path in (
        tmp_path / "json.key",
        _write(tmp_path / "hex.key", private.hex().encode() + b"\n"),
        _write(tmp_path / "raw.key", private),
    ):
        assert keys.load_signing_key(path) == (private, public)
    loose = _write(tmp_path / "loose.key", private, 0o640)
    with pytest.raises(epto.ConfigurationError, match=r"loose\.key"):
        keys.load_signing_key(loose)


def test_epto_node_signs_and_verifies_with_keygen_files(tmp_path: Path) -> None:
    for pid in (1, 2):
        assert main(["keygen", "signing", str(tmp_path / f"n{pid}.key"), f"--pid={pid}"]) == 0
    roster = tmp_path / "roster.json"
    pubs = [str(tmp_path / f"n{pid}.key.pub") for pid in (1, 2)]
    assert main(["keygen", "roster", str(roster), *pubs]) == 0
    config = _node_config(f"--signing-key={tmp_path / 'n1.key'}", f"--roster={roster}")
    private, _public = keys.load_signing_key(tmp_path / "n1.key")
    assert config.signing_key == private  # type: ignore[attr-defined]
    assert config.roster == keys.load_roster(roster)  # type: ignore[attr-defined]
    # A roster without this node's key is refused before anything starts.
    with pytest.raises(SystemExit, match="no public key for this node"):
        main(
            [
                "node",
                "--id=3",
                "--duration=0.2",
                "--peer=2=127.0.0.1:9",
                f"--signing-key={tmp_path / 'n1.key'}",
                f"--roster={roster}",
            ]
        )
