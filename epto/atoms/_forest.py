"""The directed forest of atoms under a sequencing graph (internal).

A :class:`Forest` holds the atoms as vertices and the directed edges between
them, and answers the one question the construction asks: along which
directed path do these atoms lie, if they do? It mutates only through
:meth:`Forest.link` and :meth:`Forest.unlink`; keeping it a polytree is the
caller's job (:class:`epto.atoms.SequencingGraph` links two atoms only when
they are in different trees). The functions below are the latency-blind
construction's steps on a forest and its routes: chain the segments of a
group into one path, trim a route to its serving atoms, replace an atom on
a route, and tell whether new edges keep the forest loop-free.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Iterable


class Forest:
    """Directed edges between atoms, with both adjacency directions."""

    __slots__ = ("_in", "_out")

    def __init__(self) -> None:
        self._out: dict[int, set[int]] = {}
        self._in: dict[int, set[int]] = {}

    def copy(self) -> Forest:
        other = Forest()
        other._out = {a: set(s) for a, s in self._out.items()}
        other._in = {a: set(s) for a, s in self._in.items()}
        return other

    def add_atom(self, atom: int) -> None:
        self._out.setdefault(atom, set())
        self._in.setdefault(atom, set())

    def remove_atom(self, atom: int) -> None:
        for v in self._out.pop(atom):
            self._in[v].discard(atom)
        for u in self._in.pop(atom):
            self._out[u].discard(atom)

    def link(self, u: int, v: int) -> None:
        self._out[u].add(v)
        self._in[v].add(u)

    def unlink(self, u: int, v: int) -> None:
        self._out[u].discard(v)
        self._in[v].discard(u)

    def clear_edges(self) -> None:
        for s in self._out.values():
            s.clear()
        for s in self._in.values():
            s.clear()

    def has_edge(self, u: int, v: int) -> bool:
        return v in self._out[u]

    def edges(self) -> frozenset[tuple[int, int]]:
        return frozenset((u, v) for u, outs in self._out.items() for v in outs)

    def successors(self, atom: int) -> set[int]:
        return set(self._out[atom])

    def predecessors(self, atom: int) -> set[int]:
        return set(self._in[atom])

    def neighbours(self, atom: int) -> set[int]:
        return self._out[atom] | self._in[atom]

    def tree_of(self, atom: int, wanted: Collection[int]) -> dict[int, int]:
        """Breadth-first parents from ``atom`` over the undirected tree, stopping
        once every atom of ``wanted`` in that tree is reached (or the tree ends)."""
        parent = {atom: atom}
        remaining = set(wanted)
        remaining.discard(atom)
        queue = deque([atom])
        while queue and remaining:
            u = queue.popleft()
            for v in self._out[u] | self._in[u]:
                if v not in parent:
                    parent[v] = u
                    remaining.discard(v)
                    queue.append(v)
        return parent

    def segments(self, atoms: Iterable[int]) -> list[tuple[int, ...]] | None:
        """The directed paths that span ``atoms``, one per tree they touch
        (ordered by their smallest atom of ``atoms``), or None when the atoms of
        one tree do not lie on one directed path."""
        pending = set(atoms)
        found: list[tuple[int, ...]] = []
        while pending:
            start = min(pending)
            parent = self.tree_of(start, pending)
            here = {a for a in pending if a in parent}
            pending -= here
            path = _steiner_path(self, start, parent, here)
            if path is None:
                return None
            found.append(path)
        return found

    def path(self, atoms: Collection[int]) -> tuple[int, ...] | None:
        """The directed path spanning ``atoms`` (``()`` for none), or None when
        they are not on one directed path of one tree."""
        if not atoms:
            return ()
        found = self.segments(atoms)
        if found is None or len(found) != 1:
            return None
        return found[0]


def _steiner_path(
    forest: Forest, root: int, parent: dict[int, int], atoms: set[int]
) -> tuple[int, ...] | None:
    """The smallest subtree holding ``atoms`` (all reached from ``root``, which
    is one of them), in path order, if it is a directed path."""
    nodes = {root}
    for a in atoms:
        while a not in nodes:
            nodes.add(a)
            a = parent[a]
    adjacency: dict[int, list[int]] = {n: [] for n in nodes}
    for n in nodes:
        if n != root:
            adjacency[n].append(parent[n])
            adjacency[parent[n]].append(n)
    if any(len(around) > 2 for around in adjacency.values()):
        return None
    if len(adjacency) == 1:
        return (root,)
    ends = sorted(n for n, around in adjacency.items() if len(around) == 1)
    # Walk from an end; the path is directed if every step goes one way.
    order = [ends[0]]
    previous = None
    current = ends[0]
    while True:
        step = [n for n in adjacency[current] if n != previous]
        if not step:
            break
        previous, current = current, step[0]
        order.append(current)
    forward = all(forest.has_edge(u, v) for u, v in itertools.pairwise(order))
    if forward:
        return tuple(order)
    backward = all(forest.has_edge(v, u) for u, v in itertools.pairwise(order))
    if backward:
        return tuple(reversed(order))
    return None


def join_segments(
    forest: Forest, stamps: set[int], new: set[int], new_first: bool
) -> tuple[int, ...] | None:
    """Link the segments of ``stamps`` into one directed path; None if some
    tree holds them off a directed path."""
    segments = forest.segments(stamps)
    if segments is None:
        return None
    if len(segments) > 1:
        segments.sort(key=lambda s: (all(a in new for a in s) != new_first, min(s)))
        for before, after in itertools.pairwise(segments):
            forest.link(before[-1], after[0])
    return tuple(a for s in segments for a in s)


def trim(route: tuple[int, ...], stamps: set[int]) -> tuple[int, ...]:
    """``route`` from its first to its last atom in ``stamps`` (``()`` if none)."""
    spots = [i for i, a in enumerate(route) if a in stamps]
    return route[spots[0] : spots[-1] + 1] if spots else ()


def replace_atom(route: tuple[int, ...], old: int, new: int) -> tuple[int, ...]:
    """``route`` with ``old`` played by ``new`` (merged when adjacent)."""
    if old not in route:
        return route
    out: list[int] = []
    for a in route:
        a = new if a == old else a
        if not out or out[-1] != a:
            out.append(a)
    return tuple(out)


def acyclic(pairs: set[tuple[int, int]]) -> bool:
    """Whether the undirected edges ``pairs`` form a forest (union-find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in pairs:
        ru, rv = find(u), find(v)
        if ru == rv:
            return False
        parent[ru] = rv
    return True
