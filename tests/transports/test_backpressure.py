"""The delivery buffer's overflow policy, on the in-memory hub (trio) and on
ZeroMQ (threads): rounds go on while the application does not read; past
``delivery_buffer`` deliveries, ``"fail"`` stops the node and tells the reader,
``"drop"`` drops and counts."""

from __future__ import annotations

import time

import pytest
import trio
from epto.transports import DeliveryOverflowError, NodeConfig
from epto.transports.memory import MemoryHub, MemoryNode
from epto.transports.zmq_node import ZmqNode

import epto

CONFIG = epto.Config(fanout=1, ttl=2, round_interval=0.01)


def configs(policy: str, bind: tuple[str, str]) -> tuple[NodeConfig, NodeConfig]:
    members = {1: bind[0], 2: bind[1]}
    common = {"epto": CONFIG, "members": members, "delivery_buffer": 5, "overflow": policy}
    return (
        NodeConfig(pid=1, bind=bind[0], seed=1, **common),  # type: ignore[arg-type]
        NodeConfig(pid=2, bind=bind[1], seed=2, **common),  # type: ignore[arg-type]
    )


@pytest.mark.trio
async def test_fail_policy_stops_the_node_and_raises_to_the_reader() -> None:
    hub = MemoryHub()
    one, two = configs("fail", ("a", "b"))
    async with MemoryNode(hub, one) as a, MemoryNode(hub, two) as b:
        for i in range(8):
            a.broadcast(b"%d" % i)
        with trio.fail_after(10):
            got = []
            with pytest.raises(DeliveryOverflowError):
                while True:
                    await trio.sleep(0.05)  # a slow reader
                    async for delivery in b:
                        got.append(int(delivery.event.payload))
        # What was buffered before the overflow came out first, in order.
        assert got == [0, 1, 2, 3, 4]
        with pytest.raises(epto.LocalProtocolError):
            b.broadcast(b"too late")
        assert a.statistics().broadcasts == 8


@pytest.mark.trio
async def test_drop_policy_counts_and_keeps_running() -> None:
    hub = MemoryHub()
    one, two = configs("drop", ("a", "b"))
    async with MemoryNode(hub, one) as a, MemoryNode(hub, two) as b:
        for i in range(8):
            a.broadcast(b"%d" % i)
        with trio.fail_after(10):
            while b.statistics().deliveries_dropped < 3:
                await trio.sleep(0.01)
        stats = b.statistics()
        assert stats.delivery_queue == 5
        assert stats.delivered == 8
        got = [int((await b.__anext__()).event.payload) for _ in range(5)]
        assert got == [0, 1, 2, 3, 4]
        b.broadcast(b"still running")


def test_zmq_fail_policy() -> None:
    one, two = configs("fail", ("127.0.0.1:0", "127.0.0.1:0"))
    with ZmqNode(one) as a, ZmqNode(two) as b:
        a.engine.add_member(2, b.address)
        b.engine.add_member(1, a.address)
        for i in range(8):
            a.broadcast(b"%d" % i)
        deadline = time.monotonic() + 10
        while b.statistics().delivery_queue < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        got = []
        with pytest.raises(DeliveryOverflowError):
            while time.monotonic() < deadline:
                d = b.get(timeout=1)
                assert d is not None
                got.append(int(d.event.payload))
        assert got == [0, 1, 2, 3, 4]
