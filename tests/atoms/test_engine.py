"""The sequencing-atoms engine in seeded simulations: pairwise order and
liveness on random memberships over reliable FIFO links with random
latencies; and graphs that break the construction are caught (order
violations without atoms, stuck messages without C2)."""

from __future__ import annotations

import heapq
import itertools
import random

import pytest
from epto.transports.simulation import SimulationSpec, run_simulation

from epto.atoms import AtomsProcess, SequencingGraph, zipf_memberships
from epto.check import check_pairwise


def _run(
    graph: SequencingGraph, seed: int, *, messages: int = 300
) -> tuple[dict[int, list[tuple[int, int]]], dict[tuple[int, int], frozenset[int]]]:
    """Every node's deliveries, over FIFO links with random latencies, after
    quiescence; and the members each message was addressed to."""
    rng = random.Random(seed)
    nodes = sorted({p for members in graph.groups.values() for p in members})
    procs = {p: AtomsProcess(p, graph) for p in nodes}
    latency = {(a, b): rng.uniform(1, 50) for a in nodes for b in nodes}
    last: dict[tuple[int, int], float] = {}
    queue: list[tuple[float, int, int | None, int, object]] = []
    order = itertools.count()
    for _ in range(messages):
        p = rng.choice(nodes)
        mine = sorted(g for g, members in graph.groups.items() if p in members)
        if mine:
            heapq.heappush(queue, (rng.uniform(0, 1000), next(order), None, p, rng.choice(mine)))
    sequences: dict[int, list[tuple[int, int]]] = {p: [] for p in nodes}
    addressed: dict[tuple[int, int], frozenset[int]] = {}
    while queue:
        now, _, source, dest, item = heapq.heappop(queue)
        proc = procs[dest]
        if source is None:
            assert isinstance(item, int)
            addressed[proc.publish(item, b"x")] = graph.groups[item]
        else:
            proc.receive(source, item)
        for to, message in proc.messages_to_send():
            at = max(now + latency[dest, to], last.get((dest, to), 0.0))  # FIFO
            last[dest, to] = at
            heapq.heappush(queue, (at, next(order), dest, to, message))
        sequences[dest].extend(d.event.id for d in proc.deliveries())
    for proc in procs.values():
        assert proc.statistics().rejected == {}
    return sequences, addressed


@pytest.mark.parametrize("seed", range(12))
def test_random_memberships_give_pairwise_order_and_nothing_stuck(seed: int) -> None:
    rng = random.Random(seed)
    graph = SequencingGraph.build(zipf_memberships(16, 6, rng))
    sequences, addressed = _run(graph, seed)
    report = check_pairwise(sequences, groups=addressed, broadcast=set(addressed))
    assert report.ok, report.summary()
    owed = sum(len(members) for members in addressed.values())
    assert report.deliveries == owed > 0


class _WithoutAtoms(SequencingGraph):
    """Every group ordered by its ingress alone: no atom orders two groups."""

    __slots__ = ()

    def route(self, group: int) -> tuple[int, ...]:
        return ()

    def stamping(self, group: int) -> tuple[int, ...]:
        return ()

    def ingress(self, group: int) -> int:
        return min(self.groups[group])


class _Shuffled(SequencingGraph):
    """Each group visits its own atoms in an order of its own (C2 broken)."""

    __slots__ = ()

    def route(self, group: int) -> tuple[int, ...]:
        mine = [a for a in sorted(self.atoms) if group in self.atoms[a].served]
        random.Random(group * 7919).shuffle(mine)
        return tuple(mine)

    def stamping(self, group: int) -> tuple[int, ...]:
        return self.route(group)

    def ingress(self, group: int) -> int:
        route = self.route(group)
        return self.atoms[route[0]].host if route else min(self.groups[group])


def _broken(cls: type[SequencingGraph], membership: dict[int, frozenset[int]]) -> SequencingGraph:
    graph = SequencingGraph.build(membership)
    graph.__class__ = cls
    return graph


def test_a_graph_without_atoms_is_caught_by_order_violations() -> None:
    found = 0
    for seed in range(8):
        membership = zipf_memberships(16, 6, random.Random(seed))
        sequences, addressed = _run(_broken(_WithoutAtoms, membership), seed)
        found += check_pairwise(sequences, groups=addressed).violating_pairs
    assert found > 0


def test_a_graph_that_breaks_c2_is_caught_by_stuck_messages() -> None:
    stuck = 0
    for seed in range(8):
        membership = zipf_memberships(16, 6, random.Random(seed))
        sequences, addressed = _run(_broken(_Shuffled, membership), seed)
        stuck += check_pairwise(sequences, groups=addressed).total_stuck
    assert stuck > 0


@pytest.mark.parametrize("groups", [4, 8])
def test_epto_simulate_atoms_passes_with_every_delivery(groups: int) -> None:
    spec = SimulationSpec(mode="atoms", processes=24, groups=groups, rounds=10, seed=groups)
    result = run_simulation(spec)
    summary = result.summary()
    assert summary["ok"], summary["failures"]
    assert summary["order_violations"] == summary["integrity_violations"] == 0
    assert summary["holes"] == summary["validity_violations"] == 0
    assert summary["events"] > 0 and summary["deliveries"] >= summary["events"]
    parameters = summary["parameters"]
    assert parameters["groups"] == groups and parameters["violating_pairs"] == 0
    assert parameters["stretch_mean"] >= 1.0
