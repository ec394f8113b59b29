"""The ordering component against its previous version, which walked every
received event every round: same deliveries in the same order, same counters,
same pending events, over seeded random traces with equal timestamps, paper
and strict modes, tagged delivery, stale copies, forged ids (one id, several
events), ttls beyond TTL, and balls whose timestamp floors are loose."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from epto import Delivery, DeliveryTag, Event, EventId, ProcessId
from epto._event import Ball
from epto._intervals import SeqIntervals
from epto.epidemic._ball import LayeredBall
from epto.epidemic._ordering import Ordering


def _order_key(event: Event) -> tuple[int, int]:
    return (event.ts, event.source)


class PreviousOrdering:
    """``epto.epidemic._ordering.Ordering`` before buckets by birth (one loop over every
    received event a round), kept verbatim but for this docstring and
    reading layers through the public ``LayeredBall.layers``."""

    __slots__ = (
        "_delivered_at_last_ts",
        "_delivered_seqs",
        "_emit",
        "_received",
        "_round",
        "_strict",
        "_top_seq",
        "_ttl",
        "delivered_in_order",
        "delivered_out_of_order",
        "last_delivered_ts",
        "rejected_delivered",
        "rejected_stale",
    )

    def __init__(
        self,
        *,
        ttl: int,
        strict: bool,
        tagged: bool,
        emit: Callable[[Delivery], None],
    ) -> None:
        self._ttl = ttl
        self._strict = strict
        self._emit = emit
        self._round = 0
        # id -> (event, birth round); ttl of the copy = self._round - birth
        self._received: dict[EventId, tuple[Event, int]] = {}
        self.last_delivered_ts = 0
        # Paper mode only: ids delivered with ts == last_delivered_ts.
        self._delivered_at_last_ts: set[EventId] = set()
        self._delivered_seqs: SeqIntervals | None = SeqIntervals() if tagged else None
        # Per source, the highest seq delivered: a copy of an id at or below
        # it that passes the timestamp test (a forgery, or a source that
        # equivocates; an honest copy of such an id is always stale) is
        # refused instead of being delivered twice. One int per source,
        # whatever the holes.
        self._top_seq: dict[ProcessId, int] = {}
        self.rejected_delivered = 0
        """Copies of delivered ids that passed the timestamp test (forged or
        equivocated: an honest copy of a delivered event never does)."""
        self.delivered_in_order = 0
        self.delivered_out_of_order = 0
        self.rejected_stale = 0
        """Copies refused by the timestamp test: duplicates of delivered events,
        or events that arrived after a later one was delivered (would-be holes).
        Without tagged delivery the two cannot be told apart in bounded memory."""

    @property
    def pending(self) -> int:
        """Events received and not yet delivered."""
        return len(self._received)

    def pending_events(self) -> list[tuple[Event, int]]:
        """``(event, ttl)`` of every received, undelivered event, in order-key order."""
        r = self._round
        items = [(ev, r - birth) for ev, birth in self._received.values()]
        items.sort(key=lambda item: _order_key(item[0]))
        return items

    def memory_sizes(self) -> dict[str, int]:
        sizes = {
            "received": len(self._received),
            "delivered_at_last_ts": len(self._delivered_at_last_ts),
        }
        if self._delivered_seqs is not None:
            sizes["delivered_intervals"] = self._delivered_seqs.interval_count()
        return sizes

    def order(self, ball: Ball) -> None:
        """``orderEvents(ball)``: one round of the ordering component.

        ``ball`` is any mapping ``{event id: (event, ttl)}``; a
        :class:`LayeredBall` is read layer by layer without building entries.
        """
        self._round += 1
        r = self._round
        received = self._received
        last = self.last_delivered_ts

        if ball:
            layers = (ball if type(ball) is LayeredBall else LayeredBall(ball)).layers
            get = received.get
            strict = self._strict
            at_last = self._delivered_at_last_ts
            top_seq = self._top_seq
            stale: list[Event] = []
            for ttl, layer in layers.items():
                birth = r - ttl
                for eid, event in layer.items():
                    ts = event.ts
                    if ts > last or (not strict and ts == last and eid not in at_last):
                        current = get(eid)
                        if current is None:
                            top = top_seq.get(eid[0])
                            if top is not None and eid[1] <= top:
                                self.rejected_delivered += 1
                                continue
                            received[eid] = (event, birth)
                        elif current[1] > birth:
                            received[eid] = (event, birth)
                    else:
                        stale.append(event)
            if stale:
                self._reject_stale(stale)

        if not received:
            return

        # Stable iff ttl > TTL, i.e. birth < r - TTL.
        threshold = r - self._ttl
        min_queued = None
        deliverable: list[Event] = []
        for event, birth in received.values():
            if birth < threshold:
                deliverable.append(event)
            elif min_queued is None or event.ts < min_queued:
                min_queued = event.ts
        if not deliverable:
            return
        if min_queued is not None:
            if self._strict:
                deliverable = [e for e in deliverable if e.ts < min_queued]
            else:
                deliverable = [e for e in deliverable if e.ts <= min_queued]
            if not deliverable:
                return
        deliverable.sort(key=_order_key)
        self._deliver_in_order(deliverable)

    def _deliver_in_order(self, events: list[Event]) -> None:
        received = self._received
        emit = self._emit
        seqs = self._delivered_seqs
        new_last = events[-1].ts
        if not self._strict:
            if new_last != self.last_delivered_ts:
                self._delivered_at_last_ts.clear()
            self._delivered_at_last_ts.update(e.id for e in events if e.ts == new_last)
        top_seq = self._top_seq
        for event in events:
            del received[(event.source, event.seq)]
            if seqs is not None:
                seqs.add(event.source, event.seq)
            if event.seq > top_seq.get(event.source, -1):
                top_seq[event.source] = event.seq
            emit(Delivery(event=event, tag=DeliveryTag.IN_ORDER))
        self.last_delivered_ts = new_last
        self.delivered_in_order += len(events)

    def _reject_stale(self, stale: list[Event]) -> None:
        """Copies refused by the timestamp test. With tagged delivery, those
        never delivered are delivered now, out of order, sorted by order key."""
        self.rejected_stale += len(stale)
        seqs = self._delivered_seqs
        if seqs is None:
            return
        stale.sort(key=_order_key)
        for event in stale:
            if seqs.add(event.source, event.seq):
                self.delivered_out_of_order += 1
                self._emit(Delivery(event=event, tag=DeliveryTag.OUT_OF_ORDER))


def random_trace(
    seed: int, rounds: int, sources: int, ttl: int, per_round: int
) -> list[dict[EventId, tuple[Event, int]]]:
    """Balls of a seeded trace: events whose timestamps may tie across
    sources, and within one (an equivocating source), copies re-sent late
    (stale once delivered), forged events that reuse an id with another
    timestamp or payload, ttls from 0 to TTL + 3."""
    rng = random.Random(seed)
    seqs = [0] * sources
    last_ts = [0] * sources
    events: list[Event] = []
    balls = []
    for r in range(rounds):
        for _ in range(rng.randrange(per_round + 1)):
            s = rng.randrange(sources)
            ts = max(last_ts[s] + 1, r * 2 + rng.randrange(-3, 3))
            last_ts[s] = ts
            events.append(Event(source=s, seq=seqs[s], ts=ts, payload=b""))
            seqs[s] += 1
            if rng.random() < 0.2:  # a source that equivocates: a twin timestamp
                events.append(Event(source=s, seq=seqs[s], ts=ts, payload=b"twin"))
                seqs[s] += 1
        ball: dict[EventId, tuple[Event, int]] = {}
        recent = events[-4 * per_round - 8 :]
        for e in rng.sample(recent, min(len(recent), rng.randrange(3 * per_round + 4))):
            ball[e.id] = (e, rng.randrange(0, ttl + 4))
        if events and rng.random() < 0.3:  # an old copy, stale if delivered
            e = rng.choice(events)
            ball[e.id] = (e, rng.randrange(0, ttl + 4))
        if events and rng.random() < 0.3:  # a forgery of a known id
            e = rng.choice(events[-3 * per_round - 6 :] + events[-2:] + [rng.choice(events)])
            forged = Event(
                source=e.source,
                seq=e.seq,
                ts=max(0, rng.choice([e.ts, r * 2 + 8]) + rng.randrange(-6, 7)),
                payload=rng.choice([b"", b"forged"]),
            )
            ball[e.id] = (forged, rng.randrange(0, ttl + 4))
        balls.append(ball)
    return balls


def loose(ball: dict[EventId, tuple[Event, int]], rng: random.Random) -> LayeredBall:
    """The ball with floors lowered at random (as a merge derives them)."""
    exact = LayeredBall(ball)
    parts = [
        (ttl, layer, floor - rng.choice([0, 0, 1, 5, 100]), top)
        for ttl, layer, floor, top in exact._parts
    ]
    return LayeredBall._of_parts(parts, len(exact), exact.max_ts)


def outcome(ordering: Ordering | PreviousOrdering, out: list[Delivery]) -> object:
    return (
        [(d.event, d.tag) for d in out],
        [(id(d.event)) for d in out],
        ordering.last_delivered_ts,
        ordering.pending,
        [(id(e), t) for e, t in ordering.pending_events()],
        ordering.rejected_stale,
        ordering.rejected_delivered,
        ordering.delivered_in_order,
        ordering.delivered_out_of_order,
        ordering.memory_sizes(),
    )


@settings(derandomize=True, max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    strict=st.booleans(),
    tagged=st.booleans(),
    ttl=st.integers(1, 6),
    per_round=st.integers(1, 12),
    form=st.sampled_from(["dict", "layered", "loose"]),
)
def test_same_outcome_as_the_previous_ordering(
    seed: int, strict: bool, tagged: bool, ttl: int, per_round: int, form: str
) -> None:
    rng = random.Random(seed ^ 0x5EED)
    old_out: list[Delivery] = []
    new_out: list[Delivery] = []
    old = PreviousOrdering(ttl=ttl, strict=strict, tagged=tagged, emit=old_out.append)
    new = Ordering(ttl=ttl, strict=strict, tagged=tagged, emit=new_out.append)
    trace = random_trace(seed, rounds=40, sources=5, ttl=ttl, per_round=per_round)
    for ball in trace + [{}] * (ttl + 3):
        given_ball: Ball = ball
        if form == "layered":
            given_ball = LayeredBall(ball)
        elif form == "loose":
            given_ball = loose(ball, rng)
        old.order(ball)
        new.order(given_ball)
        assert outcome(new, new_out) == outcome(old, old_out)


def test_the_traces_exercise_every_path() -> None:
    """The traces above reach stale copies, forged ids, holds and tagged deliveries."""
    totals = [0, 0, 0, 0]
    for seed in range(20):
        out: list[Delivery] = []
        ordering = PreviousOrdering(ttl=3, strict=seed % 2 == 0, tagged=True, emit=out.append)
        for ball in random_trace(seed, rounds=40, sources=5, ttl=3, per_round=6):
            ordering.order(ball)
        totals[0] += ordering.rejected_stale
        totals[1] += ordering.rejected_delivered
        totals[2] += ordering.delivered_out_of_order
        totals[3] += ordering.delivered_in_order
    assert totals[0] > 0
    assert totals[1] > 0
    assert totals[2] > 0
    assert totals[3] > 100
