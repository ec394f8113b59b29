"""Latency-aware placement of sequencing atoms (seed 003, section 3.3), pure:
no I/O, no time, no randomness.

The paper co-locates the atoms of related overlaps on one sequencing machine
and places machines "close to senders and receivers", on any node, so that a
message crosses few machines and each hop is short. :func:`lay_out` does so
in four steps, from the atoms (exact overlaps and the groups they serve)
and a latency matrix:

1. **Co-location, a greedy cover.** Repeatedly take the node that is in the
   most overlaps of atoms not placed yet (ties: the most central node, the
   smallest sum of latencies to and from every member of a group, then the
   smallest id); its unplaced atoms form one machine. The atoms of a machine
   share that node, so related (nested, crossing) overlaps come together.
2. **Location.** Each machine goes where the latency of the messages of the
   groups it serves is smallest: the site ``x`` minimising
   ``sum over its groups g of In_g(x) + Out_g(x)`` (below), over every site,
   or, with ``member_hosts``, over the nodes in every overlap of the machine
   (never empty: the cover node is in all of them), one machine per site:
   machines serving more groups choose first, each among the sites no other
   machine took (only when none is left does a machine join one that is
   taken). Letting machines share their best site would gather most atoms on
   a few central nodes, that is, a central sequencer: the paper's point is
   that no sequencing machine carries much more than its receivers.
3. **Line of machines.** The machines are put on one directed line, each
   machine's atoms one contiguous block (in atom id order), and each group's
   route is the segment of the line from its first to its last serving atom:
   C1 and C2 hold by construction (a line is a polytree; a route is a path of
   it) and a route enters each machine once. The order of the machines
   minimises the total cost below, by a local search (start: the machines
   by decreasing number of groups served, then repeatedly move one machine
   to the best other place or swap two, while the cost falls; at most
   :data:`_PASSES` passes).
4. **Ingress-only groups** (no double overlap) get a sequencer of their own
   at the site minimising ``In_g(x) + Out_g(x)``.

**The cost** is the paper's statistic: the latency stretch per destination
as a ratio of means (a destination's total latency through the sequencers
over its total direct latency), summed over destinations, when every member
sends one message to each of its groups. With ``w_r = 1 / D_r``, ``D_r`` the
total direct latency of the messages ``r`` receives, the cost of a group
``g`` whose route enters at site ``F``, leaves at site ``E`` and spends
``I`` between machines is ``In_g(F) + B_g * I + Out_g(E)`` with
``In_g(x) = sum_s (W_g - w_s) lat(s, x)``, ``Out_g(x) = (|g| - 1) sum_r w_r
lat(x, r)``, ``B_g = (|g| - 1) W_g`` and ``W_g = sum_r w_r`` (sums over the
members). A message sent at its ingress costs nothing to get there.

Cost: the cover is O(m * a * o) for m machines, a atoms of o members; the
locations O(g * s * k) for g groups of k members and s sites; the local
search O(P * m^2 * (g + m)) for P passes.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

_PASSES = 8
"""Local-search passes over the line of machines, at most."""

_DRAWS = 32
"""Draws of a random latency model averaged into one matrix entry."""


@runtime_checkable
class LatencySource(Protocol):
    """A latency model (``transports.simulation``'s ``LatencyModel``): the
    one-way latency of one message from ``src`` to ``dst``."""

    def sample(self, src: int, dst: int, rng: random.Random) -> float: ...


LatencyInput = Sequence[Sequence[float]] | LatencySource
"""A square matrix, ``matrix[src][dst]`` the one-way latency from node
``src`` to node ``dst`` (nodes ``0 .. len - 1``), or a latency model."""


class Latencies:
    """One-way latencies between the sites that may host sequencing machines.

    From a matrix, the sites are its nodes unless ``sites`` narrows them; from
    a model, ``sites`` is required and each latency is the mean of
    :data:`_DRAWS` draws with a fixed seed (exact for a model with one latency
    per link). Every latency must be finite and non-negative (ValueError).
    """

    __slots__ = ("_index", "_rows", "sites")

    def __init__(self, source: LatencyInput, sites: Iterable[int] | None = None) -> None:
        if isinstance(source, LatencySource):
            if sites is None:
                raise ValueError("a latency model needs the sites that may host atoms")
            chosen = tuple(sorted(set(sites)))
            rng = random.Random(0)
            rows = [
                [
                    0.0 if u == v else sum(source.sample(u, v, rng) for _ in range(_DRAWS)) / _DRAWS
                    for v in chosen
                ]
                for u in chosen
            ]
        else:
            size = len(source)
            if any(len(row) != size for row in source):
                raise ValueError("the latency matrix must be square")
            chosen = tuple(range(size)) if sites is None else tuple(sorted(set(sites)))
            if any(not 0 <= s < size for s in chosen):
                raise ValueError(f"sites must be nodes of the {size} x {size} matrix")
            rows = [[0.0 if u == v else float(source[u][v]) for v in chosen] for u in chosen]
        if not chosen:
            raise ValueError("no site may host atoms")
        for row in rows:
            for value in row:
                if not (math.isfinite(value) and value >= 0):
                    raise ValueError(f"latencies must be finite and >= 0, got {value!r}")
        self.sites: tuple[int, ...] = chosen
        self._index = {s: i for i, s in enumerate(chosen)}
        self._rows = tuple(tuple(row) for row in rows)

    def __contains__(self, node: object) -> bool:
        return node in self._index

    def one_way(self, src: int, dst: int) -> float:
        """The latency from ``src`` to ``dst`` (KeyError for a node that is not a site)."""
        return self._rows[self._index[src]][self._index[dst]]


@attrs.frozen(kw_only=True)
class Layout:
    """Where the atoms live and how routes run: ``host`` per atom, ``line``
    (every atom, in route order), ``ingress`` per group without an atom."""

    host: dict[int, int]
    line: tuple[int, ...]
    ingress: dict[int, int]


def lay_out(
    groups: Mapping[int, frozenset[int]],
    atoms: Mapping[int, tuple[frozenset[int], frozenset[int]]],
    latencies: Latencies,
    *,
    member_hosts: bool = False,
) -> Layout:
    """Place ``atoms`` (id -> (overlap, served groups)) and order them (see
    the module docstring). Every member of every group must be a site."""
    for g in sorted(groups):
        outside = sorted(n for n in groups[g] if n not in latencies)
        if outside:
            raise ValueError(f"group {g}: members {outside[:5]} have no latency")
    cost = _Costs(groups, latencies)
    machines = _cover(atoms, cost)
    placed: dict[int, list[frozenset[int]]] = {}
    served_by = [frozenset(g for a in m for g in atoms[a][1]) for m in machines]
    for i in sorted(range(len(machines)), key=lambda i: (-len(served_by[i]), i)):
        machine = machines[i]
        if member_hosts:
            candidates: Collection[int] = sorted(
                frozenset.intersection(*(atoms[a][0] for a in machine))
            )
        else:
            candidates = latencies.sites
        free = [x for x in candidates if x not in placed]
        site = cost.best_site(served_by[i], free or candidates)
        placed.setdefault(site, []).append(frozenset(machine))
    blocks = {site: sorted(a for m in ms for a in m) for site, ms in placed.items()}
    order = _order_machines(blocks, atoms, cost)
    host = {a: site for site in order for a in blocks[site]}
    line = tuple(a for site in order for a in blocks[site])
    ingress: dict[int, int] = {}
    with_atoms = {g for _, served in atoms.values() for g in served}
    for g in sorted(set(groups) - with_atoms):
        candidates = sorted(groups[g]) if member_hosts else latencies.sites
        ingress[g] = cost.best_site(frozenset({g}), candidates)
    return Layout(host=host, line=line, ingress=ingress)


class _Costs:
    """The per-group terms of the cost (module docstring), cached per site."""

    def __init__(self, groups: Mapping[int, frozenset[int]], latencies: Latencies) -> None:
        self.groups = groups
        self.lat = latencies
        received: dict[int, float] = {}
        for members in groups.values():
            for r in members:
                total = sum(latencies.one_way(s, r) for s in members if s != r)
                received[r] = received.get(r, 0.0) + total
        self.weight = {r: 1.0 / d if d > 0 else 1.0 for r, d in received.items()}
        self.total_weight = {g: sum(self.weight[r] for r in m) for g, m in groups.items()}
        self.between = {g: (len(m) - 1) * self.total_weight[g] for g, m in groups.items()}
        self._in: dict[tuple[int, int], float] = {}
        self._out: dict[tuple[int, int], float] = {}
        self._central: dict[int, float] = {}

    def enter(self, g: int, x: int) -> float:
        key = (g, x)
        value = self._in.get(key)
        if value is None:
            members = self.groups[g]
            total = self.total_weight[g]
            one_way = self.lat.one_way
            value = sum((total - self.weight[s]) * one_way(s, x) for s in members)
            self._in[key] = value
        return value

    def leave(self, g: int, x: int) -> float:
        key = (g, x)
        value = self._out.get(key)
        if value is None:
            members = self.groups[g]
            one_way = self.lat.one_way
            value = (len(members) - 1) * sum(self.weight[r] * one_way(x, r) for r in members)
            self._out[key] = value
        return value

    def best_site(self, served: frozenset[int], candidates: Iterable[int]) -> int:
        return min(
            candidates,
            key=lambda x: (sum(self.enter(g, x) + self.leave(g, x) for g in served), x),
        )

    def centrality(self, node: int) -> float:
        value = self._central.get(node)
        if value is None:
            members = {n for m in self.groups.values() for n in m}
            one_way = self.lat.one_way
            value = sum(one_way(node, y) + one_way(y, node) for y in members)
            self._central[node] = value
        return value


def _cover(
    atoms: Mapping[int, tuple[frozenset[int], frozenset[int]]], cost: _Costs
) -> list[list[int]]:
    """Machines by a greedy cover of the overlaps (step 1)."""
    unplaced = set(atoms)
    machines: list[list[int]] = []
    while unplaced:
        count: dict[int, int] = {}
        for a in unplaced:
            for node in atoms[a][0]:
                count[node] = count.get(node, 0) + 1
        best = min(count, key=lambda n: (-count[n], cost.centrality(n), n))
        mine = sorted(a for a in unplaced if best in atoms[a][0])
        machines.append(mine)
        unplaced.difference_update(mine)
    return machines


def _order_machines(
    blocks: Mapping[int, Sequence[int]],
    atoms: Mapping[int, tuple[frozenset[int], frozenset[int]]],
    cost: _Costs,
) -> list[int]:
    """The line of machines (sites) of least cost, by local search (step 3)."""
    sites = sorted(blocks)
    groups_at = {s: frozenset(g for a in blocks[s] for g in atoms[a][1]) for s in sites}
    every = sorted({g for s in sites for g in groups_at[s]})
    where = {g: [s for s in sites if g in groups_at[s]] for g in every}
    enter = {(g, s): cost.enter(g, s) for g in every for s in where[g]}
    leave = {(g, s): cost.leave(g, s) for g in every for s in where[g]}
    one_way = cost.lat.one_way

    def total(order: Sequence[int]) -> float:
        position = {s: i for i, s in enumerate(order)}
        prefix = [0.0]
        for u, v in itertools.pairwise(order):
            prefix.append(prefix[-1] + one_way(u, v))
        value = 0.0
        for g in every:
            spots = [position[s] for s in where[g]]
            first, last = min(spots), max(spots)
            value += (
                enter[g, order[first]]
                + cost.between[g] * (prefix[last] - prefix[first])
                + leave[g, order[last]]
            )
        return value

    order = sorted(sites, key=lambda s: (-len(groups_at[s]), s))
    best = total(order)
    for _ in range(_PASSES):
        improved = False
        for i in range(len(order)):
            for j in range(len(order)):
                if i == j:
                    continue
                moved = order[:i] + order[i + 1 :]
                moved.insert(j, order[i])
                value = total(moved)
                if value < best - 1e-9:
                    order, best, improved = moved, value, True
                if i < j:
                    swapped = list(order)
                    swapped[i], swapped[j] = swapped[j], swapped[i]
                    value = total(swapped)
                    if value < best - 1e-9:
                        order, best, improved = swapped, value, True
        if not improved:
            break
    return order
