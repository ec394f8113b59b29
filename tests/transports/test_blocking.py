"""``BlockingNode``: any trio node behind a synchronous, thread-safe API.

The EpTO conformance suite runs over it (the same scenarios as every
transport); the token ring and ``mode="auto"`` are checked for one order;
a slow application holds deliveries in a bounded queue; a node that cannot
start says why in ``start``; a closed node refuses broadcasts and keeps its
last statistics."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
from epto.transports import NodeConfig
from epto.transports._ports import free_ports
from epto.transports.blocking import BlockingNode

from epto import LocalProtocolError
from epto.check import check

from .conformance import SCENARIOS, Group, Transport, thread_group

WAIT = 30.0


class _EngineInThread:
    """The engine handle's operations the conformance suite calls, run in
    the node's thread."""

    def __init__(self, node: BlockingNode) -> None:
        self._node = node

    def add_member(self, pid: int, address: str) -> None:
        self._node.run_sync(lambda: self._node.node.engine.add_member(pid, address))  # type: ignore[union-attr]


class _EptoBlockingNode(BlockingNode):
    """What the conformance suite calls on a node of a thread transport."""

    @property
    def engine(self) -> _EngineInThread:
        return _EngineInThread(self)


def _push_garbage(node: Any, datagrams: list[bytes]) -> None:
    host, port = node.address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for data in datagrams:
            sock.sendto(data, (host, int(port)))


class BlockingTransport(Transport):
    name = "blocking"

    def group(self) -> contextlib.AbstractAsyncContextManager[Group]:
        return thread_group(_EptoBlockingNode, _push_garbage)


@pytest.mark.trio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_blocking_conformance(scenario: Callable[[Transport], Awaitable[None]]) -> None:
    await scenario(BlockingTransport())


def _group(mode: str, n: int = 3, **fields: Any) -> list[NodeConfig]:
    kind = socket.SOCK_STREAM if mode != "epto" else socket.SOCK_DGRAM
    ports = free_ports(n, kind)
    members = {pid: f"127.0.0.1:{port}" for pid, port in enumerate(ports, start=1)}
    return [
        NodeConfig(mode=mode, pid=pid, bind=members[pid], members=members, seed=pid, **fields)  # type: ignore[arg-type]
        for pid in members
    ]


def _collect(node: BlockingNode, want: int, out: list[Any]) -> None:
    deadline = time.monotonic() + WAIT
    while len(out) < want and time.monotonic() < deadline:
        delivery = node.get(timeout=0.1)
        if delivery is not None:
            out.append(delivery.event.id)


@pytest.mark.parametrize("mode", ["token-ring", "auto"])
def test_a_token_ring_of_blocking_nodes_delivers_one_order(mode: str) -> None:
    configs = _group(mode)
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(BlockingNode(c)) for c in configs]
        assert all(node.mode == "token-ring" for node in nodes)
        sequences: dict[int, list[Any]] = {node.pid: [] for node in nodes}
        collectors = [
            threading.Thread(target=_collect, args=(node, 60, sequences[node.pid]))
            for node in nodes
        ]
        for thread in collectors:
            thread.start()
        broadcast: set[Any] = set()

        def send(node: BlockingNode) -> None:
            for i in range(20):
                broadcast.add(node.broadcast(b"%d" % i))

        senders = [threading.Thread(target=send, args=(node,)) for node in nodes]
        for thread in senders:
            thread.start()
        for thread in senders + collectors:
            thread.join(WAIT)
        report = check(sequences, broadcast=broadcast)
        assert report.ok, report.summary()
        assert all(len(seq) == 60 for seq in sequences.values())
        assert len({tuple(seq) for seq in sequences.values()}) == 1
        stats = nodes[0].statistics()
        assert stats.broadcasts == 20 and stats.delivered == 60


def test_a_slow_application_holds_deliveries_in_bounded_queues() -> None:
    configs = _group("token-ring", 2)
    small = attrs.evolve(configs[0], delivery_buffer=8, overflow="drop")
    with BlockingNode(small) as slow, BlockingNode(configs[1]) as fast:
        for i in range(200):
            fast.broadcast(b"%d" % i)
        got: list[Any] = []
        _collect(fast, 200, got)
        assert len(got) == 200
        # The slow node's application took nothing: 8 wait in its queue, 8
        # in the node's buffer, and the rest were dropped by the policy.
        deadline = time.monotonic() + WAIT
        while slow.statistics().deliveries_dropped < 200 - 16 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slow.statistics().deliveries_dropped == 200 - 16
        taken = [slow.get(timeout=1.0) for _ in range(16)]
        assert all(d is not None for d in taken)
        assert slow.get(timeout=0.05) is None


def test_a_node_that_cannot_start_says_why() -> None:
    config = _group("token-ring", 1)[0]
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        host, port = config.bind.rsplit(":", 1)
        taken.bind((host, int(port)))
        taken.listen()
        with pytest.raises(OSError):
            BlockingNode(config).start()


def test_a_closed_node_refuses_broadcasts_and_keeps_its_statistics() -> None:
    config = _group("epto", 1)[0]
    node = BlockingNode(config).start()
    with pytest.raises(LocalProtocolError):
        node.start()
    eid = node.broadcast(b"x")
    delivery = node.get(timeout=WAIT)
    assert delivery is not None and delivery.event.id == eid
    node.close()
    with pytest.raises(LocalProtocolError):
        node.broadcast(b"y")
    assert node.statistics().broadcasts == 1
    assert node.get(timeout=0.05) is None
    node.close()  # twice: nothing happens
    assert list(node) == []


def test_an_unstarted_node_says_so() -> None:
    node = BlockingNode(_group("epto", 1)[0])
    with pytest.raises(LocalProtocolError, match="not started"):
        node.broadcast(b"x")
    node.abort()


@pytest.mark.trio
async def test_run_sync_reaches_the_node_in_its_thread() -> None:
    node = await trio.to_thread.run_sync(BlockingNode(_group("epto", 1)[0]).start)
    try:
        members = await trio.to_thread.run_sync(
            node.run_sync, lambda: node.node.statistics().broadcasts
        )
        assert members == 0
    finally:
        await trio.to_thread.run_sync(node.abort)
