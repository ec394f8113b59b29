"""The sequencing graph: Figure 1 of seed 003 as a test vector, the rules C1
and C2 and coverage after every change on random memberships, and a checker
that fails on broken graphs."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epto.atoms import Atom, GraphChange, SequencingGraph, check_graph

A, B, C, D = 0, 1, 2, 3
Q0, Q1, Q2 = 0, 1, 2


def served(graph: SequencingGraph) -> dict[frozenset[int], frozenset[int]]:
    return {atom.overlap: atom.served for atom in graph.atoms.values()}


def test_figure_1() -> None:
    # (a)
    graph = SequencingGraph.build({0: {A, B, C}, 1: {B, C}, 2: {A, B, D}})
    assert served(graph) == {
        frozenset({B, C}): frozenset({0, 1}),
        frozenset({A, B}): frozenset({0, 2}),
    }
    assert graph.atoms[Q0].overlap == {B, C}
    assert graph.atoms[Q1].overlap == {A, B}
    assert graph.check() == []
    # (b): BD is new; G3 is routed through AB rather than closing a loop.
    change = graph.add_group(3, {B, C, D})
    assert change == GraphChange(added=(Q2,), rerouted=(2, 3))
    assert served(graph) == {
        frozenset({B, C}): frozenset({0, 1, 3}),
        frozenset({A, B}): frozenset({0, 2}),
        frozenset({B, D}): frozenset({2, 3}),
    }
    assert graph.atoms[Q2].overlap == {B, D}
    assert graph.route(3) == (Q0, Q1, Q2)
    assert graph.stamping(3) == (Q0, Q2)
    assert graph.edges == {(Q0, Q1), (Q1, Q2)}
    assert graph.check() == []
    # (c)
    change = graph.add_group(4, {B, D})
    assert change == GraphChange(rerouted=(4,))
    assert graph.atoms[Q2].served == {2, 3, 4}
    assert graph.route(4) == (Q2,)
    assert graph.check() == []
    # (d): AB retires, its parent forwards to its child.
    change = graph.remove_group(0)
    assert change == GraphChange(retired=(Q1,), rerouted=(2, 3))
    assert served(graph) == {
        frozenset({B, C}): frozenset({1, 3}),
        frozenset({B, D}): frozenset({2, 3, 4}),
    }
    assert graph.route(3) == (Q0, Q2)
    assert graph.route(2) == (Q2,)
    assert graph.edges == {(Q0, Q2)}
    assert graph.check() == []


def test_hosts_and_ingress() -> None:
    graph = SequencingGraph.build({0: {A, B, C}, 1: {B, C}, 2: {A, B, D}, 5: {7, 9}})
    for atom in graph.atoms.values():
        assert atom.host in atom.overlap
    # BC and AB share B: the second atom is co-located with the first.
    assert {atom.host for atom in graph.atoms.values()} == {B}
    assert graph.ingress(0) == graph.atoms[graph.route(0)[0]].host
    assert graph.route(5) == ()
    assert graph.ingress(5) == 7


def test_errors() -> None:
    graph = SequencingGraph()
    graph.add_group(1, {1, 2})
    with pytest.raises(ValueError):
        graph.add_group(1, {3, 4})
    with pytest.raises(ValueError):
        graph.add_group(2, [])
    with pytest.raises(KeyError):
        graph.remove_group(9)
    with pytest.raises(KeyError):
        graph.route(9)


def test_identical_groups_and_singletons() -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {1, 2, 3}, 2: {4}, 3: {1}})
    assert [a.overlap for a in graph.atoms.values()] == [frozenset({1, 2, 3})]
    assert graph.route(0) == graph.route(1) == (0,)
    assert graph.route(2) == graph.route(3) == ()
    assert graph.check() == []


def test_deterministic() -> None:
    rng = random.Random(5)
    groups = {g: set(rng.sample(range(16), rng.randint(1, 10))) for g in range(12)}
    one, two = SequencingGraph.build(groups), SequencingGraph.build(groups)
    assert one.atoms == two.atoms
    assert one.edges == two.edges
    assert all(one.route(g) == two.route(g) for g in groups)


# -- properties ------------------------------------------------------------

memberships = st.lists(
    st.frozensets(st.integers(0, 15), min_size=1, max_size=16), min_size=1, max_size=12
)


def assert_valid(graph: SequencingGraph) -> None:
    assert graph.check() == []
    edges = graph.edges
    for g, members in graph.groups.items():
        route = graph.route(g)
        needed = {a.id for a in graph.atoms.values() if a.overlap <= members and g in a.served}
        assert needed <= set(route)
        assert set(graph.stamping(g)) == needed
        assert all(step in edges for step in itertools.pairwise(route))
        assert len(set(route)) == len(route)
        if route:
            # Routes are trimmed: they start and end at an atom that serves them.
            assert route[0] in needed and route[-1] in needed
            assert graph.ingress(g) == graph.atoms[route[0]].host
    for atom in graph.atoms.values():
        assert atom.host in atom.overlap
        assert len(atom.served) >= 2


@settings(max_examples=150, deadline=None)
@given(memberships, st.randoms(use_true_random=False))
def test_every_change_keeps_the_rules(groups: list[frozenset[int]], rng: random.Random) -> None:
    graph = SequencingGraph()
    ids = list(range(len(groups)))
    rng.shuffle(ids)
    seen_atoms: set[int] = set()
    for gid, members in zip(ids, groups, strict=True):
        change = graph.add_group(gid, members)
        assert not set(change.added) & seen_atoms, "atom ids are never reused"
        seen_atoms |= set(change.added)
        assert_valid(graph)
    live = sorted(graph.groups)
    rng.shuffle(live)
    next_id = len(groups)
    for gid in live:
        before = dict(graph.atoms)
        change = graph.remove_group(gid)
        assert set(change.retired) == set(before) - set(graph.atoms)
        assert_valid(graph)
        if rng.random() < 0.3:
            graph.add_group(next_id, rng.sample(range(16), rng.randint(1, 12)))
            next_id += 1
            assert_valid(graph)


@settings(max_examples=60, deadline=None)
@given(memberships)
def test_build_equals_the_definitions(groups: list[frozenset[int]]) -> None:
    graph = SequencingGraph.build(dict(enumerate(groups)))
    expected: dict[frozenset[int], set[int]] = {}
    for i, gi in enumerate(groups):
        for j, gj in enumerate(groups[:i]):
            if len(gi & gj) >= 2:
                expected.setdefault(gi & gj, set()).update((i, j))
    assert served(graph) == {o: frozenset(s) for o, s in expected.items()}


# -- the checker can fail --------------------------------------------------


def parts(
    graph: SequencingGraph,
) -> tuple[
    Mapping[int, frozenset[int]], dict[int, Atom], set[tuple[int, int]], dict[int, tuple[int, ...]]
]:
    return (
        graph.groups,
        dict(graph.atoms),
        set(graph.edges),
        {g: graph.route(g) for g in graph.groups},
    )


def figure_1b() -> SequencingGraph:
    return SequencingGraph.build({0: {A, B, C}, 1: {B, C}, 2: {A, B, D}, 3: {B, C, D}})


def test_checker_catches_a_loop() -> None:
    groups, atoms, edges, routes = parts(figure_1b())
    assert check_graph(groups, atoms, edges, routes) == []
    edges.add((Q0, Q2))  # the loop-closing edge of Figure 1(b)
    routes[3] = (Q0, Q2)
    problems = check_graph(groups, atoms, edges, routes)
    assert any(p.startswith("C2") and "loop" in p for p in problems)


def test_checker_catches_an_edge_used_both_ways() -> None:
    groups, atoms, edges, routes = parts(figure_1b())
    edges.add((Q1, Q0))
    assert any("both directions" in p for p in check_graph(groups, atoms, edges, routes))


def test_checker_catches_a_dropped_atom() -> None:
    groups, atoms, edges, routes = parts(figure_1b())
    del atoms[Q2]
    problems = check_graph(groups, atoms, edges, routes)
    assert any(p.startswith("coverage") for p in problems)
    assert any("unknown" in p for p in problems)


def test_checker_catches_a_broken_route() -> None:
    groups, atoms, edges, routes = parts(figure_1b())
    routes[3] = (Q0, Q2)  # skips Q1: not an edge
    assert any("not an edge" in p for p in check_graph(groups, atoms, edges, routes))
    routes[3] = (Q0, Q1)  # misses Q2
    assert any("misses" in p for p in check_graph(groups, atoms, edges, routes))


def test_checker_catches_wrong_atoms() -> None:
    groups, atoms, edges, routes = parts(figure_1b())
    atoms[Q1] = Atom(id=Q1, overlap=frozenset({A, B}), served=frozenset({0}), host=C)
    atoms[7] = Atom(id=7, overlap=frozenset({C, D}), served=frozenset({1, 3}), host=C)
    problems = check_graph(groups, atoms, edges, routes)
    assert any("should serve" in p for p in problems)
    assert any("not a member" in p for p in problems)
    assert any("no pair" in p for p in problems)
