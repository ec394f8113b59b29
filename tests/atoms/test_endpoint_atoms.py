"""The atoms endpoint over bytes: overlapping groups deliver in pairwise
order through real frames; well-formed hostile messages are refused and
counted, never raised."""

from __future__ import annotations

import heapq
import itertools
import random

import pytest

import epto
from epto.atoms import AtomsConfig, SequencingGraph, zipf_memberships
from epto.atoms._messages import (
    PUBLISHER,
    ROUTE,
    AddGroup,
    Change,
    EpochEnd,
    Publish,
    RemoveGroup,
    ReplaceHost,
    Sequenced,
    atoms_registry,
)
from epto.check import check_pairwise
from epto.endpoint import AtomsEndpoint, NodeConfig
from epto.wire import FrameCodec

LIMITS = epto.Limits.for_frame_size(1 << 16)
KEY = epto.GroupKey(key_id=3, secret=bytes(range(32)))


def _endpoints(
    graph: SequencingGraph, **fields: object
) -> tuple[dict[int, AtomsEndpoint], dict[int, str]]:
    nodes = sorted({p for members in graph.groups.values() for p in members})
    addresses = {p: f"10.1.0.{p}:7000" for p in nodes}
    settings = AtomsConfig(graph=graph, max_pending=fields.pop("max_pending", 100_000))  # type: ignore[arg-type]
    endpoints = {
        p: AtomsEndpoint(
            NodeConfig(
                pid=p,
                members=addresses,
                mode="atoms",
                atoms=settings,
                limits=LIMITS,
                **fields,  # type: ignore[arg-type]
            ),
            0.0,
            rng=random.Random(p),
            wall=1.0,
        )
        for p in nodes
    }
    return endpoints, addresses


@pytest.mark.parametrize("sealed", [False, True])
def test_overlapping_groups_deliver_pairwise_order_through_frames(sealed: bool) -> None:
    rng = random.Random(4)
    graph = SequencingGraph.build(zipf_memberships(12, 5, rng))
    endpoints, addresses = _endpoints(graph, group_key=KEY if sealed else None)
    by_address = {a: p for p, a in addresses.items()}
    queue: list[tuple[float, int, int, bytes]] = []
    order = itertools.count()
    last: dict[tuple[int, int], float] = {}
    addressed = {}
    sequences: dict[int, list[epto.EventId]] = {p: [] for p in endpoints}

    def turn(pid: int, now: float) -> None:
        for transmit in endpoints[pid].frames_to_send(now):
            dest = by_address[transmit.address]
            at = max(now + rng.uniform(1, 30), last.get((pid, dest), 0.0))
            last[pid, dest] = at
            heapq.heappush(queue, (at, next(order), dest, transmit.data))
        while (delivery := endpoints[pid].next_delivery()) is not None:
            sequences[pid].append(delivery.event.id)

    for i in range(120):
        pid = rng.choice(sorted(endpoints))
        mine = sorted(g for g, m in graph.groups.items() if pid in m)
        if not mine:
            continue
        group = rng.choice(mine)
        addressed[endpoints[pid].engine.publish(group, b"m%d" % i)] = graph.groups[group]
        turn(pid, 0.0)
    while queue:
        now, _, dest, data = heapq.heappop(queue)
        assert endpoints[dest].receive(data, now)
        turn(dest, now)
    report = check_pairwise(sequences, groups=addressed, broadcast=set(addressed))
    assert report.ok, report.summary()
    assert report.deliveries == sum(len(m) for m in addressed.values())
    for endpoint in endpoints.values():
        assert endpoint.flushed()
        assert endpoint.statistics().rejected == {}


def test_well_formed_hostile_messages_are_refused_and_counted() -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}, 2: {1, 2, 5}})
    endpoints, _ = _endpoints(graph)
    codec = FrameCodec(group=0, limits=LIMITS, registry=atoms_registry())
    route = graph.route(0)
    member = sorted(graph.groups[0])[0]
    outsider = 4  # in group 1 only
    hostile = [
        # to a node that is not the ingress of group 0
        (outsider, member if graph.ingress(0) != member else 2, Publish(0, 0, 0, b"x")),
        # a publication for a group that does not exist
        (member, graph.ingress(0), Publish(99, 0, 0, b"x")),
        # a non-member publishing to group 0 at its ingress
        (outsider, graph.ingress(0), Publish(0, 0, 0, b"x")),
        # a final message from a node that is not the last atom's host
        (outsider, member, Sequenced(0, 0, 0, member, 0, len(route), (), b"x")),
        # a hop beyond the route
        (member, member, Sequenced(0, 0, 0, member, 0, len(route) + 5, (), b"x")),
    ]
    total = 0
    for sender, receiver, message in hostile:
        (frame,) = codec.encode(sender, message, to=receiver)
        assert endpoints[receiver].receive(frame, 0.0)  # decodes; the process refuses
        total += 1
    refused = sum(sum(e.statistics().rejected.values()) for e in endpoints.values())
    assert refused == total
    for endpoint in endpoints.values():
        assert endpoint.next_delivery() is None


def test_hostile_changes_and_markers_are_refused_and_counted() -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}, 2: {1, 2, 5}})
    endpoints, _ = _endpoints(graph, max_pending=2)
    codec = FrameCodec(group=0, limits=LIMITS, registry=atoms_registry())
    coordinator = 1  # the smallest node
    ingress = graph.ingress(0)
    other = next(p for p in sorted(endpoints) if p not in (ingress, coordinator))
    route = graph.route(0)
    hostile = [
        # a change from a node that is not the coordinator
        (other, ingress, Change(1, (RemoveGroup(2),)), "not-coordinator"),
        # a change that skips an epoch
        (coordinator, other, Change(5, (RemoveGroup(2),)), "bad-epoch"),
        # changes that do not apply: an unknown group, an unknown node, the
        # coordinator declared crashed, a group that exists
        (coordinator, other, Change(1, (RemoveGroup(99),)), "bad-change"),
        (coordinator, other, Change(1, (AddGroup(7, frozenset({1, 77})),)), "bad-change"),
        (coordinator, other, Change(1, (ReplaceHost(1, 2),)), "bad-change"),
        (coordinator, other, Change(1, (AddGroup(0, frozenset({1, 2})),)), "bad-change"),
        # a publisher's marker to a node that is not the ingress, and one for
        # a group that does not exist
        (3, other if other != ingress else 2, EpochEnd(0, 0, PUBLISHER, 0), "not-ingress"),
        (3, ingress, EpochEnd(0, 99, PUBLISHER, 0), "unknown-group"),
        # a non-member's marker at the ingress
        (4, ingress, EpochEnd(0, 0, PUBLISHER, 0), "not-a-member"),
        # a route marker from a node that is not the previous place
        (4, 3, EpochEnd(0, 0, ROUTE, len(route)), "bad-source"),
        # a marker for an epoch that is not there yet fills the early buffer
        (3, ingress, EpochEnd(9, 0, PUBLISHER, 0), None),
        (3, ingress, EpochEnd(9, 0, PUBLISHER, 0), None),
        (3, ingress, EpochEnd(9, 0, PUBLISHER, 0), "buffer-full"),
    ]
    for sender, receiver, message, fault in hostile:
        before = dict(endpoints[receiver].engine.process.statistics().rejected)
        (frame,) = codec.encode(sender, message, to=receiver)
        assert endpoints[receiver].receive(frame, 0.0)  # decodes; the process refuses
        after = endpoints[receiver].engine.process.statistics().rejected
        if fault is None:
            assert after == before
        else:
            assert after.get(fault, 0) == before.get(fault, 0) + 1, (message, after)
    for endpoint in endpoints.values():
        assert endpoint.engine.process.epoch == 0
        assert endpoint.next_delivery() is None


def test_groups_change_through_frames() -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}, 2: {1, 2, 5}})
    endpoints, addresses = _endpoints(graph)
    by_address = {a: p for p, a in addresses.items()}
    rng = random.Random(7)
    queue: list[tuple[float, int, int, bytes]] = []
    order = itertools.count()
    last: dict[tuple[int, int], float] = {}
    sequences: dict[int, list[epto.EventId]] = {p: [] for p in endpoints}
    addressed = {}

    def turn(pid: int, now: float) -> None:
        for transmit in endpoints[pid].frames_to_send(now):
            dest = by_address[transmit.address]
            at = max(now + rng.uniform(1, 30), last.get((pid, dest), 0.0))
            last[pid, dest] = at
            heapq.heappush(queue, (at, next(order), dest, transmit.data))
        while (delivery := endpoints[pid].next_delivery()) is not None:
            sequences[pid].append(delivery.event.id)

    def publish_all(now: float) -> None:
        for pid, endpoint in endpoints.items():
            for group in sorted(endpoint.engine.process.groups):
                eid = endpoint.engine.publish(group, b"m")
                addressed[eid] = endpoint.engine.process.members(group)
            turn(pid, now)

    def run(until: float) -> None:
        while queue and queue[0][0] <= until:
            now, _, dest, data = heapq.heappop(queue)
            assert endpoints[dest].receive(data, now)
            turn(dest, now)

    publish_all(0.0)
    coordinator = endpoints[1]
    assert coordinator.engine.add_group(3, {3, 4, 5}) == 1
    turn(1, 5.0)
    publish_all(6.0)
    assert coordinator.engine.remove_group(0) == 2
    turn(1, 10.0)
    publish_all(11.0)
    run(float("inf"))
    report = check_pairwise(sequences, groups=addressed, broadcast=set(addressed))
    assert report.ok, report.summary()
    assert report.deliveries == sum(len(m) for m in addressed.values())
    for endpoint in endpoints.values():
        assert endpoint.engine.process.epoch == 2 and endpoint.flushed()
        assert endpoint.statistics().rejected == {}
        assert endpoint.get_timer() == float("inf")  # no detector, no timer
