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

from ._event import ProcessId


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
        members = self._members
        n = len(members)
        if exclude in self._index:
            if k >= n - 1:
                return [p for p in members if p != exclude]
            picked = rng.sample(members, k + 1)
            if exclude in picked:
                picked.remove(exclude)
                return picked
            return picked[:k]
        if k >= n:
            return list(members)
        return rng.sample(members, k)


class FullView:
    """Every member is known: sample K of them uniformly, never oneself."""

    __slots__ = ("_me", "membership")

    def __init__(self, me: ProcessId, members: Membership | Iterable[ProcessId]) -> None:
        self._me = me
        self.membership = members if isinstance(members, Membership) else Membership(members)

    def sample(self, k: int, rng: random.Random) -> list[ProcessId]:
        return self.membership.sample_excluding(k, self._me, rng)
