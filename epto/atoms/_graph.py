"""The sequencing graph of overlapping groups (seed 003, Lumezanu, Spring and
Bhattacharjee), pure: no I/O, no time, no randomness. Every rule lives here.

**Atoms.** One atom per distinct exact pairwise intersection ``O = Gi ∩ Gj``
with ``|O| >= 2`` (a double overlap); ``served(O)`` is the set of groups taking
part in a pair whose intersection is exactly ``O``. A group *stamps* at the
atoms that serve it. Atom ids count up from 0 and are never reused.

**Placement.** An atom's host is fixed when the atom is created, among the
members of its overlap: if live atoms with a nested overlap (subset or
superset) have hosts inside the new overlap, the new atom joins one of them
(co-location of nested overlaps); otherwise any member may host it. Among the
candidates the node already hosting the most atoms wins, then the smallest
node id. So related atoms gather on few sequencing nodes, and a message
crossing co-located atoms makes no network hop.

**Routes (C1, C2).** The atoms and the directed edges between them form a
polytree: the undirected graph is a forest and every edge is used in one
direction. A group's route is the directed path of the forest spanning the
atoms that serve it (pass-through atoms included; ``()`` without any); the
path is unique in a forest, so routes are derived from the edges.

**Adding a group** creates the atoms of its new double overlaps and adds the
new group, and the partners whose overlap with it is new to them, to
``served`` sets. Each affected group, in ascending id, is then *joined*: in
every tree of the forest holding some of its atoms, those atoms must already
lie on one directed path (a segment); segments of different trees are chained,
tail to head, segments with older atoms first and new atoms at the tail
(Figure 1(b): the new atom is hung after the existing path, and a group whose
atoms are already on one tree is routed through the atoms in between rather
than given a loop-closing edge). An edge between two trees never closes a loop
nor changes a path inside a tree, so the groups not affected keep their routes
and C2 holds by construction; the join only has to find the segments. If a
segment is not a directed path, the join is retried with the affected groups
in descending order and with new atoms chained first; if every attempt fails,
the whole graph is laid out again (``GraphChange.rebuilt``): groups joined from
an empty edge set, largest first then by id, and, if that fails too, the
always-correct layout: one directed line through all atoms (ordered by their
served sets), each route the segment between its first and last atom, edges
no route uses dropped.

Cost of an add: O(g * (a + e)) for g affected groups in a forest of a atoms
and e edges per attempt (a breadth-first walk per tree touched), at most four
attempts; a rebuild costs O(G * (a + e)) for all G groups.

**Removing a group** drops its pairs. An atom whose overlap no longer is the
exact intersection of any pair retires; ``served`` sets shrink. Routes are
first trimmed to their first and last serving atom. A retiring atom is then
bypassed lazily: each route through it gets an edge from its predecessor to
its successor (the parent forwards to the child), when these edges keep the
forest loop-free; otherwise the atom is merged into the neighbour most routes
through it already visit (its other edges move to that neighbour, direction
kept). Edges no route uses are dropped. Removal never needs a rebuild and
costs O(r * L) for r routes of length up to L, plus the neighbourhoods of the
retiring atoms.

**Ingress.** The host of the first atom of the route, or, for a group
without a double overlap, its smallest member.

Size: about 470 lines: one class keeps the bookkeeping both constructions
share (atoms, pairs, served sets, stamps, ids) and the latency-blind
construction's joins, rebuilds and removals, which read and write that
bookkeeping together; the path finding is in ``_forest.py`` and the layout
for latency in ``_placement.py``.

**With latencies** (``SequencingGraph(latency=...)``) placement and routes
follow :mod:`epto.atoms._placement` instead: atoms are co-located on
sequencing machines by a greedy cover of the overlaps, each machine sits
where the latency of the groups it serves is smallest (any site, or a node
of all its overlaps with ``member_hosts=True``), the machines form one
directed line whose order minimises the latency stretch, and each route is
the segment of that line between its first and last serving atom (C1 and C2
by construction). A group without a double overlap gets its own sequencer at
its best site. Atoms, their ids and ``served`` sets follow the same rules as
above; every addition or removal lays the machines and the line out again
(``GraphChange.rebuilt``; hosts may move: ``GraphChange.moved``).
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterable, Mapping

import attrs

from ._forest import Forest, acyclic, join_segments, replace_atom, trim
from ._graph_check import check_graph
from ._model import Atom, GraphChange
from ._placement import Latencies, LatencyInput, lay_out

_JOIN_ATTEMPTS = ((False, False), (False, True), (True, False), (True, True))
"""(descending group order, new atoms first) for each incremental attempt."""


class SequencingGraph:
    """Atoms, their hosts and the routes of a set of overlapping groups.

    Deterministic: the same calls give the same atoms, ids, hosts, edges and
    routes. Unknown groups raise KeyError in :meth:`route`, :meth:`stamping`,
    :meth:`ingress` and :meth:`remove_group`.

    ``latency`` (optional): a square matrix ``m[src][dst]`` of one-way
    latencies between nodes ``0 .. len - 1``, a latency model (anything with
    ``sample(src, dst, rng)``; ``sites`` is then required) or a
    :class:`~epto.atoms.Latencies`. With it, atoms are placed and routed for
    latency (module docstring); ``sites`` narrows the nodes that may host a
    sequencing machine, and ``member_hosts=True`` keeps every host a member of
    its atom's overlap. Every member of a group must then be a site
    (ValueError in :meth:`add_group`). Without it, the latency-blind
    placement above.
    """

    __slots__ = (
        "_atom_of",
        "_atoms",
        "_forest",
        "_groups",
        "_ingress",
        "_latencies",
        "_load",
        "_member_hosts",
        "_next_id",
        "_pairs",
        "_placed",
        "_routes",
        "_stamps",
    )

    def __init__(
        self,
        latency: LatencyInput | Latencies | None = None,
        *,
        sites: Iterable[int] | None = None,
        member_hosts: bool = False,
    ) -> None:
        if latency is None or isinstance(latency, Latencies):
            if sites is not None:
                raise ValueError("sites go with a latency matrix or model")
            self._latencies = latency
        else:
            self._latencies = Latencies(latency, sites)
        self._member_hosts = member_hosts or self._latencies is None
        self._ingress: dict[int, int] = {}
        self._placed: set[int] = set()
        self._groups: dict[int, frozenset[int]] = {}
        self._pairs: dict[frozenset[int], set[tuple[int, int]]] = {}
        self._atom_of: dict[frozenset[int], int] = {}
        self._atoms: dict[int, Atom] = {}
        self._stamps: dict[int, set[int]] = {}
        self._routes: dict[int, tuple[int, ...]] = {}
        self._forest = Forest()
        self._load: dict[int, int] = {}
        self._next_id = 0

    @classmethod
    def build(
        cls,
        groups: Mapping[int, Iterable[int]],
        latency: LatencyInput | Latencies | None = None,
        *,
        sites: Iterable[int] | None = None,
        member_hosts: bool = False,
    ) -> SequencingGraph:
        """The graph of ``groups``, added one by one in ascending id order
        (with latencies: all added, then laid out once)."""
        graph = cls(latency, sites=sites, member_hosts=member_hosts)
        if graph._latencies is None:
            for group in sorted(groups):
                graph.add_group(group, groups[group])
            return graph
        for group in sorted(groups):
            graph._add(group, groups[group])
        graph._lay_out()
        return graph

    # -- reading ---------------------------------------------------------

    @property
    def groups(self) -> Mapping[int, frozenset[int]]:
        return types.MappingProxyType(self._groups)

    @property
    def atoms(self) -> Mapping[int, Atom]:
        return types.MappingProxyType(self._atoms)

    @property
    def edges(self) -> frozenset[tuple[int, int]]:
        return self._forest.edges()

    def route(self, group: int) -> tuple[int, ...]:
        """The atoms a message of ``group`` visits, in order."""
        return self._routes[group]

    def stamping(self, group: int) -> tuple[int, ...]:
        """The atoms of the route that number the messages of ``group``."""
        stamps = self._stamps[group]
        return tuple(a for a in self._routes[group] if a in stamps)

    def ingress(self, group: int) -> int:
        """The node that gives messages of ``group`` their group-local number."""
        route = self._routes[group]
        if route:
            return self._atoms[route[0]].host
        return self._ingress.get(group, min(self._groups[group]))

    @property
    def latencies(self) -> Latencies | None:
        """The latencies the graph is placed for (None: latency-blind)."""
        return self._latencies

    @property
    def member_hosts(self) -> bool:
        """Whether every host is a member of its atom's overlap."""
        return self._member_hosts

    def check(self) -> list[str]:
        """Every violation of C1, C2 and coverage; empty when valid."""
        return check_graph(
            self._groups,
            self._atoms,
            self._forest.edges(),
            self._routes,
            member_hosts=self._member_hosts,
        )

    # -- adding ----------------------------------------------------------

    def add_group(self, group: int, members: Iterable[int]) -> GraphChange:
        """Add ``group`` with ``members``; ValueError if it exists or is empty
        (or, with latencies, has a member that is not a site)."""
        if self._latencies is not None:
            before = self._where()
            added, _ = self._add(group, members)
            moved = self._lay_out()
            return GraphChange(
                added=tuple(added), rerouted=self._rerouted(before), rebuilt=True, moved=moved
            )
        before_routes = dict(self._routes)
        added, affected = self._add(group, members)
        rebuilt = not self._join_incrementally(sorted(affected), set(added))
        if rebuilt:
            self._rebuild()
        rerouted = tuple(
            g for g in sorted(self._groups) if self._routes[g] != before_routes.get(g, ())
        )
        return GraphChange(added=tuple(added), rerouted=rerouted, rebuilt=rebuilt)

    def _add(self, group: int, members: Iterable[int]) -> tuple[list[int], set[int]]:
        """The bookkeeping of an addition: atoms, pairs, served sets and
        stamps; returns the atoms created and the groups whose stamps changed."""
        if group in self._groups:
            raise ValueError(f"group {group} exists")
        mine = frozenset(members)
        if not mine:
            raise ValueError(f"group {group} has no member")
        if self._latencies is not None:
            outside = sorted(n for n in mine if n not in self._latencies)
            if outside:
                raise ValueError(f"group {group}: members {outside[:5]} are not sites")
        self._groups[group] = mine
        self._stamps[group] = set()
        self._routes[group] = ()
        added: list[int] = []
        affected = {group}
        touched: set[int] = set()
        for other in sorted(self._groups):
            if other == group:
                continue
            common = mine & self._groups[other]
            if len(common) < 2:
                continue
            aid = self._atom_of.get(common)
            if aid is None:
                aid = self._create(common)
                added.append(aid)
            self._pairs[common].add((min(group, other), max(group, other)))
            touched.add(aid)
            for g in (group, other):
                if aid not in self._stamps[g]:
                    self._stamps[g].add(aid)
                    affected.add(g)
        for aid in sorted(touched):
            self._refresh(aid)
        return added, affected

    def _where(self) -> dict[int, tuple[tuple[int, ...], int]]:
        return {g: (self._routes[g], self.ingress(g)) for g in self._groups}

    def _rerouted(self, before: dict[int, tuple[tuple[int, ...], int]]) -> tuple[int, ...]:
        """The groups whose route or ingress changed (new ones included)."""
        now = self._where()
        return tuple(g for g in sorted(now) if before.get(g) != now[g])

    def _lay_out(self) -> tuple[int, ...]:
        """Lay out hosts, edges and routes for latency; the atoms that moved."""
        assert self._latencies is not None
        layout = lay_out(
            self._groups,
            {aid: (atom.overlap, atom.served) for aid, atom in self._atoms.items()},
            self._latencies,
            member_hosts=self._member_hosts,
        )
        moved: list[int] = []
        for aid, atom in sorted(self._atoms.items()):
            host = layout.host[aid]
            if host != atom.host:
                if aid in self._placed:
                    moved.append(aid)
                self._atoms[aid] = attrs.evolve(atom, host=host)
        self._placed = set(self._atoms)
        position = {a: i for i, a in enumerate(layout.line)}
        self._forest.clear_edges()
        routes: dict[int, tuple[int, ...]] = {}
        for g in sorted(self._groups):
            spots = [position[a] for a in self._stamps[g]]
            routes[g] = tuple(layout.line[min(spots) : max(spots) + 1]) if spots else ()
            for u, v in itertools.pairwise(routes[g]):
                self._forest.link(u, v)
        self._routes = routes
        self._ingress = layout.ingress
        return tuple(moved)

    def _create(self, overlap: frozenset[int]) -> int:
        aid = self._next_id
        self._next_id += 1
        # With latencies the layout places it; until then, a member.
        host = self._place(overlap) if self._latencies is None else min(overlap)
        self._atoms[aid] = Atom(id=aid, overlap=overlap, served=frozenset(), host=host)
        self._atom_of[overlap] = aid
        self._pairs[overlap] = set()
        if self._latencies is None:
            self._load[host] = self._load.get(host, 0) + 1
        self._forest.add_atom(aid)
        return aid

    def _place(self, overlap: frozenset[int]) -> int:
        nested = {
            atom.host
            for atom in self._atoms.values()
            if atom.host in overlap and (atom.overlap <= overlap or overlap <= atom.overlap)
        }
        candidates = nested or overlap
        return min(candidates, key=lambda n: (-self._load.get(n, 0), n))

    def _refresh(self, aid: int) -> None:
        atom = self._atoms[aid]
        served = frozenset(g for pair in self._pairs[atom.overlap] for g in pair)
        self._atoms[aid] = Atom(id=aid, overlap=atom.overlap, served=served, host=atom.host)

    def _join_incrementally(self, affected: list[int], new: set[int]) -> bool:
        for descending, new_first in _JOIN_ATTEMPTS:
            forest = self._forest.copy()
            routes: dict[int, tuple[int, ...]] = {}
            order = reversed(affected) if descending else affected
            for g in order:
                route = join_segments(forest, self._stamps[g], new, new_first)
                if route is None:
                    break
                routes[g] = route
            else:
                # Joins only link trees, so earlier routes are still paths.
                self._forest = forest
                self._routes.update(routes)
                return True
        return False

    def _rebuild(self) -> None:
        by_size = sorted(self._groups, key=lambda g: (-len(self._stamps[g]), g))
        for order in (by_size, sorted(self._groups)):
            self._forest.clear_edges()
            routes: dict[int, tuple[int, ...]] = {}
            for g in order:
                route = join_segments(self._forest, self._stamps[g], set(), False)
                if route is None:
                    break
                routes[g] = route
            else:
                self._routes = routes
                return
        self._lay_line()

    def _lay_line(self) -> None:
        """The always-correct layout: one directed line, then its used segments."""
        atoms = self._atoms
        load = self._load
        line = sorted(
            atoms,
            key=lambda a: (-load[atoms[a].host], atoms[a].host, sorted(atoms[a].served), a),
        )
        position = {a: i for i, a in enumerate(line)}
        self._forest.clear_edges()
        routes: dict[int, tuple[int, ...]] = {}
        for g in sorted(self._groups):
            spots = [position[a] for a in self._stamps[g]]
            routes[g] = tuple(line[min(spots) : max(spots) + 1]) if spots else ()
            for u, v in zip(routes[g], routes[g][1:], strict=False):
                self._forest.link(u, v)
        self._routes = routes

    # -- removing --------------------------------------------------------

    def remove_group(self, group: int) -> GraphChange:
        """Remove ``group``; its atoms retire when their overlap is gone."""
        where = self._where() if self._latencies is not None else {}
        del self._groups[group]
        before = dict(self._routes)
        del self._routes[group]
        retiring: list[int] = []
        for aid in sorted(self._stamps.pop(group)):
            atom = self._atoms[aid]
            pairs = self._pairs[atom.overlap]
            pairs -= {p for p in pairs if group in p}
            self._refresh(aid)
            lost = atom.served - self._atoms[aid].served - {group}
            for g in lost:
                self._stamps[g].discard(aid)
            if not pairs:
                retiring.append(aid)
        if self._latencies is not None:
            self._ingress.pop(group, None)
            for aid in retiring:
                atom = self._atoms.pop(aid)
                del self._atom_of[atom.overlap]
                del self._pairs[atom.overlap]
                self._forest.remove_atom(aid)
                self._placed.discard(aid)
            moved = self._lay_out()
            return GraphChange(
                retired=tuple(retiring), rerouted=self._rerouted(where), rebuilt=True, moved=moved
            )
        routes = {g: trim(route, self._stamps[g]) for g, route in self._routes.items()}
        for aid in retiring:
            routes = self._retire(aid, routes)
        used = {(u, v) for r in routes.values() for u, v in itertools.pairwise(r)}
        for u, v in self._forest.edges() - used:
            self._forest.unlink(u, v)
        self._routes = routes
        rerouted = tuple(g for g in sorted(self._groups) if routes[g] != before[g])
        return GraphChange(retired=tuple(retiring), rerouted=rerouted)

    def _retire(self, aid: int, routes: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
        atom = self._atoms.pop(aid)
        del self._atom_of[atom.overlap]
        del self._pairs[atom.overlap]
        self._load[atom.host] -= 1
        through = [r for r in routes.values() if aid in r]
        bypass = set()
        for r in through:
            i = r.index(aid)
            bypass.add((r[i - 1], r[i + 1]))
        forest = self._forest
        if acyclic(bypass):
            forest.remove_atom(aid)
            for u, v in sorted(bypass):
                forest.link(u, v)
            return {g: tuple(a for a in r if a != aid) for g, r in routes.items()}
        # Merge the atom into the neighbour that most routes through it visit.
        around = forest.neighbours(aid)
        into = min(around, key=lambda n: (-sum(n in r for r in through), n))
        outs = sorted(forest.successors(aid) - {into})
        ins = sorted(forest.predecessors(aid) - {into})
        forest.remove_atom(aid)
        for v in outs:
            forest.link(into, v)
        for u in ins:
            forest.link(u, into)
        return {g: replace_atom(r, aid, into) for g, r in routes.items()}
