"""The EpTO drivers under hostile input, frame binding and signed groups
(docs/security.md, docs/transports.md): one outsider datagram with the top
timestamp does not stop a UDP group; a sealed frame captured on its way to
one member is refused by another on every transport; signed nodes (memory
hub, UDP, the token ring through ``open_node``) sign, verify and refuse
forgeries. Real loopback sockets; every wait is bounded."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import attrs
import pytest
import trio
import zmq
from epto.transports import NodeConfig, TransportStatistics
from epto.transports._ports import free_ports
from epto.transports.memory import MemoryHub, MemoryNode
from epto.transports.trio_node import open_node
from epto.transports.trio_tcp import TokenRingNode
from epto.transports.trio_udp import UdpNode
from epto.transports.zmq_node import ZmqNode

import epto
import epto.wire
from epto.tokenring import TokenRingConfig

pytest.importorskip("cryptography")

WAIT = 20.0
PROTOCOL = epto.Config(fanout=2, ttl=6, round_interval=0.02)
KEY = epto.GroupKey(key_id=1, secret=bytes(range(32)))


def _keys(pid: int) -> tuple[bytes, bytes]:
    private = bytes([pid]) * 32
    return private, epto.EventSigner(pid, private).public_key


ROSTER = {pid: _keys(pid)[1] for pid in (1, 2, 3)}


async def _wait(condition: Callable[[], bool], what: str, *nodes: Any) -> None:
    with trio.move_on_after(WAIT):
        while not condition():
            await trio.sleep(0.01)
        return
    detail = [node.statistics() for node in nodes]
    raise AssertionError(f"timed out waiting for {what}: {detail}")


async def _collect(node: Any, into: list[epto.Event]) -> None:
    async for delivery in node:
        into.append(delivery.event)


# -- one outsider datagram with the top timestamp (finding 1) -------------------


@pytest.mark.trio
async def test_udp_group_survives_an_outsider_datagram_with_the_top_timestamp() -> None:
    ports = free_ports(3, socket.SOCK_DGRAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    hostile = epto.Event(source=99, seq=0, ts=2**64 - 1, payload=b"end of time")
    (datagram,) = epto.wire.FrameCodec(group=0).encode(99, {hostile.id: (hostile, 1)})
    got: dict[int, list[epto.Event]] = {pid: [] for pid in members}
    with trio.fail_after(2 * WAIT):
        async with AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            nodes: dict[int, UdpNode] = {}
            for pid, address in members.items():
                config = NodeConfig(pid=pid, bind=address, members=members, epto=PROTOCOL, seed=pid)
                nodes[pid] = await stack.enter_async_context(UdpNode(config))
                nursery.start_soon(_collect, nodes[pid], got[pid])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as outsider:
                outsider.sendto(datagram, ("127.0.0.1", ports[0]))
            await trio.sleep(0.1)  # a few rounds: the old code relayed it to everyone
            ids = {node.broadcast(b"after %d" % pid) for pid, node in nodes.items()}
            await _wait(
                lambda: all(ids <= {e.id for e in got[pid]} for pid in members),
                "deliveries",
                *nodes.values(),
            )
            assert nodes[1].statistics().rejected == {"ts-ahead": 1}
            for node in nodes.values():
                assert node._state == "running"  # the node's tasks are alive
                assert node.statistics().encode_failures == 0
            assert all(e.id != hostile.id for pid in members for e in got[pid])
            nursery.cancel_scope.cancel()


# -- frames bound to their receiver (finding 3) ---------------------------------


def _sealed(pid: int, members: dict[int, str], **fields: Any) -> NodeConfig:
    return NodeConfig(
        pid=pid,
        bind=members[pid],
        members=members,
        epto=PROTOCOL,
        seed=pid,
        group_key=KEY,
        **fields,
    )


@pytest.mark.trio
async def test_udp_frame_captured_on_its_way_to_2_is_refused_by_3() -> None:
    ports = free_ports(3, socket.SOCK_DGRAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    spy = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)  # member 2's address
    await spy.bind(("127.0.0.1", ports[1]))
    with spy, trio.fail_after(2 * WAIT):
        async with UdpNode(_sealed(1, members)) as one, UdpNode(_sealed(3, members)) as three:
            one.broadcast(b"for everyone")
            captured, _ = await spy.recvfrom(65536)  # sealed, on its way to member 2
            await spy.sendto(captured, ("127.0.0.1", ports[2]))
            await _wait(lambda: three.statistics().rejected.get("bad-tag", 0) >= 1, "bad-tag")
            assert one.statistics().rejected == {}


class _SpyHub(MemoryHub):
    """A hub that keeps a copy of every frame sent to ``watched``."""

    def __init__(self, watched: str) -> None:
        super().__init__()
        self.watched = watched
        self.captured: list[bytes] = []

    def deliver(self, address: str, item: object) -> bool:
        if address == self.watched and isinstance(item, bytes):
            self.captured.append(item)
        return super().deliver(address, item)


@pytest.mark.trio
async def test_memory_hub_frame_captured_on_its_way_to_2_is_refused_by_3() -> None:
    members = {1: "n1", 2: "n2", 3: "n3"}
    hub = _SpyHub("n2")
    with trio.fail_after(2 * WAIT):
        async with (
            MemoryNode(hub, _sealed(1, members)) as one,
            MemoryNode(hub, _sealed(3, members)) as three,
        ):
            one.broadcast(b"for everyone")
            await _wait(lambda: bool(hub.captured), "a frame to member 2")
            assert hub.deliver("n3", hub.captured[0])
            await _wait(lambda: three.statistics().rejected.get("bad-tag", 0) >= 1, "bad-tag")


@pytest.mark.trio
async def test_zmq_frame_captured_on_its_way_to_2_is_refused_by_3() -> None:
    ports = free_ports(3, socket.SOCK_STREAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    context = zmq.Context()
    spy = context.socket(zmq.PULL)
    spy.setsockopt(zmq.LINGER, 0)
    spy.bind(f"tcp://{members[2]}")
    forward = context.socket(zmq.PUSH)
    forward.setsockopt(zmq.LINGER, 0)
    forward.connect(f"tcp://{members[3]}")
    try:
        with ZmqNode(_sealed(1, members), context=context) as one:
            with ZmqNode(_sealed(3, members), context=context) as three:
                one.broadcast(b"for everyone")
                assert spy.poll(int(WAIT * 1000)), "no frame reached member 2"
                forward.send(spy.recv())

                def refused() -> bool:
                    stats: TransportStatistics = three.statistics()
                    return stats.rejected.get("bad-tag", 0) >= 1

                await _wait(refused, "bad-tag")
                three.abort()
            one.abort()
    finally:
        spy.close(0)
        forward.close(0)
        context.term()


# -- signed groups (finding 8) ------------------------------------------------------


def _signed(pid: int, members: dict[int, str], **fields: Any) -> NodeConfig:
    return NodeConfig(
        pid=pid,
        bind=members[pid],
        members=members,
        epto=PROTOCOL,
        seed=pid,
        signing_key=_keys(pid)[0],
        roster=ROSTER,
        **fields,
    )


@pytest.mark.trio
async def test_signed_memory_nodes_deliver_signed_events_and_refuse_a_forgery() -> None:
    members = {1: "n1", 2: "n2", 3: "n3"}
    hub = MemoryHub()
    got: dict[int, list[epto.Event]] = {pid: [] for pid in members}
    verifier = epto.SignatureVerifier(ROSTER)
    # Member 2's event, signed by someone else's key: a forgery.
    forged = epto.EventSigner(2, _keys(3)[0]).sign(
        epto.Event(source=2, seq=7, ts=3, payload=b"forged")
    )
    ball = {forged.id: (forged, 1)}
    with trio.fail_after(2 * WAIT):
        async with AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            nodes = {}
            for pid in members:
                nodes[pid] = await stack.enter_async_context(MemoryNode(hub, _signed(pid, members)))
                nursery.start_soon(_collect, nodes[pid], got[pid])
            (frame,) = epto.wire.FrameCodec(group=0).encode(2, ball)
            hub.deliver("n1", frame)
            await _wait(
                lambda: nodes[1].statistics().rejected.get("bad-signature", 0) >= 1, "refusal"
            )
            ids = {node.broadcast(b"signed by %d" % pid) for pid, node in nodes.items()}
            await _wait(lambda: all(ids <= {e.id for e in got[p]} for p in members), "deliveries")
            nursery.cancel_scope.cancel()
    for pid in members:
        assert forged.id not in {e.id for e in got[pid]}
        for event in got[pid]:
            assert len(event.signature) == 64 and verifier.check(event) is None
    assert [e.id for e in got[1]] == [e.id for e in got[2]] == [e.id for e in got[3]]


@pytest.mark.trio
async def test_signed_udp_nodes_refuse_an_unsigned_member() -> None:
    """A member without a signing key is refused by the others (``unsigned``)."""
    ports = free_ports(3, socket.SOCK_DGRAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    got: dict[int, list[epto.Event]] = {pid: [] for pid in members}
    with trio.fail_after(2 * WAIT):
        async with AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            nodes = {}
            for pid in members:
                config = _signed(pid, members)
                if pid == 3:
                    config = NodeConfig(
                        pid=3, bind=members[3], members=members, epto=PROTOCOL, seed=3
                    )
                nodes[pid] = await stack.enter_async_context(UdpNode(config))
                nursery.start_soon(_collect, nodes[pid], got[pid])
            signed = {nodes[1].broadcast(b"one"), nodes[2].broadcast(b"two")}
            unsigned = nodes[3].broadcast(b"three")
            await _wait(lambda: all(signed <= {e.id for e in got[p]} for p in (1, 2)), "deliveries")
            await _wait(lambda: nodes[1].statistics().rejected.get("unsigned", 0) >= 1, "refusal")
            nursery.cancel_scope.cancel()
    assert unsigned not in {e.id for p in (1, 2) for e in got[p]}


def test_node_config_checks_the_signing_fields() -> None:
    members = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002"}
    private, public = _keys(1)
    config = NodeConfig(pid=1, members=members, signing_key=private, roster=ROSTER)
    assert config.roster is ROSTER
    with pytest.raises(epto.ConfigurationError, match="no public key for this node"):
        NodeConfig(pid=1, members=members, signing_key=private, roster={2: ROSTER[2]})
    with pytest.raises(epto.ConfigurationError, match="another public key"):
        NodeConfig(pid=1, members=members, signing_key=private, roster={1: ROSTER[2]})
    with pytest.raises(epto.ConfigurationError, match="32-byte"):
        NodeConfig(pid=1, members=members, signing_key=private[:31])
    with pytest.raises(epto.ConfigurationError, match="32 bytes"):
        NodeConfig(pid=1, members=members, roster={1: public + b"x"})
    with pytest.raises(epto.ConfigurationError, match="out of range"):
        NodeConfig(pid=1, members=members, roster={-1: public})
    ring = TokenRingNode(
        NodeConfig(pid=1, members=members, mode="token-ring", signing_key=private, roster=ROSTER)
    ).config
    assert ring.signing_key == private and ring.roster == ROSTER


@pytest.mark.trio
async def test_open_node_signs_in_a_token_ring() -> None:
    ports = free_ports(3, socket.SOCK_STREAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    ring = TokenRingConfig(
        heartbeat_interval=0.05,
        suspect_timeout=0.3,
        exclude_timeout=1.0,
        token_timeout=0.6,
        change_timeout=0.3,
        fetch_timeout=0.1,
        readmit_after=0.3,
    )
    got: dict[int, list[epto.Event]] = {pid: [] for pid in members}
    verifier = epto.SignatureVerifier(ROSTER)
    with trio.fail_after(2 * WAIT):
        async with AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            nodes = {}
            for pid in members:
                config = _signed(pid, members, mode="token-ring", tokenring=ring)
                nodes[pid] = await stack.enter_async_context(open_node(config))
                nursery.start_soon(_collect, nodes[pid], got[pid])
            ids = {node.broadcast(b"ring %d" % pid) for pid, node in nodes.items()}
            await _wait(lambda: all(ids <= {e.id for e in got[p]} for p in members), "deliveries")
            nursery.cancel_scope.cancel()
    for pid in members:
        for event in got[pid]:
            # The token ring signs an event before the sequencer stamps its ts.
            unstamped = attrs.evolve(event, ts=0)
            assert len(event.signature) == 64 and verifier.check(unstamped) is None
