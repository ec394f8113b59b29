"""A token-ring node on loopback stops when asked: leaving its context
(graceful or not) ends its tasks and the application's iteration, within
bounded waits."""

from __future__ import annotations

import pytest
import trio
from epto.transports.trio_tcp import TokenRingNode

from epto import LocalProtocolError
from epto.endpoint import NodeConfig

from .test_trio_tcp_tokenring import PIDS, RING


def make_nodes(flush_timeout: float = 5.0) -> dict[int, TokenRingNode]:
    placeholder = dict.fromkeys(PIDS, "127.0.0.1:1")
    return {
        pid: TokenRingNode(
            NodeConfig(
                mode="token-ring",
                pid=pid,
                members=placeholder,
                tokenring=RING,
                seed=pid,
                flush_timeout=flush_timeout,
            )
        )
        for pid in PIDS
    }


async def read_all(node: TokenRingNode, into: list[tuple[int, int]]) -> None:
    async for delivery in node:
        into.append(delivery.event.id)


@pytest.mark.trio
async def test_contexts_exit_after_delivery_and_end_iteration() -> None:
    nodes = make_nodes()
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in PIDS}
    sent: set[tuple[int, int]] = set()
    with trio.fail_after(10):
        async with trio.open_nursery() as readers, nodes[1], nodes[2], nodes[3]:
            for node in nodes.values():
                for pid, other in nodes.items():
                    node.engine.set_address(pid, other.address)
                readers.start_soon(read_all, node, seqs[node.pid])
            for i in range(5):
                for node in nodes.values():
                    sent.add(node.broadcast(b"m%d" % i))
                await trio.sleep(0.01)
            while min(len(s) for s in seqs.values()) < len(sent):
                await trio.sleep(0.01)
            # Every node's context has exited (graceful close: nothing of its
            # own was pending); the readers' iterations end by themselves.
    for node in nodes.values():
        with pytest.raises(LocalProtocolError):
            node.broadcast(b"late")
    assert seqs[1] == seqs[2] == seqs[3]
    assert set(seqs[1]) == sent


@pytest.mark.trio
async def test_graceful_close_without_peers_ends_after_flush_timeout() -> None:
    # Alone with its broadcast never sequenced (the others never started):
    # aclose waits at most flush_timeout, then the context exits.
    node = make_nodes(flush_timeout=0.2)[1]
    with trio.fail_after(5):
        async with node:
            node.broadcast(b"orphan")
            start = trio.current_time()
        waited = trio.current_time() - start
    assert waited >= 0.2
    assert node.statistics().delivered == 0


@pytest.mark.trio
async def test_abort_inside_context_exits() -> None:
    node = make_nodes()[1]
    got: list[tuple[int, int]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as readers, node:
            readers.start_soon(read_all, node, got)
            node.broadcast(b"x")
            await trio.sleep(0.05)
            node.abort()
            # The body goes on: abort cancels the node's tasks only.
            await trio.sleep(0)
