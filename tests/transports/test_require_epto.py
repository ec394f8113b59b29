"""A datagram node refuses a configuration for another engine with a message
that names that engine and where it runs; open_node opens the node an atoms
configuration asks for."""

from __future__ import annotations

import socket

import pytest
import trio
from epto.transports._ports import free_ports
from epto.transports.trio_atoms import AtomsNode
from epto.transports.trio_node import open_node

from epto import ConfigurationError
from epto.atoms import AtomsConfig, SequencingGraph
from epto.endpoint import NodeConfig

MEMBERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002"}


def test_open_node_opens_an_atoms_node_for_an_atoms_configuration() -> None:
    config = NodeConfig(
        pid=1, members=MEMBERS, mode="atoms", atoms=AtomsConfig(graph=SequencingGraph())
    )
    node = open_node(config)
    assert isinstance(node, AtomsNode) and node.mode == "atoms"


@pytest.mark.trio
async def test_three_atoms_nodes_opened_by_open_node_deliver_in_one_order() -> None:
    ports = free_ports(3, socket.SOCK_STREAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    graph = SequencingGraph.build({0: frozenset(members)})
    orders: dict[int, list[tuple[int, int]]] = {}

    async def member(pid: int) -> None:
        config = NodeConfig(
            pid=pid, members=members, mode="atoms", atoms=AtomsConfig(graph=graph), seed=pid
        )
        async with open_node(config) as node:
            node.broadcast(b"from %d" % pid)
            got = orders[pid] = []
            async for delivery in node:
                got.append(delivery.event.id)
                if len(got) == 3:
                    break
            # Stay until every member delivered all three (they may need this
            # member's part of the sequencing).
            while any(len(orders.get(p, ())) < 3 for p in members):
                await trio.sleep(0.01)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for pid in members:
                nursery.start_soon(member, pid)
    assert orders[1] == orders[2] == orders[3]
    assert {source for source, _ in orders[1]} == {1, 2, 3}


def test_the_zmq_node_names_the_atoms_node_too() -> None:
    pytest.importorskip("zmq")
    from epto.transports.zmq_node import ZmqNode

    config = NodeConfig(
        pid=1, members=MEMBERS, mode="atoms", atoms=AtomsConfig(graph=SequencingGraph())
    )
    with pytest.raises(ConfigurationError, match=r"mode='atoms'.*AtomsNode"):
        ZmqNode(config)
