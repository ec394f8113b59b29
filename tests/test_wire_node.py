"""Nodes (EpTO + Cyclon) talking only through sealed, bound frames."""

from __future__ import annotations

import random

import pytest

from epto import Config, CyclonConfig, GroupKey
from epto.check import check
from epto.epidemic import Node, PeerDescriptor
from epto.wire import FrameCodec, GroupSealer

pytest.importorskip("cryptography")


def test_cyclon_nodes_gossip_and_order_through_the_codec() -> None:
    n = 12
    key = GroupKey(key_id=1, secret=bytes(range(32)))
    config = Config.for_group(n, round_interval=1.0)
    cyclon = CyclonConfig(view_size=6, shuffle_length=3, shuffle_period=1.0)
    seeds = [PeerDescriptor(pid=0, address=b"n0")]
    nodes = {}
    codecs = {}
    for pid in range(n):
        rng = random.Random(pid)
        nodes[pid] = Node(
            pid,
            config,
            rng=rng,
            now=0.0,
            sampler=cyclon,
            seeds=[] if pid == 0 else seeds,
            address=b"n%d" % pid,
        )
        sealer = GroupSealer(key, counter_start=0, rng=rng)
        codecs[pid] = FrameCodec(group=9, sealer=sealer, me=pid)
    sent: set[tuple[int, int]] = set()
    kinds: dict[str, int] = {}
    for r in range(1, 60):
        now = float(r)
        if 5 <= r < 15:
            pid = r % n
            sent.add(nodes[pid].broadcast(b"x%d" % r, now))
        wire = []
        for pid, node in nodes.items():
            node.handle_timer(now)
            for dest, message in node.messages_to_send():
                wire += [(dest, raw) for raw in codecs[pid].encode(pid, message, to=dest)]
        for dest, raw in wire:
            frame = codecs[dest].receive(raw, now)
            assert frame is not None
            nodes[dest].receive(frame.sender, frame.message, now)
    for codec in codecs.values():
        for name, count in codec.accepted.items():
            kinds[name] = kinds.get(name, 0) + count
        assert codec.rejected == {}
    assert kinds.get("ball", 0) > 0 and kinds.get("shuffle-request", 0) > 0
    assert kinds.get("shuffle-reply", 0) > 0
    sequences = {pid: [d.event.id for d in node.deliveries()] for pid, node in nodes.items()}
    report = check(sequences, expected=sent)
    assert report.ok and report.total_holes == 0, report.summary()
    assert all(len(seq) == len(sent) == 10 for seq in sequences.values())
