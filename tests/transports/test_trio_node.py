"""One node API for both engines (``open_node``), and the token ring's
membership over TCP: a new identity joins through one contact, a member that
was excluded cannot come back under its old identity."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from epto.transports import NodeConfig
from epto.transports._ports import free_ports
from epto.transports.trio_node import open_node
from epto.transports.trio_tcp import TcpNodeConfig, TokenRingNode
from epto.transports.trio_udp import UdpNode

from epto import ConfigurationError, CyclonConfig, GroupKey, Limits
from epto._incarnation import first_seq
from epto.check import check
from epto.tokenring import AUTO_TOKEN_RING_MAX_GROUP, TokenRingConfig

RING = TokenRingConfig(
    heartbeat_interval=0.05,
    suspect_timeout=0.3,
    exclude_timeout=1.0,
    token_timeout=0.6,
    change_timeout=0.3,
    fetch_timeout=0.1,
    readmit_after=0.3,
)
KEY = GroupKey(key_id=1, secret=bytes(range(32)))
MEMBERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}


# -- the configuration ----------------------------------------------------------


def test_mode_auto_follows_the_documented_group_size() -> None:
    assert NodeConfig(pid=1, members=MEMBERS).resolved_mode() == "epto"
    assert NodeConfig(pid=1, members=MEMBERS, mode="auto").resolved_mode() == "token-ring"
    limit = AUTO_TOKEN_RING_MAX_GROUP
    at = NodeConfig(pid=1, members=MEMBERS, mode="auto", group_size=limit)
    above = NodeConfig(pid=1, members=MEMBERS, mode="auto", group_size=limit + 1)
    assert at.resolved_mode() == "token-ring"
    assert above.resolved_mode() == "epto"
    many = {pid: f"127.0.0.1:{9000 + pid}" for pid in range(limit + 1)}
    assert NodeConfig(pid=0, members=many, mode="auto").resolved_mode() == "epto"
    cyclon = NodeConfig(pid=1, members=MEMBERS, mode="auto", sampler=CyclonConfig())
    assert cyclon.resolved_mode() == "epto"


def test_configurations_the_engines_cannot_run_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="full view"):
        NodeConfig(pid=1, members=MEMBERS, mode="token-ring", sampler=CyclonConfig())
    with pytest.raises(ConfigurationError, match="mode must be"):
        NodeConfig(pid=1, members=MEMBERS, mode="paxos")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="contacts is for joining a token ring"):
        NodeConfig(pid=4, contacts={1: MEMBERS[1]})
    with pytest.raises(ConfigurationError, match="not both"):
        NodeConfig(pid=4, mode="token-ring", members=MEMBERS, contacts={1: MEMBERS[1]})
    ring = NodeConfig(pid=1, members=MEMBERS, mode="token-ring")
    with pytest.raises(ConfigurationError, match=r"UdpNode runs EpTO.*open_node"):
        UdpNode(ring)
    zmq_node = pytest.importorskip("epto.transports.zmq_node")
    with pytest.raises(ConfigurationError, match="ZmqNode runs EpTO"):
        zmq_node.ZmqNode(NodeConfig(pid=1, members=MEMBERS, mode="auto"))
    with pytest.raises(ConfigurationError, match="TokenRingNode runs the token ring"):
        TokenRingNode(NodeConfig(pid=1, members=MEMBERS))
    with pytest.raises(ConfigurationError, match="own contact"):
        TokenRingNode(NodeConfig(pid=4, mode="token-ring", contacts={4: MEMBERS[1]}))


def test_open_node_picks_the_engine_and_maps_the_configuration() -> None:
    epto_node = open_node(NodeConfig(pid=1, members=MEMBERS))
    assert isinstance(epto_node, UdpNode) and epto_node.mode == "epto"
    config = NodeConfig(
        pid=1, bind=MEMBERS[1], members=MEMBERS, mode="auto", tokenring=RING, group=5, seed=3
    )
    ring_node = open_node(config)
    assert isinstance(ring_node, TokenRingNode) and ring_node.mode == "token-ring"
    ours = ring_node.config
    assert ours.members == MEMBERS and ours.bind == MEMBERS[1]
    assert (ours.tokenring, ours.group, ours.seed) == (RING, 5, 3)
    # The default datagram-sized limits become the stream limits; others are kept.
    assert ours.limits.max_frame_size == 1 << 20
    tcp = ring_node.tcp_config
    assert (tcp.bind, tcp.limits, tcp.idle_timeout) == (MEMBERS[1], ours.limits, 30.0)
    small = Limits.for_frame_size(4096, max_payload_size=1024)
    budget = TokenRingConfig(max_unstable_bytes=2048, max_unstable_messages=8)
    kept = TokenRingNode(
        NodeConfig(pid=1, members=MEMBERS, mode="auto", limits=small, tokenring=budget)
    )
    assert kept.config.limits == kept.tcp_config.limits == small
    # A window budget that a full view change could not send in one frame is refused.
    with pytest.raises(ConfigurationError, match="max_unstable_bytes"):
        TokenRingNode(NodeConfig(pid=1, members=MEMBERS, mode="auto", limits=small))
    joiner = TokenRingNode(NodeConfig(pid=9, mode="token-ring", contacts={2: MEMBERS[2]}))
    assert joiner.config.contacts == {2: MEMBERS[2]} and not joiner.config.members


def test_a_token_ring_node_derives_its_transport_from_the_configuration() -> None:
    """The transport's settings come from the one configuration: the shared
    fields, the stream limits and an idle timeout above the exclusion time;
    a given transport sets the others and may not contradict it."""
    slow = attrs.evolve(RING, exclude_timeout=20.0)
    config = NodeConfig(
        pid=1, members=MEMBERS, mode="token-ring", tokenring=slow, flush_timeout=2.0
    )
    tcp = TokenRingNode(config).tcp_config
    assert (tcp.idle_timeout, tcp.flush_timeout, tcp.bind) == (40.0, 2.0, config.bind)
    tuned = TokenRingNode(config, tcp=TcpNodeConfig(send_queue=7, link_delays={2: 0.01}))
    given = tuned.tcp_config
    assert (given.send_queue, given.link_delays, given.idle_timeout) == (7, {2: 0.01}, 40.0)
    assert given.limits == tuned.config.limits and given.flush_timeout == 2.0
    with pytest.raises(ConfigurationError, match=r"tcp\.flush_timeout"):
        TokenRingNode(config, tcp=TcpNodeConfig(flush_timeout=9.0))
    with pytest.raises(ConfigurationError, match=r"tcp\.limits"):
        TokenRingNode(config, tcp=TcpNodeConfig(limits=Limits.for_frame_size(1 << 16)))
    with pytest.raises(ConfigurationError, match="idle_timeout"):
        TokenRingNode(config, tcp=TcpNodeConfig(idle_timeout=0.5))


# -- the same API for both engines ------------------------------------------------


async def _collect(node: Any, into: list[tuple[int, int]], count: int) -> None:
    async for delivery in node:
        into.append(delivery.event.id)
        if len(into) >= count:
            return


@pytest.mark.trio
@pytest.mark.parametrize("mode", ["epto", "token-ring", "auto"])
async def test_one_api_for_both_engines(mode: str) -> None:
    """The same code runs a group whichever engine the configuration picks."""
    kind = socket.SOCK_DGRAM if mode == "epto" else socket.SOCK_STREAM
    ports = free_ports(3, kind)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip((1, 2, 3), ports, strict=True)}
    per_node = 10
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in members}
    broadcast: set[tuple[int, int]] = set()
    with trio.fail_after(20):
        async with AsyncExitStack() as stack:
            nodes = {}
            for pid, address in members.items():
                config = NodeConfig(
                    pid=pid,
                    bind=address,
                    members=members,
                    mode=mode,  # type: ignore[arg-type]
                    tokenring=RING,
                    round_interval=0.02,
                    seed=pid,
                )
                nodes[pid] = await stack.enter_async_context(open_node(config))
            expected = "epto" if mode == "epto" else "token-ring"
            assert {node.mode for node in nodes.values()} == {expected}
            async with trio.open_nursery() as nursery:
                for pid, node in nodes.items():
                    nursery.start_soon(_collect, node, seqs[pid], per_node * 3)
                for i in range(per_node):
                    for node in nodes.values():
                        broadcast.add(node.broadcast(b"m%d" % i))
                    await trio.sleep(0.01)
            for node in nodes.values():
                stats = node.statistics()
                assert stats.broadcasts == per_node and stats.delivered == 3 * per_node
                assert stats.delivery_queue == 0 and not stats.rejected
    report = check(seqs, broadcast=broadcast, expected=broadcast)
    assert report.ok, report.summary()
    assert seqs[1] == seqs[2] == seqs[3]


@pytest.mark.trio
async def test_abort_inside_the_block_does_not_cancel_the_block() -> None:
    (port,) = free_ports(1, socket.SOCK_DGRAM)
    address = f"127.0.0.1:{port}"
    reached = False
    with trio.fail_after(5):
        async with UdpNode(NodeConfig(pid=1, bind=address, members={1: address})) as node:
            node.abort()
            await trio.sleep(0.01)
            assert [d async for d in node] == []
            reached = True
    assert reached


# -- token ring: joins and exclusion over TCP -------------------------------------


@asynccontextmanager
async def ring(
    pids: tuple[int, ...], sealed: bool, tokenring: TokenRingConfig = RING
) -> AsyncIterator[tuple[AsyncExitStack, dict[int, TokenRingNode]]]:
    ports = free_ports(len(pids), socket.SOCK_STREAM)
    members = {pid: f"127.0.0.1:{port}" for pid, port in zip(pids, ports, strict=True)}
    async with AsyncExitStack() as stack:
        nodes = {}
        for pid in pids:
            config = node_config(
                pid, sealed, bind=members[pid], members=members, tokenring=tokenring
            )
            nodes[pid] = await stack.enter_async_context(TokenRingNode(config))
        yield stack, nodes
        for node in nodes.values():
            node.abort()


def node_config(pid: int, sealed: bool, **fields: Any) -> NodeConfig:
    fields.setdefault("tokenring", RING)
    return NodeConfig(
        pid=pid,
        mode="token-ring",
        seed=pid,
        group=9,
        group_key=KEY if sealed else None,
        **fields,
    )


async def wait_until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.mark.trio
@pytest.mark.parametrize("sealed", [False, True])
async def test_a_new_identity_joins_through_one_contact(sealed: bool) -> None:
    """Three members run; a fourth identity knows only member 2's address. It is
    admitted by a view change, as an external member (kept external here: no
    readmission), learns every member's address (and they its), delivers from
    its entry on in the group's order, and its own broadcasts are delivered by
    everyone."""
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in (1, 2, 3, 4)}
    external = attrs.evolve(RING, readmit_after=60.0)
    with trio.fail_after(30):
        async with ring((1, 2, 3), sealed, external) as (stack, nodes):
            before: set[tuple[int, int]] = set()
            async with trio.open_nursery() as nursery:
                for pid, node in nodes.items():
                    nursery.start_soon(_collect, node, seqs[pid], 15)
                for i in range(5):
                    for node in nodes.values():
                        before.add(node.broadcast(b"before %d" % i))
            view = nodes[1].statistics().view
            joiner = await stack.enter_async_context(
                TokenRingNode(
                    node_config(4, sealed, contacts={2: nodes[2].address}, tokenring=external)
                )
            )
            nodes[4] = joiner
            await wait_until(lambda: joiner.statistics().role != "joining", "admitted")
            stats = nodes[1].statistics()
            assert 4 in stats.members and stats.view > view
            await wait_until(
                lambda: all(4 in nodes[pid].engine.addresses() for pid in (1, 2, 3)), "learned"
            )
            for pid, node in nodes.items():
                assert node.engine.addresses().get(4, joiner.address) == joiner.address
                assert set(node.engine.addresses()) >= {1, 2, 3, 4} - {pid}
            after: set[tuple[int, int]] = set()
            async with trio.open_nursery() as nursery:
                for pid, node in nodes.items():
                    nursery.start_soon(_collect, node, seqs[pid], len(seqs[pid]) + 20)
                for i in range(5):
                    for node in nodes.values():
                        after.add(node.broadcast(b"after %d" % i))
                    await trio.sleep(0.01)
            assert not any(n.statistics().rejected for n in nodes.values())
            assert joiner.statistics().role == "external"
            assert 4 not in nodes[1].statistics().core
    everyone = {pid: seqs[pid] for pid in (1, 2, 3)}
    report = check(everyone, broadcast=before | after, expected=before | after)
    assert report.ok, report.summary()
    assert seqs[1] == seqs[2] == seqs[3]
    # The joiner delivers a suffix of the group's sequence holding all of 'after'.
    assert seqs[4] == seqs[1][len(seqs[1]) - len(seqs[4]) :]
    assert after <= set(seqs[4])
    first = first_seq(joiner.incarnation)
    assert {eid for eid in after if eid[0] == 4} == {(4, first + i) for i in range(5)}


@pytest.mark.trio
async def test_an_excluded_member_started_again_under_its_id_is_admitted_back(
    tmp_path: Path,
) -> None:
    """Member 3 crashes and is excluded by the others after exclude_timeout. A
    node started again as 3 (the same id and address, the same members, a
    later incarnation from its data directory) is admitted back by a view
    change, and what it broadcasts is delivered by everyone. A node with a
    new id still joins through a contact."""
    with trio.fail_after(30):
        async with ring((1, 2, 3), False) as (stack, nodes):
            members = {pid: node.address for pid, node in nodes.items()}
            nodes[3].abort()
            await wait_until(lambda: nodes[1].statistics().members == (1, 2), "3 excluded")
            again = await stack.enter_async_context(
                TokenRingNode(
                    node_config(3, False, bind=members[3], members=members, data_dir=str(tmp_path))
                )
            )
            assert again.incarnation > nodes[3].incarnation
            await wait_until(lambda: 3 in nodes[1].statistics().members, "3 admitted back")
            await wait_until(lambda: again.statistics().role != "joining", "3 in the view")
            eid = again.broadcast(b"back")
            got: dict[int, list[tuple[int, int]]] = {2: [], 3: []}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, nodes[2], got[2], 1)
                nursery.start_soon(_collect, again, got[3], 1)
            assert got == {2: [eid], 3: [eid]}
            assert eid[1] == first_seq(again.incarnation)
            assert nodes[1].process.config.incarnation_of(3) == again.incarnation
            fresh = await stack.enter_async_context(
                TokenRingNode(node_config(5, False, contacts={1: members[1]}))
            )
            await wait_until(lambda: fresh.statistics().role != "joining", "5 admitted")
            assert set(nodes[1].statistics().members) == {1, 2, 3, 5}


@pytest.mark.trio
async def test_joiners_known_to_different_contacts_learn_each_other() -> None:
    """4 joins through member 1 and 5 through member 2, started together. Once
    both are in the view every node knows every address (from hellos or
    books; whether the two are admitted by one change or two depends on
    timing, the directory test below covers one change) and both joiners'
    broadcasts are delivered by everyone in the same order."""
    seqs: dict[int, list[tuple[int, int]]] = {pid: [] for pid in (1, 2, 3, 4, 5)}
    with trio.fail_after(30):
        async with ring((1, 2, 3), False) as (stack, nodes):
            for pid, contact in ((4, 1), (5, 2)):
                config = node_config(pid, False, contacts={contact: nodes[contact].address})
                nodes[pid] = await stack.enter_async_context(TokenRingNode(config))
            await wait_until(
                lambda: (
                    all(5 in nodes[p].statistics().members for p in (4, 5))
                    and all(4 in nodes[p].statistics().members for p in (4, 5))
                ),
                "both admitted",
            )
            await wait_until(
                lambda: all(
                    set(n.engine.addresses()) >= {1, 2, 3, 4, 5} - {p} for p, n in nodes.items()
                ),
                "every address known everywhere",
            )
            sent: set[tuple[int, int]] = set()
            async with trio.open_nursery() as nursery:
                for pid, node in nodes.items():
                    nursery.start_soon(_collect, node, seqs[pid], 10)
                for i in range(2):
                    for node in nodes.values():
                        sent.add(node.broadcast(b"all %d" % i))
    report = check(seqs, broadcast=sent, expected=sent)
    assert report.ok, report.summary()
    assert all(seqs[p] == seqs[1] for p in seqs)


@pytest.mark.trio
async def test_address_books_fill_gaps_and_senders_speak_for_themselves() -> None:
    import struct

    from epto.endpoint import parse_host_port
    from epto.endpoint._addresses import AddressBook, with_addresses
    from epto.tokenring import token_ring_registry
    from epto.wire import FrameCodec

    codec = FrameCodec(group=9, registry=with_addresses(token_ring_registry()))

    def framed(sender: int, *entries: tuple[int, str]) -> bytes:
        frames = codec.encode(sender, AddressBook(entries=entries))
        return b"".join(struct.pack(">I", len(f)) + f for f in frames)

    with trio.fail_after(10):
        async with ring((1, 2), False) as (_stack, nodes):
            before = nodes[1].engine.addresses()
            stream = await trio.open_tcp_stream(*parse_host_port(nodes[1].address))
            await stream.send_all(
                framed(
                    7,
                    (7, "0.0.0.0:4567"),  # the sender: unspecified host, seen from the socket
                    (2, "10.9.9.9:1"),  # a third party's claim about a known member
                    (8, "127.0.0.1:5555"),  # a gap: taken
                    (1, "127.0.0.1:1"),  # the receiver itself: ignored
                    (6, "no-port"),  # not host:port: counted
                )
            )
            await stream.send_all(framed(7, (7, "127.0.0.1:4568")))
            await wait_until(
                lambda: nodes[1].engine.addresses().get(7) == "127.0.0.1:4568", "7 moved"
            )
            book = nodes[1].engine.addresses()
            assert book[2] == before[2] and book[8] == "127.0.0.1:5555"
            assert book[1] == before[1] and 6 not in book
            assert nodes[1].statistics().rejected.get("bad-address") == 1
            await stream.aclose()


def test_address_book_frames_round_trip_and_garbage_is_a_protocol_error() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from epto import RemoteProtocolError
    from epto.endpoint._addresses import ADDRESSES_CODE, AddressBook, with_addresses
    from epto.tokenring import token_ring_registry
    from epto.wire import FrameCodec
    from epto.wire._frames import pack_header

    codec = FrameCodec(group=3, registry=with_addresses(token_ring_registry()))
    book = AddressBook(entries=((1, "127.0.0.1:9001"), (2**64 - 1, "[::1]:7")))
    (frame,) = codec.encode(5, book, to=None)
    decoded = codec.decode(frame)
    assert decoded.sender == 5 and decoded.message == book
    with pytest.raises(Exception, match="ASCII"):
        codec.encode(5, AddressBook(entries=((1, "hôte:1"),)))

    @settings(derandomize=True, max_examples=300, deadline=None)
    @given(st.binary(max_size=200))
    def garbage(body: bytes) -> None:
        data = pack_header(ADDRESSES_CODE, 5, 3) + body
        with suppress(RemoteProtocolError):
            codec.decode(data)

    garbage()


def test_directory_tells_the_members_whenever_it_can_reach_more_of_them() -> None:
    """Joiners 4 and 5 admitted together, known to members 1 and 2 only: each
    contact passes its book on when it learns a new member's address, so the
    two joiners end up knowing each other although neither contact knew both."""
    from epto.endpoint._addresses import AddressBook, Directory

    def book(**entries: str) -> dict[int, str]:
        return {int(k[1:]): v for k, v in entries.items()}

    one = Directory(1, book(p1="h:1", p2="h:2", p3="h:3", p4="h:4"))
    two = Directory(2, book(p1="h:1", p2="h:2", p3="h:3", p5="h:5"))
    one.advertised, two.advertised = "h:1", "h:2"
    view = (1, 2, 3, 4, 5)
    assert one.to_tell(0, (1, 2, 3)) == [2, 3]  # at start: every member
    assert one.to_tell(0, (1, 2, 3)) == []  # nothing new
    assert one.to_tell(1, view) == [2, 3, 4]  # the view gained 4 (and 5, unknown)
    assert two.to_tell(1, view) == [1, 3, 5]
    one.learn(2, two.book_for(1, view), lambda: "h")
    assert one.addresses[5] == "h:5"
    assert one.to_tell(1, view) == [2, 3, 4, 5]  # 4 hears of 5 from 1
    assert one.book_for(4, view).entries == ((1, "h:1"), (2, "h:2"), (3, "h:3"), (5, "h:5"))
    two.learn(1, one.book_for(2, view), lambda: "h")
    assert two.to_tell(1, view) == [1, 3, 4, 5]  # 5 hears of 4 from 2
    assert one.to_tell(1, view) == two.to_tell(1, view) == []  # the exchange ends
    # The sender speaks for itself; third parties only fill gaps.
    one.learn(9, AddressBook(entries=((9, "0.0.0.0:7"), (2, "evil:1"))), lambda: "10.0.0.9")
    assert one.addresses[9] == "10.0.0.9:7" and one.addresses[2] == "h:2"


def test_epto_node_refuses_what_the_engines_cannot_run() -> None:
    from epto.cli import main

    with pytest.raises(SystemExit, match="full view"):
        main(["node", "--id=1", "--mode=token-ring", "--cyclon", "--peer=2=127.0.0.1:9"])
    with pytest.raises(SystemExit, match="runs on --transport trio"):
        main(["node", "--id=1", "--mode=auto", "--transport=zmq", "--peer=2=127.0.0.1:9"])
    with pytest.raises(SystemExit, match="not both"):
        main(["node", "--id=4", "--mode=token-ring", "--peer=2=h:9", "--contact=1=h:8"])
    with pytest.raises(SystemExit, match="contacts is for joining a token ring"):
        main(["node", "--id=4", "--contact=1=127.0.0.1:8"])


def test_epto_node_token_ring_timeouts() -> None:
    from epto.cli import build_parser as parser
    from epto.cli._node import _config

    def config(*argv: str) -> NodeConfig:
        args = parser().parse_args(["node", "--id=1", "--mode=token-ring", *argv])
        result: NodeConfig = _config(args)
        return result

    peers = ("--peer=2=127.0.0.1:9", "--peer=3=127.0.0.1:10")
    ring_cfg = config(*peers, "--token-hold=1.0").tokenring
    assert ring_cfg.token_hold == 1.0 and ring_cfg.token_timeout == 2 * 3 * 1.0
    ring_cfg = config(*peers, "--token-hold=0.01", "--exclude-timeout=2").tokenring
    assert ring_cfg.token_timeout == TokenRingConfig().token_timeout
    assert ring_cfg.exclude_timeout == 2.0
    ring_cfg = config(*peers, "--token-hold=1.0", "--token-timeout=0.9").tokenring
    assert ring_cfg.token_timeout == 0.9
    joiner = config("--contact=2=127.0.0.1:9")
    assert joiner.contacts == {2: "127.0.0.1:9"} and not joiner.members
