"""EpTO's dissemination component (EpTO paper, Algorithm 1) as the Process
runs it, pinned on small cases and checked against a transcription."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epto
import epto.epidemic
from epto import Config, Event, EventId
from epto.epidemic import FullView, Process
from epto.wire import LayeredBall

BallFactory = Callable[[dict[EventId, tuple[Event, int]]], Mapping[EventId, tuple[Event, int]]]


@pytest.fixture(params=[dict, LayeredBall], ids=["dict", "layered"])
def make_ball(request: pytest.FixtureRequest) -> BallFactory:
    factory: BallFactory = request.param
    return factory


def ev(source: int, seq: int, ts: int) -> Event:
    return Event(source=source, seq=seq, ts=ts, payload=b"p")


def make_process(ttl: int = 3, fanout: int = 2, n: int = 5, **kw: object) -> Process:
    config = Config(fanout=fanout, ttl=ttl, round_interval=1.0, **kw)  # type: ignore[arg-type]
    return Process(0, config, peers=FullView(0, range(n)), rng=random.Random(7), now=0.0)


def sent(proc: Process, now: float) -> tuple[list[int], dict[EventId, tuple[Event, int]]]:
    """Run the round due at ``now``; destinations and the ball they got."""
    proc.handle_timer(now)
    out = proc.messages_to_send()
    if not out:
        return [], {}
    balls = {id(ball) for _, ball in out}
    assert len(balls) == 1, "one ball object is shared by the destinations of a round"
    return [dest for dest, _ in out], dict(out[0][1])


def test_broadcast_is_sent_with_ttl_one_to_k_peers() -> None:
    p = make_process(fanout=3)
    eid = p.broadcast(b"x", 0.5)
    assert eid == (0, 0)
    dests, ball = sent(p, 1.0)
    assert len(dests) == 3 and len(set(dests)) == 3 and 0 not in dests
    (event, ttl) = ball[eid]
    assert ttl == 1 and event.ts == 1 and event.payload == b"x"
    assert sent(p, 2.0) == ([], {})  # relayed once, then forgotten


def test_ttl_merge_keeps_the_larger_ttl(make_ball: BallFactory) -> None:
    a = ev(3, 0, 10)
    for first, second in ((1, 2), (2, 1)):
        p = make_process(ttl=5)
        p.receive(3, make_ball({a.id: (a, first)}), 0.1)
        p.receive(4, make_ball({a.id: (a, second)}), 0.2)
        assert p.memory_sizes()["next_ball"] == 1
        _, ball = sent(p, 1.0)
        assert ball == {a.id: (a, 3)}


def test_copies_at_ttl_are_not_relayed_but_move_the_clock(make_ball: BallFactory) -> None:
    p = make_process(ttl=3)
    old, young = ev(3, 0, 50), ev(4, 0, 20)
    p.receive(3, make_ball({old.id: (old, 3), young.id: (young, 2)}), 0.1)
    assert p.clock == 50
    assert p.statistics().entries_received == 2
    _, ball = sent(p, 1.0)
    assert ball == {young.id: (young, 3)}  # ttl TTL-1 goes out with TTL
    p.receive(3, make_ball({old.id: (old, 7)}), 1.1)
    assert sent(p, 2.0) == ([], {})
    assert p.statistics().next_ball_size == 0
    # The next broadcast is timestamped after everything seen.
    eid = p.broadcast(b"y", 2.5)
    _, ball = sent(p, 3.0)
    assert ball[eid][0].ts == 51


def test_relay_does_not_depend_on_the_order_of_balls(make_ball: BallFactory) -> None:
    a, b, c = ev(1, 0, 5), ev(2, 0, 6), ev(3, 0, 7)
    balls = [
        {a.id: (a, 1), b.id: (b, 2)},
        {b.id: (b, 0), c.id: (c, 2), a.id: (a, 2)},
        {c.id: (c, 1)},
    ]
    results = []
    for order in ((0, 1, 2), (2, 1, 0), (1, 0, 2)):
        p = make_process(ttl=4)
        for i in order:
            p.receive(9, make_ball(balls[i]), 0.5)
        results.append(sent(p, 1.0)[1])
    assert results[0] == {a.id: (a, 3), b.id: (b, 3), c.id: (c, 3)}
    assert results[0] == results[1] == results[2]


def test_events_reach_the_ordering_through_the_next_ball() -> None:
    p = make_process(ttl=2)
    a = ev(3, 0, 10)
    p.receive(3, {a.id: (a, 1)}, 0.5)
    sent(p, 1.0)  # ordering gets a with ttl 2
    assert p.pending_events() == [(a, 2)]
    sent(p, 2.0)  # ttl 3 > 2
    deliveries = list(p.deliveries())
    assert [d.event for d in deliveries] == [a]
    assert p.last_delivered_ts == 10


def test_own_broadcast_is_delivered_by_the_broadcaster() -> None:
    p = make_process(ttl=2)
    eid = p.broadcast(b"z", 0.0)
    for t in range(1, 4):
        sent(p, float(t))
    assert [d.event.id for d in p.deliveries()] == [eid]


def test_layered_ball_is_a_mapping_of_event_id_to_event_and_ttl() -> None:
    a, b = ev(1, 0, 3), ev(2, 5, 9)
    plain = {a.id: (a, 2), b.id: (b, 0)}
    ball = LayeredBall(plain)
    assert len(ball) == 2
    assert dict(ball) == plain
    assert ball[b.id] == (b, 0)
    assert a.id in ball and (7, 7) not in ball
    assert set(ball) == set(plain)
    assert ball == plain
    assert ball.max_ts == 9
    assert LayeredBall().max_ts == 0 and len(LayeredBall()) == 0
    with pytest.raises(KeyError):
        ball[(7, 7)]


# -- against a transcription of Algorithm 1 ------------------------------------


class ReferenceDissemination:
    """Algorithm 1 as printed: nextBall of [event, ttl], ttl incremented in
    place every round; the clock is the logical clock of Algorithm 4. One
    change: a broadcast is stamped (``getClock()``, line 4) by the round that
    sends it, not when it is made (docs/epto.md, *Timestamps*)."""

    def __init__(self, ttl: int, fanout: int, peers: FullView, rng: random.Random) -> None:
        self.TTL = ttl
        self.K = fanout
        self.peers = peers
        self.rng = rng
        self.next_ball: dict[EventId, list[object]] = {}
        self.clock = 0
        self.seq = 0
        self.unstamped: list[bytes] = []

    def broadcast(self, payload: bytes) -> None:
        self.unstamped.append(payload)

    def stamp(self) -> list[Event]:
        """The broadcasts since the last round, stamped as this round sends them."""
        events = []
        for payload in self.unstamped:
            self.clock += 1
            event = Event(source=0, seq=self.seq, ts=self.clock, payload=payload)
            self.seq += 1
            self.next_ball[event.id] = [event, 0]
            events.append(event)
        self.unstamped = []
        return events

    def receive(self, ball: Mapping[EventId, tuple[Event, int]]) -> None:
        for eid, (event, ttl) in ball.items():
            if ttl < self.TTL:
                if eid in self.next_ball:
                    if self.next_ball[eid][1] < ttl:  # type: ignore[operator]
                        self.next_ball[eid][1] = ttl
                else:
                    self.next_ball[eid] = [event, ttl]
            self.clock = max(self.clock, event.ts)

    def round(self) -> tuple[list[int], dict[EventId, tuple[Event, int]]]:
        for entry in self.next_ball.values():
            entry[1] += 1  # type: ignore[operator]
        if not self.next_ball:
            return [], {}
        dests = list(self.peers.sample(self.K, self.rng))
        ball = {eid: (e, t) for eid, (e, t) in self.next_ball.items()}  # type: ignore[misc]
        self.next_ball = {}
        return dests, ball


@settings(derandomize=True, max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), ttl=st.integers(1, 5), layered=st.booleans())
def test_matches_the_transcription_of_algorithm_1(seed: int, ttl: int, layered: bool) -> None:
    rng = random.Random(seed)
    n, fanout = 6, 3
    config = Config(fanout=fanout, ttl=ttl, round_interval=1.0)
    proc = Process(0, config, peers=FullView(0, range(n)), rng=random.Random(seed), now=0.0)
    ref = ReferenceDissemination(ttl, fanout, FullView(0, range(n)), random.Random(seed))
    events: list[Event] = []
    seqs = [0] * n
    for r in range(1, 25):
        for _ in range(rng.randrange(4)):
            if rng.random() < 0.2:
                proc.broadcast(b"m", r - 0.5)
                ref.broadcast(b"m")
                continue
            s = rng.randrange(1, n)
            if rng.random() < 0.4 or not events:
                e = ev(s, seqs[s], max(1, ref.clock + rng.randrange(-2, 4)))
                seqs[s] += 1
                events.append(e)
            ball = {
                e.id: (e, rng.randrange(0, ttl + 2))
                for e in rng.sample(events[-10:], min(len(events), rng.randrange(1, 5)))
            }
            proc.receive(s, LayeredBall(ball) if layered else ball, r - 0.5)
            ref.receive(ball)
            assert proc.clock == ref.clock
            if rng.random() < 0.3:  # looking in between does not change the outcome
                assert proc.memory_sizes()["next_ball"] == len(ref.next_ball) + len(ref.unstamped)
        events.extend(ref.stamp())
        dests, ball = sent(proc, float(r))
        assert (dests, ball) == ref.round()


def test_balls_are_never_mutated_by_receivers() -> None:
    a, b, c = ev(1, 0, 5), ev(2, 0, 6), ev(3, 0, 7)
    first = LayeredBall({a.id: (a, 1), b.id: (b, 2)})
    second = LayeredBall({a.id: (a, 2), b.id: (b, 1), c.id: (c, 9)})
    snapshots = [dict(first), dict(second)]
    p = make_process(ttl=5)
    p.receive(1, first, 0.1)
    p.receive(2, second, 0.2)
    p.handle_timer(1.0)
    out = p.messages_to_send()[0][1]
    assert out == {a.id: (a, 3), b.id: (b, 3)}
    relayed = dict(out)
    q = make_process(ttl=5)
    q.receive(0, out, 1.1)
    q.receive(0, first, 1.2)
    sent(q, 1.5)
    assert dict(out) == relayed
    assert [dict(first), dict(second)] == snapshots
    assert first.max_ts == 6 and second.max_ts == 7


def test_layered_ball_from_layers() -> None:
    a, b = ev(1, 0, 3), ev(2, 0, 4)
    ball = LayeredBall.from_layers({2: {a.id: a}, 0: {b.id: b}, 5: {}})
    assert dict(ball) == {a.id: (a, 2), b.id: (b, 0)}
    assert list(ball.layers) == [0, 2]
    assert ball.max_ts == 4
    with pytest.raises(ValueError, match="more than one layer"):
        LayeredBall.from_layers({1: {a.id: a}, 2: {a.id: a}})


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.integers(-1, 7),
            st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 5)), st.just(0)),
            max_size=6,
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 7),
)
def test_the_merge_keeps_the_largest_ttl_below_the_limit(
    raw: list[dict[int, dict[EventId, int]]], limit: int
) -> None:
    from epto.epidemic._ball import LayeredBall, merge_parts

    # Each source is a ball: an id in one layer only.
    sources = []
    for ball in raw:
        seen: set[EventId] = set()
        layers = {}
        for t, ids in sorted(ball.items()):
            fresh = {eid: ev(eid[0], eid[1], 1 + eid[1]) for eid in ids if eid not in seen}
            seen |= fresh.keys()
            if fresh:
                layers[t] = fresh
        sources.append(LayeredBall.from_layers(layers))
    expected: dict[EventId, int] = {}
    for source in sources:
        for eid, (_, t) in source.items():
            if t < limit and expected.get(eid, -99) < t:
                expected[eid] = t
    # Both ways to bound the merged layers: reading the events, or from the parts.
    import epto.epidemic._ball

    exact, read_below = epto.epidemic._ball._EVENTS_PER_PART, (0, 1 << 30)[limit % 2]
    epto.epidemic._ball._EVENTS_PER_PART = read_below
    try:
        merged, size, max_ts = merge_parts([source.parts for source in sources], limit)
    finally:
        epto.epidemic._ball._EVENTS_PER_PART = exact
    flat = {eid: t for t, layer, _, _ in merged for eid in layer}
    assert flat == expected
    assert size == len(flat) == sum(len(layer) for _, layer, _, _ in merged)
    assert all(layer for _, layer, _, _ in merged)
    ttls = [t for t, _, _, _ in merged]
    assert ttls == sorted(set(ttls))
    # The bounds hold every event's timestamp; the largest is exact.
    for _, layer, low, high in merged:
        assert all(low <= e.ts <= high for e in layer.values())
    assert max_ts == max((1 + eid[1] for eid in flat), default=0)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.integers(-1, 9),
            st.dictionaries(
                st.tuples(st.integers(0, 3), st.integers(0, 5)), st.integers(0, 2), max_size=5
            ),
            max_size=7,
        ),
        max_size=7,
    ),
    st.integers(1, 9),
    st.integers(0, 2),
    st.sampled_from([0, 1, 2, 4, 1 << 30]),
)
def test_the_merge_by_dense_index_equals_the_merge_of_sorted_parts(
    raw: list[dict[int, dict[EventId, int]]], limit: int, age: int, read_below: int
) -> None:
    """merge_balls (the layers of a ttl found by index) gives what merge_parts
    (every part sorted by ttl) gives: the same layers in the same order, the
    same event objects (copies of an id may differ: forged), the same bounds,
    size and largest timestamp, and a dense index that matches the parts."""
    import epto.epidemic._ball
    from epto.epidemic._ball import merge_balls, merge_parts

    balls = []
    for ball in raw:
        seen: set[EventId] = set()
        layers = {}
        for t, ids in sorted(ball.items()):
            # The value picks one of three versions of the event (forged copies).
            fresh = {
                eid: ev(eid[0], eid[1], 1 + eid[1] + 10 * v)
                for eid, v in ids.items()
                if eid not in seen
            }
            seen |= fresh.keys()
            if fresh:
                layers[t] = fresh
        balls.append(LayeredBall.from_layers(layers))

    def shape(parts: list[tuple[int, dict[EventId, Event], int, int]]) -> object:
        return [
            (t, [(eid, id(event)) for eid, event in layer.items()], low, high)
            for t, layer, low, high in parts
        ]

    exact = epto.epidemic._ball._EVENTS_PER_PART
    epto.epidemic._ball._EVENTS_PER_PART = read_below
    try:
        merged = merge_balls(balls, limit, age)
        parts, size, max_ts = merge_parts([ball.parts for ball in balls], limit)
    finally:
        epto.epidemic._ball._EVENTS_PER_PART = exact
    aged = [(t + age, layer, low, high) for t, layer, low, high in parts]
    assert shape(merged.parts) == shape(aged)
    assert len(merged) == size
    assert merged.max_ts == max_ts
    dense = merged.dense_index
    if dense is not None:
        by_ttl = {t: layer for t, layer, _, _ in merged.parts}
        assert all(dense[t] is layer for t, layer in by_ttl.items())
        assert all(layer is None for t, layer in enumerate(dense) if t not in by_ttl)


def test_a_ball_with_a_ttl_out_of_range_or_few_parts_keeps_no_index() -> None:
    import epto.epidemic._ball

    a, b = ev(1, 0, 3), ev(2, 0, 4)
    assert LayeredBall({a.id: (a, 2), b.id: (b, 0)}).dense_index == [{b.id: b}, None, {a.id: a}]
    assert LayeredBall({a.id: (a, -1)}).dense_index is None
    assert LayeredBall({a.id: (a, epto.epidemic._ball._DENSE_TTLS)}).dense_index is None
    assert LayeredBall().dense_index == []
    # Sparse: fewer parts than one per four ttls up to the highest.
    assert LayeredBall({a.id: (a, 3)}).dense_index == [None, None, None, {a.id: a}]
    assert LayeredBall({a.id: (a, 4)}).dense_index is None


def test_a_ball_of_one_layer_shares_it_and_equals_the_ball_of_its_entries() -> None:
    a, b = ev(1, 0, 3), ev(2, 0, 9)
    layer = {a.id: a, b.id: b}
    ball = LayeredBall.of_layer(2, layer)
    assert ball == LayeredBall({a.id: (a, 2), b.id: (b, 2)})
    assert ball.parts == [(2, layer, 3, 9)] and ball.parts[0][1] is layer
    assert ball.dense_index == [None, None, layer]
    assert ball.max_ts == 9 and len(ball) == 2


class _NoPeersAtFirst:
    """A sampler with an empty view for its first ``empty_rounds`` calls."""

    def __init__(self, peer: int, empty_rounds: int) -> None:
        self.peer = peer
        self.empty_rounds = empty_rounds

    def sample(self, k: int, rng: random.Random) -> list[int]:
        if self.empty_rounds:
            self.empty_rounds -= 1
            return []
        return [self.peer]


def test_a_round_without_peers_keeps_the_ball_for_the_next_round() -> None:
    config = epto.Config(fanout=1, ttl=5, round_interval=1.0)
    proc = epto.epidemic.Process(
        1, config, peers=_NoPeersAtFirst(2, 2), rng=random.Random(1), now=0.0
    )
    eid = proc.broadcast(b"x", 0.0)
    for t in (1.0, 2.0):
        proc.handle_timer(t)
        assert proc.messages_to_send() == []
    proc.handle_timer(3.0)
    [(dest, ball)] = proc.messages_to_send()
    assert dest == 2
    assert ball[eid][1] == 3  # aged every round it waited


def test_copies_waiting_for_peers_still_stop_at_ttl() -> None:
    config = epto.Config(fanout=1, ttl=2, round_interval=1.0)
    proc = epto.epidemic.Process(
        1, config, peers=_NoPeersAtFirst(2, 10), rng=random.Random(1), now=0.0
    )
    proc.broadcast(b"x", 0.0)
    for t in range(1, 12):
        proc.handle_timer(float(t))
        assert proc.messages_to_send() == []
    assert proc.memory_sizes()["next_ball"] == 0
    assert [d.event.payload for d in proc.deliveries()] == [b"x"]


def test_advance_clock_moves_the_next_events_past_a_known_cut() -> None:
    proc = make_process()
    assert proc.broadcast(b"a", 0.0) == (0, 0)
    proc.advance_clock(1000)
    proc.broadcast(b"b", 0.0)
    proc.advance_clock(10)  # never backwards
    proc.broadcast(b"c", 0.0)
    proc.handle_timer(proc.get_timer())
    ball = proc.messages_to_send()[0][1]
    # Stamped by the round that sends them, all three after the cut.
    assert sorted(ev.ts for ev, _ in ball.values()) == [1001, 1002, 1003]
    for bad in (-1, 2**63, "5"):
        with pytest.raises(epto.LocalProtocolError):
            proc.advance_clock(bad)  # type: ignore[arg-type]
