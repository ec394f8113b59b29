"""Single-decree Paxos, one instance per configuration change.

Instance ``i`` runs among the members of configuration ``i`` and decides
configuration ``i + 1``. A ballot is ``(round, rank)``, rank being the
proposer's index in the members list, so ballots of different proposers never
tie. The classic rules give safety whatever the timing, the failure
detector's mistakes or the partitions:

* an acceptor promises a ballot only if it is higher than every ballot it
  promised before, and then refuses to accept lower ballots;
* a proposer that gathered promises from a majority proposes the value
  accepted with the highest ballot among them, if any, and its own value
  otherwise;
* a value is decided once a majority accepted it in one ballot.

Two majorities of the same member list intersect, so any value proposed
after a decision is the decided one. Only a side holding a majority of the
current view's members can decide; a minority side cannot install anything.

In the token ring the promise also fences: an acceptor that promised in
instance ``i`` stops taking part in configuration ``i``'s token, so the state
it reports (its latest token snapshot) is final for it; the new
configuration's token starts from the most advanced reported snapshot.
"""

from __future__ import annotations

from collections.abc import Callable

from .._event import ProcessId
from ._messages import Ballot, Promise, RingConfig


class Acceptor:
    """The acceptor side of one instance."""

    __slots__ = ("accepted", "instance", "promised")

    def __init__(self, instance: int) -> None:
        self.instance = instance
        self.promised: Ballot | None = None
        self.accepted: tuple[Ballot, RingConfig] | None = None

    def prepare(self, ballot: Ballot) -> bool:
        """Promise ``ballot``; True also for a copy of the ballot promised
        last (a prepare sent again by a link session gets the same answer)."""
        if self.promised is not None and ballot < self.promised:
            return False
        self.promised = ballot
        return True

    def accept(self, ballot: Ballot, value: RingConfig) -> bool:
        if self.promised is not None and ballot < self.promised:
            return False
        self.promised = ballot
        self.accepted = (ballot, value)
        return True


class Proposer:
    """The proposer side of one instance, for one ballot."""

    def __init__(
        self, instance: int, ballot: Ballot, voters: tuple[ProcessId, ...], started: float
    ) -> None:
        self.instance = instance
        self.ballot = ballot
        self.voters = frozenset(voters)
        self.quorum = len(voters) // 2 + 1
        self.started = started
        self.promises: dict[ProcessId, Promise] = {}
        self.accepts: set[ProcessId] = set()
        self.value: RingConfig | None = None
        self.abandoned = False

    def promised(self, sender: ProcessId, promise: Promise) -> None:
        if sender in self.voters and self.value is None:
            self.promises[sender] = promise

    def has_quorum(self) -> bool:
        return len(self.promises) >= self.quorum

    def choose(self, build: Callable[[dict[ProcessId, Promise]], RingConfig]) -> RingConfig:
        """Phase 2 value: the highest-ballot accepted value among the promises,
        or a fresh value from ``build``."""
        best: tuple[Ballot, RingConfig] | None = None
        for promise in self.promises.values():
            if promise.accepted is not None and (best is None or promise.accepted[0] > best[0]):
                best = promise.accepted
        self.value = best[1] if best is not None else build(self.promises)
        return self.value

    def accepted(self, sender: ProcessId) -> bool:
        """Record an acceptance; True when a majority accepted."""
        if sender in self.voters and self.value is not None:
            self.accepts.add(sender)
        return len(self.accepts) >= self.quorum
