"""The checker of a sequencing graph, from its parts alone.

:func:`check_graph` recomputes everything it needs from the membership, so it
can judge a graph built by any code (the incremental construction, a rebuild,
a graph received from elsewhere, a deliberately broken one in a test). It
reports, in this order:

* atoms: each atom's overlap is an exact intersection of two groups with two
  members or more, its ``served`` set is exactly the groups of such pairs, its
  host is a member of the overlap, and no two atoms have the same overlap;
* coverage: every pair of groups sharing two members or more has an atom with
  that overlap serving both;
* C2: edges join live atoms, no self-loop, and the undirected graph is a
  forest (a reversed edge pair ``u -> v``, ``v -> u`` counts as a loop), so the
  directed graph is a polytree and every edge is used in one direction;
* C1: every group's route is a path along the edges, without repetition, and
  contains every atom that serves the group (a group served by none has the
  empty route).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations, pairwise

from ._model import Atom


def exact_overlaps(
    groups: Mapping[int, frozenset[int]],
) -> dict[frozenset[int], set[int]]:
    """Every exact pairwise intersection with two members or more, mapped to
    the groups of the pairs that produce it."""
    served: dict[frozenset[int], set[int]] = {}
    for a, b in combinations(sorted(groups), 2):
        common = groups[a] & groups[b]
        if len(common) >= 2:
            served.setdefault(common, set()).update((a, b))
    return served


def _find(parent: dict[int, int], x: int) -> int:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def check_graph(
    groups: Mapping[int, frozenset[int]],
    atoms: Mapping[int, Atom],
    edges: Iterable[tuple[int, int]],
    routes: Mapping[int, tuple[int, ...]],
    *,
    member_hosts: bool = True,
) -> list[str]:
    """Every violation of the rules (see the module docstring); empty when
    the graph is valid."""
    problems: list[str] = []
    expected = exact_overlaps(groups)
    by_overlap: dict[frozenset[int], int] = {}
    for aid in sorted(atoms):
        atom = atoms[aid]
        name = f"atom {aid} {sorted(atom.overlap)}"
        if atom.id != aid:
            problems.append(f"{name}: listed under id {aid} but says id {atom.id}")
        if atom.overlap in by_overlap:
            problems.append(f"{name}: same overlap as atom {by_overlap[atom.overlap]}")
        by_overlap.setdefault(atom.overlap, aid)
        if atom.overlap not in expected:
            problems.append(f"{name}: no pair of groups has this exact intersection")
        elif set(atom.served) != expected[atom.overlap]:
            problems.append(
                f"{name}: serves {sorted(atom.served)}, should serve "
                f"{sorted(expected[atom.overlap])}"
            )
        if member_hosts and atom.host not in atom.overlap:
            problems.append(f"{name}: host {atom.host} is not a member of the overlap")
    for overlap in sorted(expected, key=sorted):
        if overlap not in by_overlap:
            problems.append(
                f"coverage: no atom for the overlap {sorted(overlap)} of groups "
                f"{sorted(expected[overlap])}"
            )

    # C2: a forest on the live atoms.
    edge_set = set(edges)
    parent = {aid: aid for aid in atoms}
    for u, v in sorted(edge_set):
        if u not in atoms or v not in atoms:
            problems.append(f"C2: edge {u} -> {v} touches an atom that does not exist")
            continue
        if u == v:
            problems.append(f"C2: self-loop on atom {u}")
            continue
        if (v, u) in edge_set and u < v:
            problems.append(f"C2: edge {u} -> {v} is used in both directions")
            continue
        ru, rv = _find(parent, u), _find(parent, v)
        if ru == rv:
            if (v, u) not in edge_set:
                problems.append(f"C2: edge {u} -> {v} closes a loop")
            continue
        parent[ru] = rv

    # C1: one path through each group's atoms.
    for group in sorted(groups):
        route = tuple(routes.get(group, ()))
        needed = {aid for aid, atom in atoms.items() if group in atom.served}
        if len(set(route)) != len(route):
            problems.append(f"C1: group {group}: route {list(route)} repeats an atom")
        unknown = [a for a in route if a not in atoms]
        if unknown:
            problems.append(f"C1: group {group}: route passes unknown atoms {unknown}")
        for u, v in pairwise(route):
            if (u, v) not in edge_set:
                problems.append(f"C1: group {group}: route step {u} -> {v} is not an edge")
        missing = sorted(needed - set(route))
        if missing:
            problems.append(f"C1: group {group}: route {list(route)} misses atoms {missing}")
        if route and not needed:
            problems.append(f"C1: group {group}: served by no atom but routed {list(route)}")
    for group in sorted(set(routes) - set(groups)):
        problems.append(f"C1: route for group {group}, which does not exist")
    return problems
