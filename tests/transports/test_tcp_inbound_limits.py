"""What an incoming connection may cost a TCP token-ring node before it
authenticates: a cap on connections (in all and per
remote address), a handshake deadline, a small first-frame bound, an idle
timeout; every refusal counted. Real sockets on the loopback interface, every
wait bounded by ``trio.fail_after``."""

from __future__ import annotations

import os
import random
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import trio
from epto.transports._trio.tcp_framing import FrameReader, FramingError, pack_frames
from epto.transports.trio_tcp import TcpNodeConfig, TokenRingNode

from epto import ConfigurationError, GroupKey
from epto.check import check
from epto.endpoint import NodeConfig, parse_host_port
from epto.endpoint._addresses import AddressBook, with_addresses
from epto.tokenring import TokenRingConfig, token_ring_registry
from epto.wire import FrameCodec, GroupSealer

LENGTH = struct.Struct(">I")
MIB = 1 << 20
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
GROUP = 9


def ring_node(pid: int, members: dict[int, str], *, sealed: bool, **inbound: Any) -> TokenRingNode:
    """A member whose transport has the ``inbound`` settings
    (:class:`TcpNodeConfig` fields), the others derived from its configuration."""
    config = NodeConfig(
        pid=pid,
        members=members,
        mode="token-ring",
        tokenring=RING,
        seed=pid,
        group=GROUP,
        group_key=KEY if sealed else None,
    )
    return TokenRingNode(config, tcp=TcpNodeConfig(**inbound) if inbound else None)


@asynccontextmanager
async def cluster(
    *, sealed: bool = True, pids: tuple[int, ...] = PIDS, **inbound: Any
) -> AsyncIterator[dict[int, TokenRingNode]]:
    placeholder = {pid: "127.0.0.1:1" for pid in pids}
    async with AsyncExitStack() as stack:
        nodes: dict[int, TokenRingNode] = {}
        for pid in pids:
            node = ring_node(pid, placeholder, sealed=sealed, **inbound)
            nodes[pid] = await stack.enter_async_context(node)
        for node in nodes.values():
            for pid, other in nodes.items():
                node.engine.set_address(pid, other.address)
        yield nodes
        for node in nodes.values():
            node.abort()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (the caller bounds the wait with fail_after)."""
    while not condition():
        await trio.sleep(0.01)


_OPENED: list[trio.SocketStream] = []


@pytest.fixture(autouse=True)
def _close_streams() -> Iterator[None]:
    """Whatever a test ends with, its client sockets are closed."""
    yield
    while _OPENED:
        # Outside the trio run now: close the descriptor itself.
        fd = _OPENED.pop().socket.detach()
        if fd >= 0:
            os.close(fd)


async def connect(node: TokenRingNode, local: str | None = None) -> trio.SocketStream:
    host, port = parse_host_port(node.address)
    stream = await trio.open_tcp_stream(host, port, local_address=local)
    _OPENED.append(stream)
    return stream


async def closed_by_peer(stream: trio.SocketStream) -> bool:
    """True once the node closed ``stream`` (reads until the end)."""
    try:
        while await stream.receive_some(4096):
            pass
    except trio.BrokenResourceError:
        pass
    return True


async def collect(node: TokenRingNode, into: list[tuple[int, int]], count: int) -> None:
    async for delivery in node:
        into.append(delivery.event.id)
        if len(into) >= count:
            return


async def broadcast_and_agree(nodes: dict[int, TokenRingNode], rounds: int) -> None:
    """Every node broadcasts ``rounds`` messages; all deliver the same sequence."""
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in nodes}
    sent = set()
    async with trio.open_nursery() as nursery:
        for pid, node in nodes.items():
            nursery.start_soon(collect, node, seqs[pid], rounds * len(nodes))
        for i in range(rounds):
            for node in nodes.values():
                sent.add(node.broadcast(b"m%d" % i))
            await trio.sleep(0.005)
    report = check(seqs, broadcast=sent, expected=sent)
    assert report.ok, report.summary()
    first = next(iter(seqs.values()))
    assert all(seq == first for seq in seqs.values())


def opener(sender: int, to: int, *, sealed: bool) -> bytes:
    """The bytes a member opens a stream with (an address frame)."""
    sealer = GroupSealer(KEY, counter_start=1, rng=random.Random(sender)) if sealed else None
    codec = FrameCodec(
        group=GROUP, registry=with_addresses(token_ring_registry()), sealer=sealer, me=sender
    )
    book = AddressBook(entries=((sender, "127.0.0.1:1"),))
    return pack_frames(codec.encode(sender, book, to=to))


# -- the reader, sans-IO ------------------------------------------------------


def test_a_closed_reader_holds_at_most_one_small_first_frame() -> None:
    reader = FrameReader(max_frame=MIB, min_frame=24, first_frame=4096)
    assert not reader.opened and reader.limit == 4096
    assert reader.room() == 4 + 4096
    reader.feed(LENGTH.pack(MIB))  # an outsider announces 1 MiB
    with pytest.raises(FramingError) as caught:
        reader.next_frame()
    assert caught.value.length == MIB
    # A first frame within the bound, fed as the reader asks: never more
    # buffered than the frame and its length.
    reader = FrameReader(max_frame=MIB, min_frame=24, first_frame=4096)
    data = LENGTH.pack(100) + bytes(100) + LENGTH.pack(MIB) + bytes(MIB)
    taken = 0
    frames = []
    while taken < len(data):
        room = reader.room()
        step = len(data) - taken if room is None else min(room, len(data) - taken)
        reader.feed(data[taken : taken + step])
        taken += step
        while (frame := reader.next_frame()) is not None:
            frames.append(len(frame))
            reader.open()  # the node opens it once the first frame passed
    assert frames == [100, MIB]
    assert reader.opened and reader.room() is None


def test_inbound_limits_are_validated_with_the_field_named() -> None:
    members = {1: "127.0.0.1:1"}
    for field, value in (
        ("max_connections", 0),
        ("max_connections_per_address", -1),
        ("handshake_timeout", 0.0),
        ("first_frame_limit", 100),
        ("first_frame_limit", 2 * MIB),
        ("idle_timeout", 0.5),  # below 3 * max(suspect_timeout, change_timeout)
    ):
        with pytest.raises(ConfigurationError, match=field):
            ring_node(1, members, sealed=False, **{field: value})
    # By default the idle timeout is max(30, 2 * exclude_timeout), with a
    # given transport too when it leaves idle_timeout at its default.
    assert ring_node(1, members, sealed=False).tcp_config.idle_timeout == 30.0
    assert ring_node(1, members, sealed=False, send_queue=5).tcp_config.idle_timeout == 30.0
    assert ring_node(1, members, sealed=False, idle_timeout=0.9).tcp_config.idle_timeout == 0.9


# -- on the loopback interface -------------------------------------------------


@pytest.mark.trio
async def test_the_connection_beyond_max_connections_is_refused_and_the_node_stays_usable() -> None:
    with trio.fail_after(30):
        async with cluster(max_connections=20, handshake_timeout=60.0) as nodes:
            node = nodes[1]
            await broadcast_and_agree(nodes, 1)  # the members' streams are up
            await until(lambda: node.statistics().inbound_streams == 2)
            idle = []
            for _ in range(18):
                idle.append(await connect(node))
            await until(lambda: node.statistics().inbound_streams == 20)
            extra = await connect(node)
            assert await closed_by_peer(extra)  # at once, not after a timeout
            stats = node.statistics()
            assert stats.connections_refused == {"too-many-connections": 1}
            assert stats.inbound_streams == 20
            await broadcast_and_agree(nodes, 5)
            # A slot that frees up is taken again.
            await idle.pop().aclose()
            await until(lambda: node.statistics().inbound_streams == 19)
            idle.append(await connect(node))
            await until(lambda: node.statistics().inbound_streams == 20)
            assert node.statistics().connections_refused == {"too-many-connections": 1}
            for stream in (*idle, extra):
                await stream.aclose()


@pytest.mark.trio
async def test_connections_beyond_the_per_address_cap_are_refused() -> None:
    with trio.fail_after(20):
        async with cluster(
            pids=(1,), max_connections_per_address=3, handshake_timeout=60.0
        ) as nodes:
            node = nodes[1]
            held = [await connect(node, local="127.0.0.2") for _ in range(3)]
            await until(lambda: node.statistics().inbound_streams == 3)
            extra = await connect(node, local="127.0.0.2")
            assert await closed_by_peer(extra)
            # Another address still gets in.
            held.append(await connect(node, local="127.0.0.3"))
            await until(lambda: node.statistics().inbound_streams == 4)
            assert node.statistics().connections_refused == {"too-many-from-address": 1}
            for stream in (*held, extra):
                await stream.aclose()


@pytest.mark.trio
async def test_a_first_frame_announcing_one_mib_is_refused_before_it_is_buffered() -> None:
    with trio.fail_after(20):
        async with cluster(pids=(1,), handshake_timeout=60.0) as nodes:
            node = nodes[1]
            stream = await connect(node)
            try:
                # 1 MiB announced, 256 KiB of it sent at once, then a trickle.
                await stream.send_all(LENGTH.pack(MIB) + bytes(256 * 1024))
                for _ in range(5):
                    await stream.send_all(b"x")
            except trio.BrokenResourceError:
                pass  # closed already
            assert await closed_by_peer(stream)
            await stream.aclose()
            stats = node.statistics()
            assert stats.connections_refused == {"first-frame-too-large": 1}
            # What the node held for it: the first-frame bound at most.
            assert stats.inbound_buffer_peak <= 4 + 4096
            assert stats.inbound_streams == 0 and stats.inbound_buffered == 0


@pytest.mark.trio
async def test_a_slow_first_frame_is_cut_by_the_handshake_deadline() -> None:
    with trio.fail_after(20):
        async with cluster(pids=(1,), handshake_timeout=0.5) as nodes:
            node = nodes[1]
            silent = await connect(node)
            slow = await connect(node)
            # A first frame of 4000 bytes (within the bound), one byte at a time.
            await slow.send_all(LENGTH.pack(4000))

            async def trickle() -> None:
                try:
                    while True:
                        await slow.send_all(b"x")
                        await trio.sleep(0.05)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                assert await closed_by_peer(silent)
                assert await closed_by_peer(slow)
                nursery.cancel_scope.cancel()
            stats = node.statistics()
            assert stats.connections_refused == {"handshake-timeout": 2}
            assert stats.inbound_buffer_peak <= 4 + 4096
            for stream in (silent, slow):
                await stream.aclose()


@pytest.mark.trio
@pytest.mark.parametrize("sealed", [False, True])
async def test_a_stream_whose_first_frame_passes_is_cut_after_the_idle_timeout(
    sealed: bool,
) -> None:
    with trio.fail_after(20):
        async with cluster(pids=(1,), sealed=sealed, idle_timeout=0.9) as nodes:
            node = nodes[1]
            stream = await connect(node)
            # An address frame from "member 7": it passes (sealed under the
            # group key, or plain in a group without one), then nothing.
            await stream.send_all(opener(7, 1, sealed=sealed))
            await until(
                lambda: node.statistics().frames_received == 1 and 7 in node.engine.addresses()
            )
            assert await closed_by_peer(stream)
            await stream.aclose()
            assert node.statistics().connections_refused == {"idle-timeout": 1}


@pytest.mark.trio
async def test_a_first_frame_that_does_not_authenticate_closes_the_stream() -> None:
    with trio.fail_after(20):
        async with cluster(pids=(1,), handshake_timeout=60.0) as nodes:
            node = nodes[1]
            stream = await connect(node)
            await stream.send_all(opener(7, 1, sealed=False))  # unsealed, in a sealed group
            assert await closed_by_peer(stream)
            await stream.aclose()
            stats = node.statistics()
            assert stats.connections_refused == {"handshake-rejected": 1}
            assert stats.rejected.get("unsealed") == 1
            assert 7 not in node.engine.addresses()


@pytest.mark.trio
async def test_members_idle_but_heartbeating_are_never_cut() -> None:
    # The smallest idle timeout the configuration allows (3 x 0.3 s): the
    # members' streams carry heartbeats every 50 ms and must stay up.
    with trio.fail_after(30):
        async with cluster(idle_timeout=0.9) as nodes:
            await broadcast_and_agree(nodes, 1)
            await trio.sleep(3.0)  # more than three idle timeouts without broadcasts
            await broadcast_and_agree(nodes, 3)
            for node in nodes.values():
                stats = node.statistics()
                assert stats.connections_refused == {}
                assert stats.connects == 2  # no stream was cut and reopened
                assert stats.inbound_streams == 2


@pytest.mark.trio
async def test_a_ring_keeps_delivering_while_an_attacker_holds_idle_and_slow_connections() -> None:
    inbound = dict(
        max_connections=30,
        max_connections_per_address=30,
        handshake_timeout=0.5,
        idle_timeout=0.9,
    )
    with trio.fail_after(60):
        async with cluster(**inbound) as nodes:
            await broadcast_and_agree(nodes, 1)  # the members' streams are up
            opened = 0

            async def hold(node: TokenRingNode, first: bytes, trickle: bool) -> None:
                nonlocal opened
                while True:
                    try:
                        stream = await connect(node)
                    except OSError:
                        await trio.sleep(0.05)
                        continue
                    opened += 1
                    try:
                        if first:
                            await stream.send_all(first)
                        while True:
                            if trickle:
                                await stream.send_all(b"x")
                            with trio.move_on_after(0.1):
                                if not await stream.receive_some(4096):
                                    break
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    finally:
                        await stream.aclose()
                    await trio.sleep(0.1)  # then again

            async with trio.open_nursery() as attack:
                # Per node: 36 idle and 8 slow first frames for the 28 slots
                # the members leave free, and 6 announcing 1 MiB.
                for node in nodes.values():
                    for i in range(50):
                        if i < 36:
                            attack.start_soon(hold, node, b"", False)  # idle
                        elif i < 44:
                            attack.start_soon(hold, node, LENGTH.pack(3000), True)  # slow
                        else:
                            attack.start_soon(hold, node, LENGTH.pack(MIB), True)  # 1 MiB
                await broadcast_and_agree(nodes, 40)
                reasons = {"handshake-timeout", "first-frame-too-large", "too-many-connections"}
                # Every kind of refusal happens (the attackers reconnect).
                await until(
                    lambda: all(
                        reasons <= set(node.statistics().connections_refused)
                        for node in nodes.values()
                    )
                )
                await broadcast_and_agree(nodes, 40)
                attack.cancel_scope.cancel()
            assert opened > 3 * 50
            for node in nodes.values():
                stats = node.statistics()
                assert set(stats.connections_refused) == reasons  # no idle-timeout
                assert stats.connects == 2  # the members' own streams were never cut
