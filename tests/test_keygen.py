"""Key files and ``epto keygen``: safe permissions, atomic creation, no silent overwrite."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from epto import ConfigurationError, GroupKey, keys
from epto.cli import main
from epto.wire._keys import write_file_atomically

pytest.importorskip("cryptography")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_group_key_file(tmp_path: Path) -> None:
    path = tmp_path / "group.key"
    assert (
        main(["keygen", "group", str(path), "--key-id", "3", "--cipher", "chacha20-poly1305"]) == 0
    )
    assert mode(path) == 0o600
    key = keys.load_group_key(path)
    assert (key.key_id, key.cipher, len(key.secret)) == (3, "chacha20-poly1305", 32)
    # Refuses to overwrite, keeps the old key; --force replaces it.
    assert main(["keygen", "group", str(path)]) == 1
    assert keys.load_group_key(path) == key
    assert main(["keygen", "group", str(path), "--force"]) == 0
    assert keys.load_group_key(path) != key and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["group.key"]  # no temporary left


def test_secret_files_readable_by_others_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "g.key"
    keys.save_group_key(path, GroupKey(key_id=1, secret=bytes(32)))
    os.chmod(path, 0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        keys.load_group_key(path)


def test_umask_does_not_loosen_or_break_permissions(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        keys.save_roster(tmp_path / "r.json", {1: bytes(32)})
    finally:
        os.umask(old)
    assert mode(tmp_path / "r.json") == 0o644


def test_signing_keys_and_roster(tmp_path: Path) -> None:
    pubs = []
    for pid in (4, 9):
        path = tmp_path / f"node{pid}.key"
        assert main(["keygen", "signing", str(path), "--pid", str(pid)]) == 0
        assert mode(path) == 0o600 and mode(Path(f"{path}.pub")) == 0o644
        private, public = keys.load_signing_key(path)
        assert keys.load_public_key(f"{path}.pub") == (pid, public)
        pubs.append(f"{path}.pub")
    assert main(["keygen", "signing", str(tmp_path / "node4.key")]) == 1
    roster_path = tmp_path / "roster.json"
    assert main(["keygen", "roster", str(roster_path), *pubs]) == 0
    roster = keys.load_roster(roster_path)
    assert set(roster) == {4, 9}
    from epto import Event, EventSigner, SignatureVerifier

    private, _ = keys.load_signing_key(tmp_path / "node9.key")
    event = EventSigner(9, private).sign(Event(source=9, seq=0, ts=1, payload=b"x"))
    assert SignatureVerifier(roster).check(event) is None


def test_bad_key_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    write_file_atomically(bad, b"not json", mode=0o600, force=False)
    with pytest.raises(ConfigurationError):
        keys.load_group_key(bad)
    write_file_atomically(bad, b'{"type": "epto-roster"}', mode=0o600, force=True)
    with pytest.raises(ConfigurationError, match="not an epto-group-key"):
        keys.load_group_key(bad)
    with pytest.raises(ConfigurationError, match="members"):
        keys.load_roster(bad)
