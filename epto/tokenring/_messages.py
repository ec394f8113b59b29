"""Messages of the token-ring protocol, as frozen value objects.

Every message that belongs to a configuration carries its ``instance``: the
index of the configuration (view or i-view) it was sent in. Configurations
succeed one another through one consensus instance each, so the instance
number orders them totally and fences stale tokens and notices.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from .._event import Event, EventId, ProcessId

Ballot: TypeAlias = tuple[int, int]
"""``(round, rank)``: ballots are ordered by round, then by the proposer's rank."""


@attrs.frozen(kw_only=True, slots=True)
class Batch:
    """Consecutive sequence numbers assigned by one token visit."""

    first: int
    ids: tuple[EventId, ...]
    holders: frozenset[ProcessId]
    """Core members known to hold every message of the batch (and all before)."""

    @property
    def end(self) -> int:
        return self.first + len(self.ids)


@attrs.frozen(kw_only=True, slots=True)
class TokenState:
    """What the token carries: the next sequence number and the assignments not
    yet known to every core member.

    Assignments below ``low`` are known to every core member; assignments below
    ``stable`` are held by ``k`` core members and may be delivered.
    """

    instance: int
    hop: int
    next_seq: int
    low: int
    stable: int
    batches: tuple[Batch, ...]
    low_digest: int = 0
    """Digest of every assignment below ``low`` (a hash chain): a process whose
    delivered prefix differs from the group's finds out by comparing."""
    sources: tuple[tuple[ProcessId, int], ...] = ()
    """For every source, the ``seq`` of its next message to sequence."""

    def already_sequenced(self, eid: EventId) -> bool:
        source, seq = eid
        for s, nxt in self.sources:
            if s == source:
                return seq < nxt
        return False

    def assignments(self) -> dict[int, EventId]:
        return {b.first + i: eid for b in self.batches for i, eid in enumerate(b.ids)}


@attrs.frozen(kw_only=True, slots=True)
class RingConfig:
    """A view (``members``) and its i-view (``core``, the token list in ring order).

    ``view`` counts full view changes; ``instance`` counts every change. The
    decided ``state`` is where the regenerated token starts. ``events`` carries
    the unstable messages exchanged by a full view change (Algorithm 1); it is
    empty for a light i-view change (Algorithm 2).
    """

    instance: int
    view: int
    members: tuple[ProcessId, ...]
    core: tuple[ProcessId, ...]
    state: TokenState
    events: tuple[tuple[int, Event], ...] = ()
    full: bool = False
    starts: tuple[tuple[ProcessId, int, int], ...] = ()
    """``(member, seq, digest)`` for members that joined by a view change: they
    deliver from ``seq`` on, and the digest of the order before ``seq`` is
    ``digest``. Bootstrap members start at 0."""
    incarnations: tuple[tuple[ProcessId, int], ...] = ()
    """``(member, incarnation)``: the incarnation that is the member in this
    configuration (a member restarted under its id in a later incarnation is
    replaced by a full change), then the last incarnation of members that
    left the view (the latest 64). A member not listed (the bootstrap view)
    is the incarnation first heard under its id."""

    def incarnation_of(self, pid: ProcessId) -> int | None:
        for member, incarnation in self.incarnations:
            if member == pid:
                return incarnation
        return None

    @property
    def external(self) -> tuple[ProcessId, ...]:
        core = set(self.core)
        return tuple(p for p in self.members if p not in core)


@attrs.frozen(kw_only=True, slots=True)
class Data:
    """A broadcast, sent by its source to every member."""

    event: Event


@attrs.frozen(kw_only=True, slots=True)
class DataBatch:
    """Several broadcasts of one source, sent together to every member: what
    ``len(events)`` :class:`Data` messages sent one after the other carry."""

    events: tuple[Event, ...]


@attrs.frozen(kw_only=True, slots=True)
class Token:
    """The token, passed from one core member to the next.

    On a lossy network (docs/token-ring.md, *Losses*) it also carries the
    payloads of its window (``events``: what its receiver might lack, so
    that it need not fetch them before it accepts), and its holder sends
    copies through other core members: a copy with ``forward_to`` set asks
    its receiver to pass the token on to that member, once per hop.

    ``copy`` numbers the sends of one hop to its receiver: 0 the first, ``n``
    the ``n``-th resend (at most 255). The receiver echoes it in its
    :class:`TokenAck`, so the holder knows which copy arrived: a resend
    whose earlier copy is acknowledged was not needed (nothing was lost),
    and every acknowledgement times the copy it answers."""

    state: TokenState
    events: tuple[Event, ...] = ()
    forward_to: ProcessId | None = None
    copy: int = 0


@attrs.frozen(kw_only=True, slots=True)
class TokenAck:
    """The token of ``instance`` sent at ``hop`` arrived and was accepted (or
    had been): the sender stops retransmitting it. Retransmitting the same
    token to the same member is harmless, since a member accepts a token only
    if its hop is above every snapshot it knows. ``copy`` is the
    acknowledged copy's (:attr:`Token.copy`)."""

    instance: int
    hop: int
    copy: int = 0


@attrs.frozen(kw_only=True, slots=True)
class Order:
    """A token snapshot that made messages stable, sent to every other member so
    that they deliver without waiting for the token."""

    state: TokenState
    assigned: tuple[tuple[int, EventId], ...] = ()
    """The newly stable assignments, including those the token no longer
    carries because every core member holds them."""


@attrs.frozen(kw_only=True, slots=True)
class Heartbeat:
    """Sent to every member every ``heartbeat_interval``; also the link
    session's counters for the destination (see ``_links``)."""

    instance: int
    delivered: int
    """The sender's delivery watermark (next sequence number it will deliver)."""
    sent: int = 0
    """Messages the sender sent to the destination before this one (the
    number of the next)."""
    base: int = 0
    """The oldest of them the sender still keeps to send again."""
    received: int = 0
    """Messages of the destination that arrived here, without a gap."""
    missing: bool = False
    """Some of the destination's messages are missing here: send them again."""
    incarnation: int = 0
    """The sender's incarnation (``epto._incarnation``): a member restarted
    under its id is told from the process that ran before it."""


@attrs.frozen(kw_only=True, slots=True)
class Fetch:
    """Ask for the messages with sequence numbers in ``[start, end)`` (or for
    the listed event ids when ``ids`` is not empty)."""

    start: int
    end: int
    ids: tuple[EventId, ...] = ()


@attrs.frozen(kw_only=True, slots=True)
class Catchup:
    """Sequenced messages ``(seq, event)`` and unsequenced ``events`` in reply to a fetch."""

    entries: tuple[tuple[int, Event], ...]
    events: tuple[Event, ...] = ()
    stable: int = 0
    oldest: int = 0
    """The oldest sequence number the sender still keeps; a requester that needs
    older messages must rejoin."""


@attrs.frozen(kw_only=True, slots=True)
class Join:
    """A new process (a new identity, or a member restarted under its id in a
    later incarnation) asks to enter the view."""

    incarnation: int = 0
    """The joining process's incarnation."""
    resumes: int | None = None
    """A member restarted with its durable state (docs/token-ring.md, *A
    majority restarted at once*): the earlier incarnation whose acceptor and
    token state this start restored, and for which it votes until the group
    admits it; None: none (it has no vote)."""


@attrs.frozen(kw_only=True, slots=True)
class ConfigRequest:
    """Ask a member for its current configuration (the sender is lagging)."""


@attrs.frozen(kw_only=True, slots=True)
class Prepare:
    instance: int
    ballot: Ballot
    full: bool
    """A full view change: acceptors report the payloads of unstable messages."""


@attrs.frozen(kw_only=True, slots=True)
class Report:
    """What an acceptor contributes in its promise: its latest token snapshot,
    the messages it holds for a full change, and its delivery watermark."""

    state: TokenState
    events: tuple[tuple[int, Event], ...]
    delivered: int


@attrs.frozen(kw_only=True, slots=True)
class Promise:
    instance: int
    ballot: Ballot
    accepted: tuple[Ballot, RingConfig] | None
    report: Report


@attrs.frozen(kw_only=True, slots=True)
class Nack:
    instance: int
    ballot: Ballot
    promised: Ballot


@attrs.frozen(kw_only=True, slots=True)
class Accept:
    instance: int
    ballot: Ballot
    value: RingConfig


@attrs.frozen(kw_only=True, slots=True)
class Accepted:
    instance: int
    ballot: Ballot


@attrs.frozen(kw_only=True, slots=True)
class Decided:
    """The configuration decided by consensus instance ``config.instance - 1``."""

    config: RingConfig


@attrs.frozen(kw_only=True, slots=True)
class Probe:
    """A round-trip probe of optimistic delivery: ``stamp`` is the sender's
    clock; a probe with ``echo`` is the answer, carrying the stamp back."""

    stamp: float
    echo: bool = False


@attrs.frozen(kw_only=True, slots=True)
class Latencies:
    """A member's measured one-way latencies ``(peer, seconds)`` and its send
    rate (messages per second), for the coordinator's plan."""

    instance: int
    plan: tuple[int, int]
    """``(instance, epoch)`` of the plan the member holds (``(0, 0)``: none)."""
    rate: float
    row: tuple[tuple[ProcessId, float], ...]


@attrs.frozen(kw_only=True, slots=True)
class Delays:
    """The coordinator's plan for one receiver: the delay ``(sender, seconds)``
    it adds to each sender's messages. ``epoch`` orders the coordinator's
    plans within configuration ``instance``."""

    instance: int
    epoch: int
    row: tuple[tuple[ProcessId, float], ...]


Message: TypeAlias = (
    Data
    | DataBatch
    | Token
    | TokenAck
    | Order
    | Heartbeat
    | Fetch
    | Catchup
    | Join
    | ConfigRequest
    | Prepare
    | Promise
    | Nack
    | Accept
    | Accepted
    | Decided
    | Probe
    | Latencies
    | Delays
)
