"""Signed atoms groups: publications are signed by their origin and checked
on arrival with the roster, as in the other engines (docs/security.md); an
unsigned, forged or altered publication is refused, counted, never
delivered."""

from __future__ import annotations

import random
from collections import deque

import epto
from epto import EventSigner, keys
from epto.atoms import AtomsConfig, SequencingGraph
from epto.atoms._messages import Publish, Sequenced, atoms_registry, publication
from epto.endpoint import AtomsEndpoint, NodeConfig
from epto.wire import FrameCodec

LIMITS = epto.Limits.for_frame_size(1 << 16)
GRAPH = SequencingGraph.build({0: {1, 2, 3}})
PAIRS = {pid: keys.generate_signing_key() for pid in (1, 2, 3)}
ROSTER = {pid: public for pid, (_, public) in PAIRS.items()}


def _endpoint(pid: int, *, signed: bool = True) -> AtomsEndpoint:
    config = NodeConfig(
        pid=pid,
        members={p: f"127.0.0.1:{7000 + p}" for p in PAIRS},
        mode="atoms",
        atoms=AtomsConfig(graph=GRAPH),
        limits=LIMITS,
        signing_key=PAIRS[pid][0] if signed else None,
        roster=ROSTER,
    )
    return AtomsEndpoint(config, 0.0, rng=random.Random(pid), wall=1.0)


def _run(endpoints: dict[int, AtomsEndpoint]) -> dict[int, list[epto.Delivery]]:
    """Every frame to its receiver, in order (reliable FIFO links)."""
    delivered: dict[int, list[epto.Delivery]] = {p: [] for p in endpoints}
    queue: deque[tuple[int, bytes]] = deque()
    while True:
        for pid, endpoint in endpoints.items():
            queue.extend((t.dest, t.data) for t in endpoint.frames_to_send(0.0))
            while (delivery := endpoint.next_delivery()) is not None:
                delivered[pid].append(delivery)
        if not queue:
            return delivered
        while queue:
            dest, data = queue.popleft()
            endpoints[dest].receive(data, 0.0)


def test_a_signed_group_delivers_signed_publications() -> None:
    endpoints = {pid: _endpoint(pid) for pid in PAIRS}
    eids = [endpoints[pid].broadcast(b"from %d" % pid, 0.0) for pid in PAIRS]
    delivered = _run(endpoints)
    for pid, endpoint in endpoints.items():
        assert sorted(d.event.id for d in delivered[pid]) == sorted(eids)
        assert endpoint.statistics().rejected == {}


def test_a_signed_group_refuses_an_unsigned_publication() -> None:
    endpoints = {pid: _endpoint(pid, signed=pid != 2) for pid in PAIRS}
    eid = endpoints[2].broadcast(b"unsigned", 0.0)
    delivered = _run(endpoints)
    for pid in (1, 3):
        assert eid not in {d.event.id for d in delivered[pid]}
    unsigned = sum(e.statistics().rejected.get("unsigned", 0) for e in endpoints.values())
    assert unsigned >= 1


def test_forged_and_altered_publications_are_refused_and_counted() -> None:
    receiver = _endpoint(1)
    codec = FrameCodec(group=0, limits=LIMITS, registry=atoms_registry())

    def feed(sender: int, message: object) -> None:
        for frame in codec.encode(sender, message, to=1):
            assert receiver.receive(frame, 0.0)  # a well-formed frame: accepted, then refused

    # Unsigned, and signed by another member's key in the name of node 2.
    feed(2, Publish(0, 0, 7, b"forged"))
    forged = EventSigner(3, PAIRS[3][0]).signature(publication(2, 8, 0, b"forged", b""))
    feed(2, Publish(0, 0, 8, b"forged", forged))
    # A relay that alters a publication node 2 signed.
    signer = EventSigner(2, PAIRS[2][0])
    signature = signer.signature(publication(2, 9, 0, b"genuine", b""))
    feed(3, Sequenced(0, 0, 0, 2, 9, 1, (), b"genuine", signature))
    feed(3, Sequenced(0, 0, 0, 2, 9, 1, (), b"altered", signature))
    rejected = receiver.statistics().rejected
    assert rejected.get("unsigned") == 1
    assert rejected.get("bad-signature") == 1
    assert rejected.get("altered") == 1
    assert _run({1: receiver})[1] == []  # nothing forged is delivered
