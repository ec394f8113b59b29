"""The member's vote on disk (``transports/_ring_durable.py``): the latest
valid record wins, a torn or altered slot falls back to the one before,
``clear`` leaves nothing for the next start, and a new store numbers above
what it found."""

from __future__ import annotations

from pathlib import Path

from epto.transports._ring_durable import VoteStore


def test_the_latest_valid_record_is_loaded(tmp_path: Path) -> None:
    store = VoteStore(str(tmp_path), 7, sync=True)
    assert store.load() is None
    for payload in (b"one", b"two", b"three"):
        store.write(payload)
    store.close()
    assert VoteStore(str(tmp_path), 7, sync=True).load() == b"three"
    assert VoteStore(str(tmp_path), 8, sync=True).load() is None  # another member's


def test_a_torn_slot_falls_back_to_the_record_before(tmp_path: Path) -> None:
    store = VoteStore(str(tmp_path), 1, sync=False)
    store.write(b"first record")
    store.write(b"second record")
    store.close()
    latest = tmp_path / "member-1.vote.0"  # record 2 went to slot 0
    data = latest.read_bytes()
    latest.write_bytes(data[:-3])  # torn
    assert VoteStore(str(tmp_path), 1, sync=False).load() == b"first record"
    latest.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # altered
    assert VoteStore(str(tmp_path), 1, sync=False).load() == b"first record"


def test_a_new_store_writes_above_what_it_found_and_clear_removes_all(tmp_path: Path) -> None:
    store = VoteStore(str(tmp_path), 1, sync=True)
    for i in range(5):
        store.write(b"r%d" % i)
    store.close()
    again = VoteStore(str(tmp_path), 1, sync=True)
    assert again.load() == b"r4"
    again.write(b"short")  # shorter than the slot's earlier content
    again.close()
    assert VoteStore(str(tmp_path), 1, sync=True).load() == b"short"
    last = VoteStore(str(tmp_path), 1, sync=True)
    last.clear()
    assert not list(tmp_path.glob("member-1.vote.*"))
    assert VoteStore(str(tmp_path), 1, sync=True).load() is None
