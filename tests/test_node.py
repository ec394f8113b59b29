"""The Node: an EpTO process with a full view or Cyclon, run by one driver loop."""

from __future__ import annotations

import random

import pytest
from pss_net import Net, address, seed_of

import epto
import epto.epidemic
from epto import Config, CyclonConfig
from epto.check import check
from epto.epidemic import Node
from epto.wire import Leave, ShuffleReply, ShuffleRequest

CONFIG = Config(fanout=8, ttl=12, round_interval=0.125)


def deliveries_of(nodes: dict[int, Node], log: dict[int, list[epto.EventId]]) -> None:
    for pid, node in nodes.items():
        log.setdefault(pid, []).extend(d.event.id for d in node.deliveries())


def test_full_view_group_delivers_everything_in_order() -> None:
    n = 20
    net = Net(1)
    rng = random.Random(1)
    members = {pid: address(pid) for pid in range(n)}
    nodes = {
        pid: Node(pid, CONFIG, rng=random.Random(rng.getrandbits(64)), now=0.0, members=members)
        for pid in range(n)
    }
    for pid, node in nodes.items():
        net.add(pid, node)
    broadcast = set()
    log: dict[int, list[epto.EventId]] = {}
    for r in range(10):
        for pid in rng.sample(range(n), 3):
            broadcast.add(nodes[pid].broadcast(b"r%d" % r, net.now))
            net.flush(pid)
        net.run_until((r + 1) * CONFIG.round_interval)
        deliveries_of(nodes, log)
    net.run_until(40 * CONFIG.round_interval)
    deliveries_of(nodes, log)
    report = check(log, broadcast=broadcast, expected=lambda p, e: True)
    assert report.ok and report.total_holes == 0, report.summary()
    assert report.events == len(broadcast) == 30
    assert nodes[3].address_of(4) == address(4)
    stats = nodes[0].statistics()
    assert stats.sampler is None and stats.process.delivered == 30


def test_cyclon_group_newcomer_through_one_seed_is_delivered_without_holes() -> None:
    n = 100
    cyclon = CyclonConfig(view_size=20, shuffle_length=5)
    net = Net(2)
    rng = random.Random(2)
    nodes: dict[int, Node] = {}

    def add(pid: int, seeds: list[epto.epidemic.PeerDescriptor]) -> None:
        node = Node(
            pid,
            CONFIG,
            rng=random.Random(rng.getrandbits(64)),
            now=net.now,
            sampler=cyclon,
            seeds=seeds,
            address=address(pid),
        )
        nodes[pid] = node
        net.add(pid, node)

    for pid in range(n):
        add(pid, [seed_of(0)] if pid else [])
    net.run_until(30 * cyclon.shuffle_period)  # views converge before anyone broadcasts
    newcomer = n
    add(newcomer, [seed_of(42)])
    net.run_until(net.now + 10 * cyclon.shuffle_period)
    known_by = sum(newcomer in node.cyclon for node in nodes.values() if node.cyclon)
    assert known_by >= 3

    broadcast: set[epto.EventId] = set()
    log: dict[int, list[epto.EventId]] = {}
    start = net.now
    for r in range(12):
        senders = [newcomer, *rng.sample(range(n), 2)]
        for pid in senders:
            broadcast.add(nodes[pid].broadcast(b"x", net.now))
            net.flush(pid)
        net.run_until(start + (r + 1) * CONFIG.round_interval)
        deliveries_of(nodes, log)
    net.run_until(net.now + 40 * CONFIG.round_interval)
    deliveries_of(nodes, log)
    report = check(log, broadcast=broadcast, expected=lambda p, e: True)
    assert report.ok, report.summary()
    assert report.total_holes == 0, report.summary()
    mine = {e for e in broadcast if e[0] == newcomer}
    assert len(mine) == 12
    assert all(mine <= set(seq) for seq in log.values())
    stats = nodes[newcomer].statistics()
    assert stats.sampler is not None and stats.sampler.shuffles >= 10
    assert net.rejected == 0


def test_dispatch_and_rejections() -> None:
    full = Node(1, CONFIG, rng=random.Random(1), now=0.0, members=[1, 2, 3])
    with pytest.raises(epto.RemoteProtocolError) as info:
        full.receive(2, ShuffleRequest(entries=(seed_of(2),)), 0.0)
    assert info.value.fault == "unexpected-peer-message"
    full.receive(2, Leave(), 0.0)  # harmless on a full view
    with pytest.raises(epto.RemoteProtocolError) as info:
        full.receive(2, [1, 2], 0.0)
    assert info.value.fault == "unknown-message"
    assert full.statistics().rejected == {"unexpected-peer-message": 1, "unknown-message": 1}
    assert full.address_of(2) is None  # ids only: the driver resolves

    node = Node(
        1, CONFIG, rng=random.Random(1), now=0.0, sampler=CyclonConfig(), seeds=[seed_of(2)]
    )
    with pytest.raises(epto.RemoteProtocolError) as info:
        node.receive(2, ShuffleReply(entries=(seed_of(1),)), 0.0)
    assert info.value.fault == "self-entry"
    stats = node.statistics()
    assert stats.sampler is not None and stats.sampler.rejected == {"self-entry": 1}
    assert node.address_of(2) == address(2)
    with pytest.raises(epto.LocalProtocolError):
        Node(1, CONFIG, rng=random.Random(1), now=0.0, sampler="cyclon")  # type: ignore[arg-type]


def test_timer_is_the_earliest_of_round_and_shuffle() -> None:
    cfg = CyclonConfig(shuffle_period=10.0)
    node = Node(1, CONFIG, rng=random.Random(3), now=0.0, sampler=cfg, seeds=[seed_of(2)])
    assert node.get_timer() == CONFIG.round_interval  # the round comes first
    assert node.cyclon is not None
    slow_round = Config(fanout=2, ttl=3, round_interval=100.0)
    node = Node(1, slow_round, rng=random.Random(3), now=0.0, sampler=cfg, seeds=[seed_of(2)])
    assert node.get_timer() == node.cyclon.get_timer() < 10.0  # type: ignore[union-attr]
    node.handle_timer(node.get_timer())
    [(dest, msg)] = node.messages_to_send()
    assert dest == 2 and isinstance(msg, ShuffleRequest)


def test_leave_sends_leaves_and_stops() -> None:
    node = Node(
        1,
        CONFIG,
        rng=random.Random(3),
        now=0.0,
        sampler=CyclonConfig(),
        seeds=[seed_of(2), seed_of(3)],
        address=address(1),
    )
    node.broadcast(b"before", 0.0)
    node.leave(0.01)
    out = node.messages_to_send()
    assert sorted(d for d, m in out if isinstance(m, Leave)) == [2, 3]
    assert node.closed and node.get_timer() == float("inf")
    with pytest.raises(epto.LocalProtocolError):
        node.broadcast(b"after", 0.02)
    node.handle_timer(5.0)
    node.receive(2, ShuffleRequest(entries=(seed_of(2),)), 5.0)
    assert node.messages_to_send() == []
    assert node.descriptor() == epto.epidemic.PeerDescriptor(pid=1, address=address(1), age=0)
