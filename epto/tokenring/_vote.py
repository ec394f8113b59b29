"""The vote of a member, restored by a later start of it from the member's
durable state (:mod:`._durable`; docs/token-ring.md, *A majority restarted
at once*).

Rules:

* It answers prepares and accepts of its configuration's instance exactly
  as the member's acceptor would have (:class:`._consensus.Acceptor`, with
  the promised ballot and the accepted value restored): a promise reports
  the restored token snapshot, with the window's payloads for a full change,
  and without the window when it carries an accepted value.
* Every answer changes :attr:`RestoredVote.state`, which the driver writes
  before the answer leaves (the restart's own record, still the member's
  incarnation's vote).
* A decided configuration of a later instance (:meth:`RestoredVote.followed`):
  one that still lists the member's incarnation is where the member would
  be now: the vote moves there, with a fresh acceptor and the decided token
  state (and the payloads held for its window); one without the member, or
  with another start of it, ends the vote (None).
"""

from __future__ import annotations

import attrs

from .._event import Event, ProcessId
from ._consensus import Acceptor
from ._durable import DurableState
from ._messages import Accept, Accepted, Nack, Prepare, Promise, Report, RingConfig


class RestoredVote:
    """The member's acceptor and report, as a restart restored them."""

    __slots__ = ("_acceptor", "state")

    def __init__(self, state: DurableState) -> None:
        self.state = state
        """The vote as it stands (what must be kept before an answer leaves)."""
        acceptor = Acceptor(state.config.instance)
        acceptor.promised = state.promised
        acceptor.accepted = state.accepted
        self._acceptor = acceptor

    @property
    def instance(self) -> int:
        return self.state.config.instance

    def voter_of(self, pid: ProcessId) -> bool:
        """Whether ``pid`` is a member of the configuration this vote is in."""
        return pid in self.state.config.members

    def prepare(self, msg: Prepare) -> Promise | Nack:
        acceptor = self._acceptor
        if not acceptor.prepare(msg.ballot):
            return self._nack(msg.instance, msg.ballot)
        self.state = vote = attrs.evolve(self.state, promised=acceptor.promised)
        snap = vote.state
        events: tuple[tuple[int, Event], ...] = ()
        if vote.accepted is not None:
            snap = attrs.evolve(snap, batches=())
        elif msg.full:
            events = vote.events
        report = Report(state=snap, events=events, delivered=0)
        return Promise(
            instance=msg.instance, ballot=msg.ballot, accepted=vote.accepted, report=report
        )

    def accept(self, msg: Accept) -> Accepted | Nack:
        acceptor = self._acceptor
        if not acceptor.accept(msg.ballot, msg.value):
            return self._nack(msg.instance, msg.ballot)
        self.state = attrs.evolve(
            self.state, promised=acceptor.promised, accepted=acceptor.accepted
        )
        return Accepted(instance=msg.instance, ballot=msg.ballot)

    def _nack(self, instance: int, ballot: tuple[int, int]) -> Nack:
        promised = self._acceptor.promised
        assert promised is not None
        return Nack(instance=instance, ballot=ballot, promised=promised)

    def followed(self, config: RingConfig, pid: ProcessId) -> RestoredVote | None:
        """The vote once ``config`` (decided, a later instance) is installed
        by member ``pid`` (module rules)."""
        vote = self.state
        listed = config.incarnation_of(pid)
        if pid not in config.members or (listed is not None and listed != vote.incarnation):
            return None
        state = config.state
        assigned = state.assignments()
        held = dict(vote.events)
        held.update(config.events)
        events = tuple(
            (seq, held[seq])
            for seq in range(state.low, state.next_seq)
            if seq in held and assigned.get(seq) == held[seq].id
        )
        return RestoredVote(
            DurableState(
                incarnation=vote.incarnation,
                config=config,
                promised=None,
                accepted=None,
                state=state,
                events=events,
            )
        )
