"""Peer sampling: where a process finds the K peers of a round.

EpTO assumes a peer sampling service that returns uniformly random correct
peers. :class:`FullView` is the exact answer for groups whose membership every
process knows; Cyclon (a partial view kept by gossip) implements the same
:class:`PeerSampler` protocol for groups too large or too volatile for that.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from .._event import ProcessId


@runtime_checkable
class PeerSampler(Protocol):
    """Returns peers to gossip to."""

    def sample(self, k: int, rng: random.Random) -> Sequence[ProcessId]:
        """Up to ``k`` distinct peers, never the caller itself."""
        ...


class Membership:
    """A mutable set of process ids with O(1) add, remove and uniform sampling.

    One membership can back the views of many processes (a simulation of
    10,000 processes keeps one list, not 10,000 copies).
    """

    __slots__ = ("_index", "_members")

    def __init__(self, members: Iterable[ProcessId] = ()) -> None:
        self._members: list[ProcessId] = []
        self._index: dict[ProcessId, int] = {}
        for pid in members:
            self.add(pid)

    def add(self, pid: ProcessId) -> None:
        if pid not in self._index:
            self._index[pid] = len(self._members)
            self._members.append(pid)

    def discard(self, pid: ProcessId) -> None:
        i = self._index.pop(pid, None)
        if i is None:
            return
        last = self._members.pop()
        if i < len(self._members):
            self._members[i] = last
            self._index[last] = i

    def __contains__(self, pid: object) -> bool:
        return pid in self._index

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[ProcessId]:
        return iter(list(self._members))

    def sample_excluding(self, k: int, exclude: ProcessId, rng: random.Random) -> list[ProcessId]:
        """``k`` distinct members drawn uniformly, never ``exclude`` (every
        other member when there are no more than ``k``)."""
        members = self._members
        n = len(members)
        skip = self._index.get(exclude)
        others = n if skip is None else n - 1
        if k >= others:
            return [p for p in members if p != exclude]
        if k <= 0:
            return []
        if 4 * (k + 1) <= n:
            # A few draws out of many members: index draws with rejection of
            # repeats cost about a tenth of ``rng.sample`` (which spends one
            # ``_randbelow`` per pick), and a group of 100,000 processes
            # samples millions of times. ``int(random() * n)`` is uniform up to
            # n / 2**53, far below anything a run can observe; fewer than one
            # draw in four is rejected (at most k + 1 of n indices are taken).
            rand = rng.random
            taken: set[int] = set()
            if skip is not None:
                taken.add(skip)
            out: list[ProcessId] = []
            while len(out) < k:
                i = int(rand() * n)
                if i not in taken:
                    taken.add(i)
                    out.append(members[i])
            return out
        if skip is not None:
            picked = rng.sample(members, k + 1)
            if exclude in picked:
                picked.remove(exclude)
                return picked
            return picked[:k]
        return rng.sample(members, k)


class FullView:
    """Every member is known: sample K of them uniformly, never oneself."""

    __slots__ = ("_me", "membership")

    def __init__(self, me: ProcessId, members: Membership | Iterable[ProcessId]) -> None:
        self._me = me
        self.membership = members if isinstance(members, Membership) else Membership(members)

    def sample(self, k: int, rng: random.Random) -> list[ProcessId]:
        return self.membership.sample_excluding(k, self._me, rng)
