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
   a few central nodes, close to a central sequencer, against the paper's
   aim that "no sequencing machine sees more messages than receivers".
3. **Line of machines.** The machines are put on one directed line, each
   machine's atoms one contiguous block (in atom id order), and each group's
   route is the segment of the line from its first to its last serving atom:
   C1 and C2 hold by construction (a line is a polytree; a route is a path of
   it) and a route enters each machine once. The order of the machines
   minimises the total cost below, by a local search: it starts from the
   cheapest insertion (machines serving more groups first, each inserted
   where the line of those already placed costs least), then moves segments
   of one to three machines elsewhere (reversed or not) and moves machines to
   free sites (among their candidates), taking each move that lowers the
   cost, until none does or :data:`_BUDGET` cost evaluations are spent.
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
locations O(g * s * k) for g groups of k members and s sites; the line
O((m^2 + B) * (g * m)) for a budget of B evaluations. Measured: about 2.5 s
for 64 groups on 128 nodes (733 atoms, 50 machines), 0.1 to 0.3 s for 8.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

_BUDGET = 4_000
"""Cost evaluations the local search over the line of machines may spend."""

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
    :data:`_DRAWS` draws with a fixed seed, or one draw when two in a row
    agree (a model with one latency per link). Every latency must be finite
    and non-negative (ValueError).
    """

    __slots__ = ("_index", "_rows", "sites")

    def __init__(self, source: LatencyInput, sites: Iterable[int] | None = None) -> None:
        if isinstance(source, LatencySource):
            if sites is None:
                raise ValueError("a latency model needs the sites that may host atoms")
            chosen = tuple(sorted(set(sites)))
            rng = random.Random(0)
            rows = [[0.0 if u == v else _mean(source, u, v, rng) for v in chosen] for u in chosen]
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


def _mean(source: LatencySource, u: int, v: int, rng: random.Random) -> float:
    """The mean of :data:`_DRAWS` draws, or the draw itself when the first two
    agree (a model with one latency per link, or a constant one)."""
    first, second = source.sample(u, v, rng), source.sample(u, v, rng)
    if first == second:
        return float(first)
    rest = sum(source.sample(u, v, rng) for _ in range(_DRAWS - 2))
    return (first + second + rest) / _DRAWS


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
    sites = sorted(placed)
    blocks = [sorted(a for m in placed[x] for a in m) for x in sites]
    movable: list[Sequence[int]] = (
        [sorted(frozenset.intersection(*(atoms[a][0] for a in block))) for block in blocks]
        if member_hosts
        else [latencies.sites] * len(blocks)
    )
    line_of = _Line(blocks, sites, movable, atoms, cost)
    line_of.improve(_BUDGET)
    order = line_of.order
    host = {a: line_of.site[m] for m in order for a in blocks[m]}
    line = tuple(a for m in order for a in blocks[m])
    ingress: dict[int, int] = {}
    with_atoms = {g for _, served in atoms.values() for g in served}
    for g in sorted(set(groups) - with_atoms):
        choice = sorted(groups[g]) if member_hosts else latencies.sites
        ingress[g] = cost.best_site(frozenset({g}), choice)
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


class _Line:
    """The line of machines and its local search (step 3): machine ``i`` holds
    the atoms ``blocks[i]`` at ``site[i]``; ``order`` lists the machines."""

    def __init__(
        self,
        blocks: Sequence[Sequence[int]],
        sites: Sequence[int],
        candidates: Sequence[Sequence[int]],
        atoms: Mapping[int, tuple[frozenset[int], frozenset[int]]],
        cost: _Costs,
    ) -> None:
        self.cost = cost
        self.site = list(sites)
        self.candidates = candidates
        served = [frozenset(g for a in block for g in atoms[a][1]) for block in blocks]
        self.every = sorted({g for mine in served for g in mine})
        self.where = [[i for i, mine in enumerate(served) if g in mine] for g in self.every]
        self.between = [cost.between[g] for g in self.every]
        self.evaluations = 0
        # Start by cheapest insertion: machines serving more groups first, each
        # where it costs least among those already placed.
        order: list[int] = []
        for m in sorted(range(len(blocks)), key=lambda i: (-len(served[i]), self.site[i])):
            order = min(
                ([*order[:j], m, *order[j:]] for j in range(len(order) + 1)),
                key=self._partial,
            )
        self.order = order
        self.best = self.total(order)

    def _partial(self, order: Sequence[int]) -> float:
        """The cost of the groups of a partial line, over the machines on it."""
        self.evaluations += 1
        site = self.site
        one_way = self.cost.lat.one_way
        position = {m: i for i, m in enumerate(order)}
        prefix = [0.0]
        for u, v in itertools.pairwise(order):
            prefix.append(prefix[-1] + one_way(site[u], site[v]))
        enter, leave = self.cost.enter, self.cost.leave
        value = 0.0
        for g, mine, between in zip(self.every, self.where, self.between, strict=True):
            spots = [position[m] for m in mine if m in position]
            if spots:
                first, last = min(spots), max(spots)
                value += (
                    enter(g, site[order[first]])
                    + between * (prefix[last] - prefix[first])
                    + leave(g, site[order[last]])
                )
        return value

    def total(self, order: Sequence[int]) -> float:
        self.evaluations += 1
        site = self.site
        one_way = self.cost.lat.one_way
        position = [0] * len(order)
        prefix = [0.0] * len(order)
        run = 0.0
        for i, m in enumerate(order):
            if i:
                run += one_way(site[order[i - 1]], site[m])
            position[m] = i
            prefix[i] = run
        enter, leave = self.cost.enter, self.cost.leave
        value = 0.0
        for g, mine, between in zip(self.every, self.where, self.between, strict=True):
            spots = [position[m] for m in mine]
            first, last = min(spots), max(spots)
            value += (
                enter(g, site[order[first]])
                + between * (prefix[last] - prefix[first])
                + leave(g, site[order[last]])
            )
        return value

    def _try(self, order: list[int]) -> bool:
        value = self.total(order)
        if value < self.best - 1e-9 * max(1.0, abs(self.best)):
            self.order, self.best = order, value
            return True
        return False

    def improve(self, budget: int) -> None:
        """Move segments of one to three machines elsewhere (reversed or not),
        and move machines to free sites, while the cost falls and the budget of
        cost evaluations lasts."""
        stop = self.evaluations + budget
        improved = True
        while improved and self.evaluations < stop:
            improved = self._move_segments(stop) | self._move_sites(stop)

    def _move_segments(self, stop: int) -> bool:
        improved = False
        for length in (1, 2, 3):
            i = 0
            while i + length <= len(self.order) and self.evaluations < stop:
                order = self.order
                segment = order[i : i + length]
                rest = order[:i] + order[i + length :]
                for j in range(len(rest) + 1):
                    if j == i:
                        continue
                    if self._try(rest[:j] + segment + rest[j:]):
                        improved = True
                        break
                    if length > 1 and self._try(rest[:j] + segment[::-1] + rest[j:]):
                        improved = True
                        break
                i += 1
        return improved

    def _move_sites(self, stop: int) -> bool:
        improved = False
        for m in sorted(range(len(self.site)), key=lambda m: self.site[m]):
            taken = set(self.site)
            here = self.site[m]
            for x in self.candidates[m]:
                if x in taken or self.evaluations >= stop:
                    continue
                self.site[m] = x
                value = self.total(self.order)
                if value < self.best - 1e-9 * max(1.0, abs(self.best)):
                    self.best, here, improved = value, x, True
                    taken = set(self.site)
                self.site[m] = here
        return improved
