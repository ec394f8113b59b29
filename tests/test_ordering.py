"""EpTO's ordering component (EpTO paper, Algorithm 2) pinned on hand-made
traces, and checked against a line-by-line transcription of the algorithm."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epto import Delivery, DeliveryTag, Event, EventId
from epto._intervals import SeqIntervals
from epto.check import check
from epto.epidemic._ordering import Ordering
from epto.wire import LayeredBall

BallFactory = Callable[[dict[EventId, tuple[Event, int]]], Mapping[EventId, tuple[Event, int]]]

# Every test runs with plain dicts (as a decoder may produce) and with the
# layered balls processes build.
BALLS: list[BallFactory] = [dict, LayeredBall]


@pytest.fixture(params=BALLS, ids=["dict", "layered"])
def make_ball(request: pytest.FixtureRequest) -> BallFactory:
    factory: BallFactory = request.param
    return factory


def ev(source: int, seq: int, ts: int) -> Event:
    return Event(source=source, seq=seq, ts=ts, payload=b"")


class Harness:
    def __init__(
        self, make_ball: BallFactory, *, ttl: int = 3, strict: bool = True, tagged: bool = False
    ) -> None:
        self.out: list[Delivery] = []
        self.ordering = Ordering(ttl=ttl, strict=strict, tagged=tagged, emit=self.out.append)
        self.make_ball = make_ball

    def round(self, *entries: tuple[Event, int]) -> list[tuple[EventId, DeliveryTag]]:
        """One round with a ball of ``(event, ttl)``; the deliveries it made."""
        start = len(self.out)
        self.ordering.order(self.make_ball({e.id: (e, t) for e, t in entries}))
        return [(d.event.id, d.tag) for d in self.out[start:]]

    def rounds(self, count: int) -> list[tuple[EventId, DeliveryTag]]:
        made = []
        for _ in range(count):
            made += self.round()
        return made


IN = DeliveryTag.IN_ORDER
OUT = DeliveryTag.OUT_OF_ORDER


def test_event_is_delivered_once_its_ttl_exceeds_ttl(make_ball: BallFactory) -> None:
    h = Harness(make_ball, ttl=3)
    a = ev(1, 0, 10)
    assert h.round((a, 1)) == []  # ttl 1
    assert h.round() == []  # 2
    assert h.round() == []  # 3: not > TTL
    assert h.round() == [(a.id, IN)]  # 4 > 3
    assert h.ordering.last_delivered_ts == 10
    assert h.ordering.pending == 0


def test_ttl_merge_keeps_the_larger_ttl(make_ball: BallFactory) -> None:
    # The larger copy first, then a smaller one: the smaller does not reset it.
    h = Harness(make_ball, ttl=3)
    a = ev(1, 0, 10)
    assert h.round((a, 3)) == []
    assert h.round((a, 1)) == [(a.id, IN)]  # ttl 4 from the first copy
    # The smaller copy first, then a larger one: the larger wins.
    h = Harness(make_ball, ttl=3)
    assert h.round((a, 1)) == []
    assert h.round((a, 3)) == []  # ttl 3, not yet > 3
    assert h.round() == [(a.id, IN)]
    assert [d.event.id for d in h.out] == [a.id]


def test_deliveries_of_a_round_are_sorted_by_ts_then_source(make_ball: BallFactory) -> None:
    h = Harness(make_ball, ttl=1)
    a, b, c, d = ev(3, 0, 5), ev(1, 0, 5), ev(2, 0, 4), ev(0, 0, 6)
    assert h.round((a, 2), (b, 2), (c, 2), (d, 2)) == [
        (c.id, IN),
        (b.id, IN),
        (a.id, IN),
        (d.id, IN),
    ]


def test_stale_events_are_rejected_in_both_modes(make_ball: BallFactory) -> None:
    for strict in (True, False):
        h = Harness(make_ball, ttl=1, strict=strict)
        a, late = ev(1, 0, 10), ev(2, 0, 9)
        assert h.round((a, 2)) == [(a.id, IN)]
        assert h.round((late, 2)) == []
        assert h.round((a, 2)) == []  # a duplicate of a delivered event
        assert h.ordering.rejected_stale == 2
        assert h.ordering.pending == 0


def test_strict_rejects_an_event_at_the_last_delivered_ts_paper_accepts_it(
    make_ball: BallFactory,
) -> None:
    a, b = ev(1, 0, 10), ev(2, 0, 10)
    strict = Harness(make_ball, ttl=1, strict=True)
    assert strict.round((a, 2)) == [(a.id, IN)]
    assert strict.round((b, 2)) == []
    assert strict.ordering.rejected_stale == 1

    paper = Harness(make_ball, ttl=1, strict=False)
    assert paper.round((a, 2)) == [(a.id, IN)]
    assert paper.round((b, 2)) == [(b.id, IN)]
    # ...but never a duplicate of an event delivered at that timestamp.
    assert paper.round((a, 2), (b, 2)) == []
    assert paper.ordering.rejected_stale == 2


def test_hold_back_strict_at_equal_ts_paper_only_above(make_ball: BallFactory) -> None:
    # a is stable, b (same ts, other source) is not: minQueuedTs = 10.
    a, b, c = ev(2, 0, 10), ev(1, 0, 10), ev(3, 0, 9)
    strict = Harness(make_ball, ttl=2, strict=True)
    assert strict.round((a, 3), (b, 1), (c, 3)) == [(c.id, IN)]  # a held: 10 >= 10
    assert strict.round() == []  # b ttl 2
    assert strict.round() == [(b.id, IN), (a.id, IN)]  # both stable, sorted

    paper = Harness(make_ball, ttl=2, strict=False)
    assert paper.round((a, 3), (b, 1), (c, 3)) == [(c.id, IN), (a.id, IN)]  # 10 <= 10
    assert paper.round() == []
    assert paper.round() == [(b.id, IN)]  # accepted by ts >= last, after a

    # Above minQueuedTs both hold back.
    d = ev(4, 0, 11)
    for strict_mode in (True, False):
        h = Harness(make_ball, ttl=2, strict=strict_mode)
        assert h.round((d, 3), (b, 1)) == []
        assert h.round() == []
        assert h.round() == [(b.id, IN), (d.id, IN)]


def test_paper_mode_violates_total_order_on_the_jepto_trace(make_ball: BallFactory) -> None:
    """JEpTO (Gilberti and Lobba), section III: two concurrent events with the
    same timestamp; one process delivers the stable one early, the other
    sees both become stable in the same round and sorts them the other way."""
    x, y = ev(1, 0, 10), ev(2, 0, 10)

    def trace(strict: bool) -> dict[int, list[EventId]]:
        p1 = Harness(make_ball, ttl=2, strict=strict)
        p2 = Harness(make_ball, ttl=2, strict=strict)
        p1.round((y, 3), (x, 1))  # y stable at p1, x not yet
        p2.round((y, 1), (x, 1))
        for _ in range(4):
            p1.round()
            p2.round()
        return {p: [d.event.id for d in h.out] for p, h in ((1, p1), (2, p2))}

    paper = trace(strict=False)
    assert paper == {1: [y.id, x.id], 2: [x.id, y.id]}
    assert not check(paper).ok
    strict = trace(strict=True)
    assert strict == {1: [x.id, y.id], 2: [x.id, y.id]}
    assert check(strict).ok


def test_tagged_delivery_at_most_once_never_for_delivered(make_ball: BallFactory) -> None:
    h = Harness(make_ball, ttl=1, tagged=True)
    a, late = ev(1, 0, 10), ev(2, 0, 9)
    assert h.round((a, 2)) == [(a.id, IN)]
    assert h.round((late, 2), (a, 2)) == [(late.id, OUT)]  # a: delivered, not tagged
    assert h.round((late, 2)) == []
    assert h.round((late, 1), (a, 1)) == []
    assert h.ordering.delivered_out_of_order == 1
    assert h.ordering.delivered_in_order == 1
    assert h.ordering.rejected_stale == 5


def test_untagged_delivery_drops_late_events(make_ball: BallFactory) -> None:
    h = Harness(make_ball, ttl=1, tagged=False)
    a, late = ev(1, 0, 10), ev(2, 0, 9)
    h.round((a, 2))
    assert h.round((late, 2)) == []
    assert h.ordering.delivered_out_of_order == 0


def test_pending_events_reports_ttl_in_order() -> None:
    h = Harness(dict, ttl=5)
    a, b = ev(1, 0, 10), ev(2, 0, 7)
    h.round((a, 1), (b, 3))
    h.round()
    assert h.ordering.pending_events() == [(b, 4), (a, 2)]


# -- intervals ---------------------------------------------------------------


def test_intervals_merge_left_right_and_both() -> None:
    s = SeqIntervals()
    assert s.add(7, 5)
    assert s.add(7, 7)
    assert s.interval_count() == 2
    assert s.add(7, 6)  # joins both
    assert s.interval_count() == 1
    assert s.add(7, 8)  # joins left
    assert s.add(7, 4)  # joins right
    assert s.interval_count() == 1
    assert all((7, q) in s for q in range(4, 9))
    assert (7, 3) not in s and (7, 9) not in s and (8, 5) not in s
    assert not s.add(7, 6)
    assert s.add(8, 0)
    assert s.source_count() == 2
    assert s.interval_count() == 2


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=120))
def test_intervals_behave_like_a_set(items: list[tuple[int, int]]) -> None:
    s = SeqIntervals()
    ref: set[tuple[int, int]] = set()
    for source, seq in items:
        assert s.add(source, seq) == ((source, seq) not in ref)
        ref.add((source, seq))
    for source in range(4):
        for seq in range(-1, 42):
            assert ((source, seq) in s) == ((source, seq) in ref)
        runs = sum(1 for q in range(41) if (source, q) in ref and (source, q - 1) not in ref)
        assert len(s._by_source.get(source, ((), ()))[0]) == runs


# -- against a transcription of Algorithm 2 ------------------------------------


class ReferenceOrdering:
    """Algorithm 2 as printed, with a ``delivered`` set, ttl kept per event
    and incremented every round, and the strict conditions of JEpTO."""

    def __init__(self, ttl: int, strict: bool, tagged: bool) -> None:
        self.TTL = ttl
        self.strict = strict
        self.tagged = tagged
        self.received: dict[EventId, list[object]] = {}  # id -> [event, ttl]
        self.delivered: set[EventId] = set()
        self.last = 0
        self.out: list[tuple[EventId, DeliveryTag]] = []
        self.rejected = 0

    def order(self, ball: Mapping[EventId, tuple[Event, int]]) -> None:
        for entry in self.received.values():
            entry[1] += 1  # type: ignore[operator]
        late: list[Event] = []
        for eid, (event, ttl) in ball.items():
            if self.strict:
                accept = event.ts > self.last
            else:
                accept = eid not in self.delivered and event.ts >= self.last
            if accept:
                if eid in self.received:
                    if self.received[eid][1] < ttl:  # type: ignore[operator]
                        self.received[eid][1] = ttl
                else:
                    self.received[eid] = [event, ttl]
            else:
                late.append(event)
                self.rejected += 1
        # Tagged deliveries of a round: sorted by order key, before the round's
        # in-order deliveries, once per event, never for a delivered one.
        for event in sorted(late, key=lambda e: (e.ts, e.source)):
            if self.tagged and event.id not in self.delivered:
                self.delivered.add(event.id)
                self.out.append((event.id, OUT))
        min_queued: float = float("inf")
        deliverable: list[Event] = []
        for event, ttl in self.received.values():  # type: ignore[misc]
            if ttl > self.TTL:
                deliverable.append(event)
            elif min_queued > event.ts:
                min_queued = event.ts
        keep = []
        for event in deliverable:
            if event.ts >= min_queued if self.strict else event.ts > min_queued:
                continue
            keep.append(event)
            del self.received[event.id]
        for event in sorted(keep, key=lambda e: (e.ts, e.source)):
            self.delivered.add(event.id)
            self.last = event.ts
            self.out.append((event.id, IN))


def random_balls(seed: int, rounds: int, sources: int) -> list[dict[EventId, tuple[Event, int]]]:
    """Balls with concurrent events, equal timestamps, late copies and ttls
    out of order: the situations the conditions of Algorithm 2 are about."""
    rng = random.Random(seed)
    events: list[Event] = []
    seqs = [0] * sources
    last_ts = [0] * sources  # every source's timestamps strictly increase
    balls = []
    for r in range(rounds):
        for _ in range(rng.randrange(3)):
            s = rng.randrange(sources)
            ts = max(last_ts[s] + 1, r * 2 + rng.randrange(-3, 3))
            last_ts[s] = ts
            events.append(ev(s, seqs[s], ts))
            seqs[s] += 1
        ball: dict[EventId, tuple[Event, int]] = {}
        for e in rng.sample(events[-12:], min(len(events), rng.randrange(6))):
            ball[e.id] = (e, rng.randrange(0, 6))
        balls.append(ball)
    return balls


@settings(derandomize=True, max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    strict=st.booleans(),
    tagged=st.booleans(),
    ttl=st.integers(1, 4),
    layered=st.booleans(),
)
def test_matches_the_transcription_of_algorithm_2(
    seed: int, strict: bool, tagged: bool, ttl: int, layered: bool
) -> None:
    ref = ReferenceOrdering(ttl, strict, tagged)
    out: list[Delivery] = []
    ordering = Ordering(ttl=ttl, strict=strict, tagged=tagged, emit=out.append)
    for ball in random_balls(seed, rounds=30, sources=4) + [{}] * (ttl + 2):
        ref.order(ball)
        ordering.order(LayeredBall(ball) if layered else ball)
        assert [(d.event.id, d.tag) for d in out] == ref.out
        assert ordering.last_delivered_ts == ref.last
        pending = {e.id: t for e, t in ordering.pending_events()}
        assert pending == {eid: entry[1] for eid, entry in ref.received.items()}
    if strict:
        assert check({0: [d.event.id for d in out if d.tag is IN]}).ok
    assert ordering.rejected_stale == ref.rejected


def test_tagged_deliveries_of_a_round_are_sorted_by_order_key(make_ball: BallFactory) -> None:
    h = Harness(make_ball, ttl=1, tagged=True)
    a = ev(1, 0, 10)
    h.round((a, 2))
    late = [ev(3, 0, 9), ev(2, 0, 9), ev(1, 1, 8), ev(4, 0, 10)]
    assert h.round(*((e, 2) for e in late)) == [
        ((1, 1), OUT),
        ((2, 0), OUT),
        ((3, 0), OUT),
        ((4, 0), OUT),
    ]
