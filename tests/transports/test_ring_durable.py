"""The member's vote on disk (``transports/_ring_durable.py``): the latest
valid record wins, a torn or altered slot falls back to the one before,
``clear`` leaves nothing for the next start, and a new store numbers above
what it found; a node keeps its vote as ``TokenRingConfig.durability`` says."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
from epto.transports._ports import free_ports
from epto.transports._ring_durable import VoteStore
from epto.transports.trio_tcp import TokenRingNode

from epto import ConfigurationError
from epto.endpoint import NodeConfig
from epto.tokenring import TokenRingConfig


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


async def _run_one(config: NodeConfig, broadcasts: int) -> None:
    async with TokenRingNode(config) as node:
        for i in range(broadcasts):
            node.broadcast(b"%d" % i)
        got = 0
        with trio.fail_after(10):
            async for _ in node:
                got += 1
                if got == broadcasts:
                    break
        node.abort()


@pytest.mark.trio
async def test_a_node_keeps_its_vote_only_as_configured(tmp_path: Path) -> None:
    """A node with a data directory writes its member's vote as it orders
    (the default, ``fsync``); a start with ``durability="off"`` removes
    what an earlier start kept (a later start must never take it), and a
    start that does not resume (a group of one founds its group again)
    replaces it."""
    port = free_ports(1, socket.SOCK_STREAM)[0]
    address = f"127.0.0.1:{port}"

    def config(durability: str) -> NodeConfig:
        return NodeConfig(
            mode="token-ring",
            pid=1,
            bind=address,
            members={1: address},
            data_dir=str(tmp_path),
            tokenring=TokenRingConfig(durability=durability),
        )

    def votes() -> list[str]:
        return sorted(p.name for p in tmp_path.glob("member-1.vote.*"))

    await _run_one(config("fsync"), 3)
    assert votes() == ["member-1.vote.0", "member-1.vote.1"]
    first = VoteStore(str(tmp_path), 1, sync=False).load()
    assert first is not None
    await _run_one(config("off"), 2)
    assert votes() == []
    await _run_one(config("write"), 2)
    assert votes() and VoteStore(str(tmp_path), 1, sync=False).load() != first


def test_the_durability_mode_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="durability"):
        TokenRingConfig(durability="sometimes")
