"""The moving sequencer: what a process knows of the total order, and the
token's own arithmetic.

``OrderBook`` keeps, for one process, the payloads it received, the sequence
numbers it learned (from tokens, order notices and decided configurations),
the stability watermark, and the log of what it delivered. Its one rule: a
message is delivered when every lower sequence number has been delivered,
its own number is below the stability watermark, and its payload is here.

The invariants of the sequence, with the default ``k`` (a majority of the
view; docs/token-ring.md states the guarantee):

1. **An assignment below ``stable`` is final**: ``k`` core members held it,
   every later configuration keeps it (any quorum of a view change includes
   one of them), and no member of any later view holds another event at that
   position. Only final assignments are delivered, and a fetch is answered
   with final assignments only (:meth:`OrderBook.entries` below ``stable``).
2. **An assignment at or above ``stable`` is tentative**: it belongs to the
   token of one configuration and may be replaced by the next. Installing a
   decided configuration (:meth:`OrderBook.adopt`) keeps a tentative
   assignment only where the decision confirms it (its batches, or the
   digest of the order below its ``low``) and drops the rest, so a member
   that was cut off while it held the token never delivers an assignment
   the group has replaced.
3. **A view change never renumbers a delivered position**: a full change
   cuts the sequence at the first position no answering member holds, and a
   member keeps every delivered payload from its token's ``low`` on whatever
   ``log_retention`` says (:meth:`OrderBook.keep_from`), so a delivered
   position is always reported and never cut.

The token functions (:func:`accept`, :func:`sequence`) are pure: they take a
:class:`TokenState` and return the next one, with ``hop`` increased, so that
the states of one token form a chain ordered by ``hop``.

Size: one module of about 500 lines, on purpose: the invariants above bind the
token arithmetic (how ``stable``, ``low`` and the digest move) to what the
order book does with its results, and they are checked by reading both
together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator

import attrs

from .._event import Event, EventId, ProcessId
from .._incarnation import COUNT_MASK
from .._intervals import SeqIntervals
from ._messages import Batch, TokenState

BATCH_IDS = 1024
"""Most ids one batch of the token lists (the default ``Limits.max_events_per_ball``);
a token visit that sequences more adds several batches."""


def event_bytes(event: Event) -> int:
    """What one message counts against ``TokenRingConfig.max_unstable_bytes``:
    its payload and signature."""
    return len(event.payload) + len(event.signature)


_blake2b = hashlib.blake2b


def chain(digest: int, eid: EventId) -> int:
    """Extend the order digest by one assignment."""
    data = b"%d:%d:%d" % (digest, eid[0], eid[1])
    return int.from_bytes(_blake2b(data, digest_size=8).digest(), "big")


def accept(state: TokenState, me: ProcessId, core: Iterable[ProcessId], k: int) -> TokenState:
    """``me`` accepts the token: it holds every message sequenced so far.

    Adds ``me`` to the holders of every batch, advances ``stable`` over the
    batches held by ``k`` core members, and drops the batches every core
    member holds and that are stable (their assignments are known to all core
    members: ``low`` moves past them).
    """
    core_set = frozenset(core)
    batches = [
        b if me in b.holders else Batch(first=b.first, ids=b.ids, holders=b.holders | {me})
        for b in state.batches
    ]
    return _settle(state, batches, core_set, k, hop=state.hop + 1)


def pick(
    state: TokenState,
    pool: Iterable[EventId],
    limit: int,
    *,
    room: int | None = None,
    cost: Callable[[EventId], int] | None = None,
    first_free: bool = True,
    grouped: bool = True,
) -> list[EventId]:
    """The ids of ``pool`` to sequence next, grouped by source (or, without
    ``grouped``, in the order of ``pool``: optimistic delivery sequences in
    the holder's optimistic order).

    Every source's messages are sequenced in the order of their ``seq``, with
    no gap within one incarnation of the source (the first message of a
    later incarnation, ``seq = first_seq(incarnation)``, follows whatever the
    earlier one left unsequenced, which is never sequenced then): the
    token's per-source counters make a message that was sequenced once
    impossible to sequence again, by any holder, in any later view. The
    choice follows the pool's arrival order; the chosen ids are then listed
    source by source (each source's in ``seq`` order), so that a batch is a
    few runs of consecutive ids.

    With ``room`` (bytes) and ``cost`` (bytes of one message), the choice stops
    at the first message that would take the chosen messages' cost beyond
    ``room``; with ``first_free`` the first message is chosen whatever its
    cost (an empty window admits a message larger than the budget).
    """
    expected = dict(state.sources)
    out: list[EventId] = []
    if limit < 1:
        return out
    for source, seq in pool:
        nxt = expected.get(source, 0)
        if seq == nxt or (seq > nxt and not seq & COUNT_MASK):
            if room is not None and cost is not None:
                c = cost((source, seq))
                if c > room and (out or not first_free):
                    break
                room -= c
            out.append((source, seq))
            expected[source] = seq + 1
            if len(out) >= limit:
                break
    if grouped:
        out.sort()
    return out


def sequence(
    state: TokenState,
    me: ProcessId,
    ids: list[EventId],
    core: Iterable[ProcessId],
    k: int,
) -> TokenState:
    """Assign the next sequence numbers to ``ids`` (held by ``me``, chosen by :func:`pick`)."""
    batches = list(state.batches)
    sources = dict(state.sources)
    holders = frozenset({me})
    for i in range(0, len(ids), BATCH_IDS):
        chunk = tuple(ids[i : i + BATCH_IDS])
        batches.append(Batch(first=state.next_seq + i, ids=chunk, holders=holders))
    for source, seq in ids:
        sources[source] = seq + 1
    new = attrs.evolve(
        state, next_seq=state.next_seq + len(ids), sources=tuple(sorted(sources.items()))
    )
    return _settle(new, batches, frozenset(core), k, hop=state.hop + 1)


def _settle(
    state: TokenState, batches: list[Batch], core: frozenset[ProcessId], k: int, *, hop: int
) -> TokenState:
    stable = state.stable
    for b in batches:
        if len(b.holders & core) < k:
            break
        stable = max(stable, b.end)
    low = state.low
    digest = state.low_digest
    while batches and batches[0].end <= stable and core <= batches[0].holders:
        low = batches[0].end
        for eid in batches[0].ids:
            digest = chain(digest, eid)
        batches.pop(0)
    return attrs.evolve(
        state, hop=hop, stable=stable, low=low, low_digest=digest, batches=tuple(batches)
    )


def relabel(state: TokenState, instance: int, core: Iterable[ProcessId], k: int) -> TokenState:
    """The decided state of a light change: the token restarts at hop 0 of the
    new instance with the same assignments."""
    start = attrs.evolve(state, instance=instance, hop=-1)
    return _settle(start, list(state.batches), frozenset(core), k, hop=0)


class Divergence(Exception):
    """This process delivered a message that the group's order does not contain
    at that position: it must leave the view and rejoin under a new identity."""


class OrderBook:
    """Payloads, assignments, stability and the delivery log of one process."""

    def __init__(self, *, log_retention: int, start: int = 0) -> None:
        self.pool: dict[EventId, Event] = {}
        """Payloads received and not yet sequenced, in arrival order."""
        self._held: dict[EventId, Event] = {}
        self._assign: dict[int, EventId] = {}
        self._where: dict[EventId, int] = {}
        self._delivered_ids = SeqIntervals()
        self.log: dict[int, Event] = {}
        self.log_start = start
        self.next_deliver = start
        self.stable = start
        self._retention = log_retention
        self.delivered_count = 0
        self.digest = 0
        """Digest of the delivered order (every assignment below ``next_deliver``)."""
        self._digests: dict[int, int] = {start: 0}
        self._checks: dict[int, int] = {}
        self.digest_known = True
        self._known: dict[int, tuple[EventId, ...]] = {}
        """Token batches (first position -> ids) whose assignments are all
        recorded here: a token or a notice carrying the same batch again is
        not re-learned id by id. Emptied whenever an assignment is dropped."""
        self._hold_cursor = start
        """Every position in [next_deliver, _hold_cursor) is assigned and its
        payload is here; reset whenever an assignment is dropped."""
        self._keep_floor = start
        """Delivered payloads at or above this position (the token's ``low``
        as last known here) stay in the log whatever the retention: a full
        view change may need them (invariant 3)."""

    # -- payloads ------------------------------------------------------------

    def add_event(self, event: Event) -> bool:
        """Keep a received payload; False if it is a duplicate."""
        eid = event.id
        if eid in self._delivered_ids or eid in self._held or eid in self.pool:
            return False
        if eid in self._where:
            self._held[eid] = event
        else:
            self.pool[eid] = event
        return True

    def was_delivered(self, eid: EventId) -> bool:
        return eid in self._delivered_ids

    def payload(self, eid: EventId) -> Event | None:
        return self._held.get(eid) or self.pool.get(eid)

    def window_bytes(self, first: int, ids: Iterable[EventId]) -> int | None:
        """:func:`event_bytes` of the messages sequenced at ``first``, ``first + 1``,
        ... (``ids``), delivered or held here; None if one is not here."""
        total = 0
        log = self.log
        held = self._held
        for seq, eid in enumerate(ids, first):
            event = log.get(seq) if seq < self.next_deliver else held.get(eid)
            if event is None:
                return None
            total += len(event.payload) + len(event.signature)
        return total

    # -- assignments ---------------------------------------------------------

    def learn(self, assignments: Iterable[tuple[int, EventId]], stable: int) -> None:
        """Record ``seq -> event id`` assignments and raise the stability watermark.

        Raises :class:`Divergence` if a delivered position holds another event.
        """
        for seq, eid in assignments:
            self._assign_one(seq, eid)
        if stable > self.stable:
            self.stable = stable

    def learn_batches(self, batches: Iterable[Batch], stable: int) -> None:
        """:meth:`learn` the assignments of token batches; a batch already
        learned (same first position, same ids) is skipped."""
        known = self._known
        assign_one = self._assign_one
        assign = self._assign
        where = self._where
        pool = self.pool
        held = self._held
        floor = self.next_deliver
        for b in batches:
            ids = b.ids
            learned = known.get(b.first)
            if learned is ids or learned == ids:
                continue
            for seq, eid in enumerate(ids, b.first):
                if seq >= floor and seq not in assign and eid in pool:
                    # The usual case, as _assign_one handles it: a payload in
                    # the pool was never delivered (add_event refuses those)
                    # nor assigned (an assigned payload is held).
                    assign[seq] = eid
                    where[eid] = seq
                    held[eid] = pool.pop(eid)
                else:
                    assign_one(seq, eid)
            known[b.first] = ids
        if stable > self.stable:
            self.stable = stable
        if len(known) > 256:
            floor = self.next_deliver
            self._known = {f: ids for f, ids in known.items() if f + len(ids) > floor}

    def _assign_one(self, seq: int, eid: EventId) -> None:
        if seq < self.next_deliver:
            logged = self.log.get(seq)
            if logged is not None and logged.id != eid:
                raise Divergence(f"delivered {logged.id} at {seq}, the group has {eid}")
            return
        if eid in self._delivered_ids:
            raise Divergence(f"{eid} delivered before, the group sequences it at {seq}")
        old = self._assign.get(seq)
        if old == eid:
            return
        if old is not None:
            self._unassign(seq)
        other = self._where.get(eid)
        if other is not None:
            self._unassign(other)
        self._assign[seq] = eid
        self._where[eid] = seq
        event = self.pool.pop(eid, None)
        if event is not None:
            self._held[eid] = event

    def _unassign(self, seq: int) -> None:
        self._known.clear()
        self._hold_cursor = self.next_deliver
        eid = self._assign.pop(seq)
        del self._where[eid]
        event = self._held.pop(eid, None)
        if event is not None:
            self.pool[eid] = event

    def adopt(self, state: TokenState, events: Iterable[tuple[int, Event]] = ()) -> None:
        """Take in a decided configuration: its token ``state`` and, for a full
        change, the ``events`` it settled (final, below ``state.low``).

        Tentative assignments (at or above ``stable``) survive only where the
        decision confirms them: the positions below ``state.low`` if their
        digest chain equals ``state.low_digest``, the positions from
        ``state.low`` on if its batches hold the same ids. Raises
        :class:`Divergence`."""
        low = state.low
        if not self._prefix_matches(low, state.low_digest):
            for seq in [s for s in self._assign if self.stable <= s < low]:
                self._unassign(seq)
        for seq, event in events:
            if seq >= self.next_deliver:
                self._assign_one(seq, event.id)
                self.add_event(event)
        self.truncate(state.next_seq)
        self.learn(state.assignments().items(), state.stable)
        self.check_digest(low, state.low_digest)
        self.keep_from(low)

    def _prefix_matches(self, low: int, digest: int) -> bool:
        """Whether the assignments here from ``next_deliver`` to ``low`` are all
        known and chain, from our delivered digest, to ``digest``."""
        if low <= self.next_deliver or not self.digest_known:
            return False
        mine = self.digest
        assign = self._assign
        for seq in range(self.next_deliver, low):
            eid = assign.get(seq)
            if eid is None:
                return False
            mine = chain(mine, eid)
        return mine == digest

    def keep_from(self, low: int) -> None:
        """Keep delivered payloads from ``low`` on in the log (invariant 3)."""
        if low > self._keep_floor:
            self._keep_floor = low

    def truncate(self, next_seq: int) -> None:
        """Forget assignments at or above ``next_seq`` (a decided configuration
        did not keep them; they were never delivered)."""
        for seq in [s for s in self._assign if s >= next_seq]:
            self._unassign(seq)

    def assignment(self, seq: int) -> EventId | None:
        if seq < self.next_deliver:
            event = self.log.get(seq)
            return None if event is None else event.id
        return self._assign.get(seq)

    def missing(self, end: int) -> tuple[list[int], list[EventId]]:
        """Sequence numbers below ``end`` whose assignment is unknown, and
        assigned ids whose payload is missing."""
        no_assignment: list[int] = []
        no_payload: list[EventId] = []
        for seq in range(self.next_deliver, end):
            eid = self._assign.get(seq)
            if eid is None:
                no_assignment.append(seq)
            elif eid not in self._held:
                no_payload.append(eid)
        return no_assignment, no_payload

    def holds_through(self, end: int) -> bool:
        """Whether every message sequenced below ``end`` is here (token acceptance rule)."""
        held = self._held
        assign = self._assign
        seq = max(self._hold_cursor, self.next_deliver)
        while seq < end:
            eid = assign.get(seq)
            if eid is None or eid not in held:
                self._hold_cursor = seq
                return False
            seq += 1
        self._hold_cursor = seq
        return True

    def entries(self, start: int, end: int) -> list[tuple[int, Event]]:
        """``(seq, event)`` for the positions in ``[start, end)`` held here (log or pending)."""
        out: list[tuple[int, Event]] = []
        for seq in range(max(start, self.log_start), end):
            event = self.log.get(seq)
            if event is None:
                eid = self._assign.get(seq)
                event = None if eid is None else self._held.get(eid)
            if event is not None:
                out.append((seq, event))
        return out

    # -- delivery ------------------------------------------------------------

    def deliver(self) -> Iterator[Event]:
        """Yield the events that became deliverable, stamped with their sequence
        number as ``ts``; each one is logged."""
        while True:
            out: list[Event] = []
            self.deliver_into(out, 1)
            if not out:
                return
            yield out[0]

    def deliver_into(self, out: list[Event], limit: int) -> bool:
        """Append at most ``limit`` deliverable events to ``out`` (as
        :meth:`deliver` yields them); True if it stopped at the limit.

        Raises :class:`Divergence` (after appending the events delivered before)."""
        assign = self._assign
        held = self._held
        where = self._where
        delivered_ids = self._delivered_ids
        log = self.log
        digests = self._digests
        checks = self._checks
        digest = self.digest
        seq = self.next_deliver
        stable = self.stable
        add_delivered = delivered_ids.add
        append = out.append
        n = 0
        try:
            while seq < stable:
                if n >= limit:
                    return True
                eid = assign.get(seq)
                if eid is None:
                    break
                event = held.pop(eid, None)
                if event is None:
                    break
                del assign[seq]
                del where[eid]
                source, number = eid
                stamped = Event(
                    source=source,
                    seq=number,
                    ts=seq,
                    payload=event.payload,
                    signature=event.signature,
                )
                add_delivered(source, number)
                log[seq] = stamped
                seq += 1
                digest = chain(digest, eid)
                digests[seq] = digest
                n += 1
                if checks:
                    expected = checks.pop(seq, None)
                    if expected is not None and self.digest_known and expected != digest:
                        raise Divergence(f"order digest differs at {seq}")
                append(stamped)
            return False
        finally:
            self.next_deliver = seq
            self.digest = digest
            self.delivered_count += n
            retention = self._retention
            keep = self._keep_floor
            while seq - self.log_start > retention and self.log_start < keep:
                log.pop(self.log_start, None)
                digests.pop(self.log_start, None)
                self.log_start += 1

    def check_digest(self, low: int, digest: int) -> None:
        """Compare the group's digest of the order below ``low`` with ours, now
        or once we have delivered that far. Raises :class:`Divergence`."""
        if not self.digest_known:
            return
        if low <= self.next_deliver:
            mine = self._digests.get(low)
            if mine is not None and mine != digest:
                raise Divergence(f"order digest differs at {low}")
        else:
            self._checks[low] = digest

    def skip_to(self, start: int, digest: int) -> None:
        """Start delivering at ``start`` (a process that joins delivers what is
        sequenced after it entered the view); ``digest`` covers the order before."""
        if start > self.next_deliver:
            for seq in [s for s in self._assign if s < start]:
                self._unassign(seq)
            self.next_deliver = start
            self.log_start = start
            self._keep_floor = max(self._keep_floor, start)
            self.stable = max(self.stable, start)
            self.digest = digest
            self._digests = {start: digest}
            self._known.clear()

    def sizes(self) -> dict[str, int]:
        return {
            "pool": len(self.pool),
            "held": len(self._held),
            "assignments": len(self._assign),
            "log": len(self.log),
        }
