"""The token ring on real TCP sockets (127.0.0.1): identical delivery
sequences, and the group goes on delivering after a member crashes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from epto.transports.trio_tcp import TokenRingNode

from epto import GroupKey, LocalProtocolError
from epto._incarnation import first_seq
from epto.check import check
from epto.endpoint import NodeConfig
from epto.tokenring import TokenRingConfig

PIDS = (1, 2, 3)
RING = TokenRingConfig(
    heartbeat_interval=0.05,
    suspect_timeout=0.3,
    exclude_timeout=3.0,
    token_timeout=0.6,
    change_timeout=0.3,
    fetch_timeout=0.1,
)
KEY = GroupKey(key_id=1, secret=bytes(range(32)))


@asynccontextmanager
async def cluster(sealed: bool = False) -> AsyncIterator[dict[int, TokenRingNode]]:
    placeholder = {pid: "127.0.0.1:1" for pid in PIDS}
    async with AsyncExitStack() as stack:
        nodes: dict[int, TokenRingNode] = {}
        for pid in PIDS:
            config = NodeConfig(
                mode="token-ring",
                pid=pid,
                members=placeholder,
                tokenring=RING,
                seed=pid,
                group=9,
                group_key=KEY if sealed else None,
            )
            nodes[pid] = await stack.enter_async_context(TokenRingNode(config))
        for node in nodes.values():
            for pid, other in nodes.items():
                node.engine.set_address(pid, other.address)
        yield nodes
        for node in nodes.values():
            node.abort()


async def collect(node: TokenRingNode, into: list[tuple[int, int]], count: int) -> None:
    async for delivery in node:
        into.append(delivery.event.id)
        if len(into) >= count:
            return


@pytest.mark.trio
@pytest.mark.parametrize("sealed", [False, True])
async def test_three_nodes_deliver_identical_sequences(sealed: bool) -> None:
    per_node = 30
    total = per_node * len(PIDS)
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in PIDS}
    broadcast: set[tuple[int, int]] = set()
    with trio.fail_after(20):
        async with cluster(sealed) as nodes, trio.open_nursery() as nursery:
            for pid, node in nodes.items():
                nursery.start_soon(collect, node, seqs[pid], total)
            for i in range(per_node):
                for node in nodes.values():
                    broadcast.add(node.broadcast(b"m%d" % i))
                await trio.sleep(0.005)
    report = check(seqs, broadcast=broadcast, expected=broadcast)
    assert report.ok, report.summary()
    assert seqs[1] == seqs[2] == seqs[3]
    assert set(seqs[1]) == broadcast
    for node in nodes.values():
        stats = node.statistics()
        assert stats.frames_received > 0
        assert not stats.rejected


@pytest.mark.trio
async def test_a_crashed_member_does_not_stop_the_others() -> None:
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in PIDS}
    resumed = False
    with trio.fail_after(30):
        async with cluster() as nodes:
            before: set[tuple[int, int]] = set()
            async with trio.open_nursery() as nursery:
                for pid, node in nodes.items():
                    nursery.start_soon(collect, node, seqs[pid], 15)
                for i in range(5):
                    for node in nodes.values():
                        before.add(node.broadcast(b"a%d" % i))
            nodes[3].abort()
            after: set[tuple[int, int]] = set()
            # The survivors suspect 3 after suspect_timeout, regenerate the
            # token in a new i-view and go on delivering.
            async with trio.open_nursery() as nursery:
                for pid in (1, 2):
                    nursery.start_soon(collect, nodes[pid], seqs[pid], 15 + 20)
                for i in range(10):
                    for pid in (1, 2):
                        after.add(nodes[pid].broadcast(b"b%d" % i))
                    await trio.sleep(0.01)
            stats = nodes[1].statistics()
            assert 3 not in stats.core
            resumed = True
    assert resumed
    assert len(seqs[1]) == 35
    survivors = {pid: seqs[pid] for pid in (1, 2)}
    report = check(survivors, broadcast=before | after, expected=before | after)
    assert report.ok, report.summary()
    assert seqs[1] == seqs[2]
    assert seqs[3] == seqs[1][: len(seqs[3])]


@pytest.mark.trio
async def test_hostile_streams_are_counted_and_dropped() -> None:
    import struct

    from epto.endpoint import parse_host_port

    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in PIDS}
    with trio.fail_after(20):
        async with cluster(sealed=True) as nodes:
            host, port = parse_host_port(nodes[1].address)
            # A frame of garbage, and an unsealed frame in a sealed group, each
            # opening a stream: a first frame that does not pass closes it.
            garbage = await trio.open_tcp_stream(host, port)
            await garbage.send_all(struct.pack(">I", 40) + bytes(range(40)))
            assert await garbage.receive_some(10) == b""
            unsealed = await trio.open_tcp_stream(host, port)
            plain = b"\xe7\x70\x01\x14\x00\x00\x00\x00" + bytes(8) + (9).to_bytes(8, "big")
            await unsealed.send_all(struct.pack(">I", len(plain) + 16) + plain + bytes(16))
            assert await unsealed.receive_some(10) == b""
            await unsealed.aclose()
            # A length beyond the frame limit: the stream is closed.
            oversized = await trio.open_tcp_stream(host, port)
            await oversized.send_all(struct.pack(">I", 1 << 30))
            assert await oversized.receive_some(10) == b""
            await oversized.aclose()
            async with trio.open_nursery() as nursery:
                for pid, node in nodes.items():
                    nursery.start_soon(collect, node, seqs[pid], 3)
                for node in nodes.values():
                    node.broadcast(b"still working")
            rejected = nodes[1].statistics().rejected
            refused = nodes[1].statistics().connections_refused
            await garbage.aclose()
    assert refused == {"handshake-rejected": 2, "first-frame-too-large": 1}
    assert rejected.get("bad-length") == 1
    assert rejected.get("bad-magic") == 1
    assert rejected.get("unsealed") == 1
    assert seqs[1] == seqs[2] == seqs[3]


def test_a_catchup_too_big_for_one_frame_is_split_in_order() -> None:
    from epto import Event, Limits
    from epto.tokenring import splitting_registry
    from epto.tokenring._messages import Catchup
    from epto.wire import FrameCodec

    limits = Limits.for_frame_size(4096)
    codec = FrameCodec(group=1, limits=limits, registry=splitting_registry())
    entries = tuple((i, Event(source=1, seq=i, ts=0, payload=bytes(100))) for i in range(200))
    extra = (Event(source=2, seq=0, ts=0, payload=b"x"),)
    message = Catchup(entries=entries, events=extra, stable=150, oldest=3)
    frames = codec.encode(1, message, to=2)
    assert len(frames) > 1
    parts = [codec.decode(f).message for f in frames]
    assert all(p.stable == 150 and p.oldest == 3 for p in parts)
    assert tuple(e for p in parts for e in p.entries) == entries
    assert tuple(e for p in parts for e in p.events) == extra


def test_a_batch_of_broadcasts_or_a_notice_too_big_for_one_frame_is_split_in_order() -> None:
    from epto import Event, Limits
    from epto.tokenring import splitting_registry
    from epto.tokenring._messages import DataBatch, Order, TokenState
    from epto.wire import FrameCodec

    limits = Limits.for_frame_size(4096, max_events_per_ball=64)
    codec = FrameCodec(group=1, limits=limits, registry=splitting_registry())
    events = tuple(Event(source=1, seq=i, ts=0, payload=bytes(100)) for i in range(200))
    frames = codec.encode(1, DataBatch(events=events), to=2)
    assert len(frames) > 1
    parts = [codec.decode(f).message for f in frames]
    assert tuple(e for p in parts for e in p.events) == events
    state = TokenState(instance=1, hop=3, next_seq=500, low=500, stable=500, batches=())
    # Scattered assignments (no runs): more than 64 do not fit one list.
    assigned = tuple((i, (i % 7, i)) for i in range(300))
    frames = codec.encode(1, Order(state=state, assigned=assigned), to=2)
    assert len(frames) > 1
    notices = [codec.decode(f).message for f in frames]
    assert all(n.state == state for n in notices)
    assert tuple(a for n in notices for a in n.assigned) == assigned


@pytest.mark.trio
async def test_a_payload_above_the_frame_limits_is_refused_at_broadcast() -> None:
    with trio.fail_after(10):
        async with cluster() as nodes:
            node = nodes[1]
            limit = node.config.limits.max_payload_size
            with pytest.raises(LocalProtocolError, match="max_payload_size"):
                node.broadcast(bytes(limit + 1))
            eid = node.broadcast(bytes(limit))
            # The first broadcast of this start of the member (epto._incarnation).
            assert eid == (1, first_seq(node.incarnation))
            async for delivery in nodes[2]:
                assert delivery.event.id == eid
                assert len(delivery.event.payload) == limit
                break
