"""Token-ring frames: every message type round-trips; garbage raises only
``RemoteProtocolError``."""

from __future__ import annotations

import random
import struct

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epto import Event, GroupKey, Limits, LocalProtocolError
from epto.tokenring import TOKEN_RING_KINDS, token_ring_registry
from epto.tokenring._messages import (
    Accept,
    Accepted,
    Batch,
    Catchup,
    ConfigRequest,
    Data,
    DataBatch,
    Decided,
    Delays,
    Fetch,
    Heartbeat,
    Join,
    Latencies,
    Nack,
    Order,
    Prepare,
    Probe,
    Promise,
    Report,
    RingConfig,
    Token,
    TokenAck,
    TokenState,
)
from epto.wire import FrameCodec, GroupSealer

SETTINGS = settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LIMITS = Limits.for_frame_size(1 << 16)
GROUP = 7
KEY = GroupKey(key_id=3, secret=bytes(range(32)))

u64 = st.integers(0, 2**64 - 1)
small = st.integers(0, 1000)
eids = st.tuples(u64, u64)
events = st.builds(
    Event,
    source=u64,
    seq=u64,
    ts=u64,
    payload=st.binary(max_size=40),
    signature=st.sampled_from([b"", bytes(range(64))]),
)
pids = st.lists(u64, max_size=5, unique=True).map(tuple)
seconds = st.floats(0.0, 1e9, allow_nan=False)
rows = st.lists(st.tuples(u64, seconds), max_size=5).map(tuple)
seq_events = st.lists(st.tuples(u64, events), max_size=3).map(tuple)


def _expand(runs: list[tuple[int, int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((source, first + i) for source, first, count in runs for i in range(count))


# Batches list each source's messages consecutively: ids that form runs.
id_runs = st.lists(st.tuples(u64, st.integers(0, 2**64 - 8), st.integers(1, 7)), max_size=3).map(
    _expand
)
batches = st.builds(
    Batch,
    first=u64,
    ids=st.one_of(st.lists(eids, max_size=4).map(tuple), id_runs),
    holders=st.frozensets(u64, max_size=4),
)
assigned_runs = st.lists(
    st.tuples(st.integers(0, 2**64 - 8), u64, st.integers(0, 2**64 - 8), st.integers(1, 7)),
    max_size=3,
).map(
    lambda runs: tuple(
        (seq + i, (source, first + i)) for seq, source, first, count in runs for i in range(count)
    )
)
states = st.builds(
    TokenState,
    instance=u64,
    hop=u64,
    next_seq=u64,
    low=u64,
    stable=u64,
    batches=st.lists(batches, max_size=3).map(tuple),
    low_digest=u64,
    sources=st.lists(st.tuples(u64, u64), max_size=3).map(tuple),
)
rings = st.builds(
    RingConfig,
    instance=u64,
    view=u64,
    members=pids,
    core=pids,
    state=states,
    events=seq_events,
    full=st.booleans(),
    starts=st.lists(st.tuples(u64, u64, u64), max_size=3).map(tuple),
)
ballots = st.tuples(u64, u64)
messages = st.one_of(
    st.builds(Data, event=events),
    st.builds(DataBatch, events=st.lists(events, max_size=4).map(tuple)),
    st.builds(Token, state=states),
    st.builds(
        Token,
        state=states,
        events=st.lists(events, max_size=3).map(tuple),
        forward_to=st.none() | u64,
        copy=st.integers(0, 255),
    ),
    st.builds(TokenAck, instance=u64, hop=u64, copy=st.integers(0, 255)),
    st.builds(
        Order,
        state=states,
        assigned=st.one_of(st.lists(st.tuples(u64, eids), max_size=4).map(tuple), assigned_runs),
    ),
    st.builds(Heartbeat, instance=u64, delivered=u64),
    st.builds(Fetch, start=u64, end=u64, ids=st.lists(eids, max_size=4).map(tuple)),
    st.builds(
        Catchup,
        entries=seq_events,
        events=st.lists(events, max_size=3).map(tuple),
        stable=u64,
        oldest=u64,
    ),
    st.just(Join()),
    st.just(Join(incarnation=5, resumes=0)),
    st.just(ConfigRequest()),
    st.builds(Prepare, instance=u64, ballot=ballots, full=st.booleans()),
    st.builds(
        Promise,
        instance=u64,
        ballot=ballots,
        accepted=st.none() | st.tuples(ballots, rings),
        report=st.builds(Report, state=states, events=seq_events, delivered=u64),
    ),
    st.builds(Nack, instance=u64, ballot=ballots, promised=ballots),
    st.builds(Accept, instance=u64, ballot=ballots, value=rings),
    st.builds(Accepted, instance=u64, ballot=ballots),
    st.builds(Decided, config=rings),
    st.builds(Probe, stamp=seconds, echo=st.booleans()),
    st.builds(Latencies, instance=u64, plan=st.tuples(u64, u64), rate=seconds, row=rows),
    st.builds(Delays, instance=u64, epoch=u64, row=rows),
)


def codec(sealed: bool = False) -> FrameCodec:
    sealer = GroupSealer(KEY, counter_start=0, prefix=b"trfz") if sealed else None
    return FrameCodec(group=GROUP, limits=LIMITS, registry=token_ring_registry(), sealer=sealer)


def test_every_message_type_has_a_kind_in_the_reserved_range() -> None:
    assert len(TOKEN_RING_KINDS) == 19
    assert all(16 <= kind.code <= 31 or 44 <= kind.code <= 46 for kind in TOKEN_RING_KINDS)
    registry = token_ring_registry()
    assert 1 in registry and 16 in registry and 30 in registry and 31 in registry
    assert 44 in registry and 45 in registry and 46 in registry


@SETTINGS
@given(message=messages, sender=u64, sealed=st.booleans())
def test_round_trip(message: object, sender: int, sealed: bool) -> None:
    c = codec(sealed)
    (frame,) = c.encode(sender, message)
    decoded = c.decode(frame)
    assert decoded.message == message
    assert decoded.sender == sender


def test_encoder_rejects_out_of_range_and_oversized() -> None:
    from epto import LocalProtocolError

    c = codec()
    with pytest.raises(LocalProtocolError):
        c.encode(1, Heartbeat(instance=-1, delivered=0))
    big = Limits.for_frame_size(1400)
    small_codec = FrameCodec(group=GROUP, limits=big, registry=token_ring_registry())
    many = Fetch(start=0, end=0, ids=tuple((i, i) for i in range(200)))
    with pytest.raises(LocalProtocolError):
        small_codec.encode(1, many)


def _corpus() -> list[bytes]:
    out = []
    rng = random.Random(5)
    for sealed in (False, True):
        c = codec(sealed)
        for i in range(20):
            event = Event(source=i, seq=i, ts=0, payload=bytes([i]) * i)
            state = TokenState(
                instance=i,
                hop=i,
                next_seq=3,
                low=1,
                stable=2,
                batches=(
                    Batch(first=1, ids=((i, 0), (2, 1)), holders=frozenset({1, 2})),
                    Batch(first=3, ids=((i, 1), (i, 2), (i, 3), (2, 2)), holders=frozenset({1})),
                ),
                sources=((i, 2),),
            )
            ring = RingConfig(
                instance=i,
                view=1,
                members=(1, 2, 3),
                core=(1, 2),
                state=state,
                events=((4, event),),
                full=bool(i % 2),
                starts=((3, 5, 9),),
            )
            for message in (
                Data(event=event),
                DataBatch(events=(event, attrs.evolve(event, seq=i + 1))),
                Token(state=state),
                Token(state=state, events=(event,)),
                Token(state=state, events=(event,), forward_to=2),
                Order(state=state, assigned=((1, (i, 0)), (2, (i, 1)), (3, (i, 2)), (4, (2, 9)))),
                Catchup(entries=((1, event),), events=(event,), stable=2, oldest=0),
                Promise(
                    instance=i,
                    ballot=(1, 2),
                    accepted=((1, 1), ring),
                    report=Report(state=state, events=((2, event),), delivered=1),
                ),
                Decided(config=ring),
                Fetch(start=0, end=4, ids=((1, 2),)),
                Probe(stamp=0.25 * i, echo=bool(i % 2)),
                Latencies(instance=i, plan=(i, 2), rate=30.5, row=((1, 0.005), (2, 0.007))),
                Delays(instance=i, epoch=3, row=((1, 0.0), (2, 0.011), (3, 0.002))),
            ):
                out.extend(c.encode(rng.randrange(2**64), message))
    return out


def _mutations(rng: random.Random, corpus: list[bytes], n: int) -> list[bytes]:
    inputs = []
    for _ in range(n):
        base = bytearray(rng.choice(corpus))
        choice = rng.random()
        if choice < 0.1:
            inputs.append(rng.randbytes(rng.randrange(0, 200)))
        elif choice < 0.4:
            inputs.append(bytes(base[: rng.randrange(len(base))]))
        elif choice < 0.8:
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(base))
                base[pos] ^= 1 << rng.randrange(8)
            inputs.append(bytes(base))
        else:
            pos = rng.randrange(24, len(base)) if len(base) > 24 else 0
            base[pos : pos + 4] = b"\xff\xff\xff\xff"
            inputs.append(bytes(base))
    return inputs


@pytest.mark.parametrize("sealed", [False, True])
def test_fuzz_raises_only_the_library_error(sealed: bool) -> None:
    corpus = _corpus()
    for frame in corpus:
        assert codec(True).receive(frame) is not None or codec(False).receive(frame) is not None
    rng = random.Random(11 + sealed)
    c = codec(sealed)
    for data in _mutations(rng, corpus, 4000):
        # receive() catches RemoteProtocolError only; anything else fails here.
        c.receive(data)
    assert sum(c.rejected.values()) > 3000
    assert "truncated" in c.rejected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 2e9])
def test_optimistic_frames_refuse_floats_out_of_range(value: float) -> None:
    c = codec()
    with pytest.raises(LocalProtocolError):
        c.encode(1, Probe(stamp=value))
    good = c.encode(1, Delays(instance=1, epoch=1, row=((2, 0.5),)))[0]
    bad = good[:-8] + struct.pack(">d", value)
    assert c.receive(bad) is None
    assert c.rejected.get("bad-value") == 1


def test_batches_and_assignments_travel_as_runs() -> None:
    c = codec()
    ids = tuple((source, seq) for source in (1, 2, 3) for seq in range(100, 400))
    state = TokenState(
        instance=1,
        hop=2,
        next_seq=900,
        low=0,
        stable=0,
        batches=(Batch(first=0, ids=ids, holders=frozenset({1})),),
    )
    assigned = tuple((i, eid) for i, eid in enumerate(ids))
    (frame,) = c.encode(1, Order(state=state, assigned=assigned))
    # 900 ids and 900 assignments, three runs each: a few hundred bytes.
    assert len(frame) < 400
    assert c.decode(frame).message == Order(state=state, assigned=assigned)


def test_a_batch_carried_again_is_expanded_once() -> None:
    # A token carries each batch of its window on every hop until it is
    # stable: the second decoding returns the very tuple of the first (what
    # OrderBook.learn_batches recognises by identity), equal to the original.
    c = codec()
    ids = tuple((source, seq) for source in (1, 2) for seq in range(10, 60))
    batch = Batch(first=7, ids=ids, holders=frozenset({1}))
    state = TokenState(instance=1, hop=2, next_seq=107, low=0, stable=0, batches=(batch,))
    first = c.decode(c.encode(1, Token(state=state))[0]).message
    again = c.decode(c.encode(1, Token(state=attrs.evolve(state, hop=3)))[0]).message
    assert first.state.batches[0].ids == ids
    assert again.state.batches[0].ids is first.state.batches[0].ids


def test_a_refused_run_is_refused_every_time() -> None:
    # Remembering expansions must not remember a refusal as an answer.
    from epto.wire._frames import pack_header

    c = codec()
    kind = token_ring_registry().by_type(Token)
    body = struct.pack(">QQQQQQ", 1, 1, 1, 0, 0, 0) + struct.pack(">I", 1)
    body += struct.pack(">Q", 0) + struct.pack(">I", 1) + struct.pack(">QQI", 9, 5, 0)
    body += struct.pack(">I", 0) + struct.pack(">I", 0)
    for _ in range(3):
        assert c.receive(pack_header(kind.code, 1, GROUP) + body) is None
    assert c.rejected["bad-value"] == 3


@pytest.mark.parametrize(
    ("first", "count", "fault"),
    [(5, 0, "bad-value"), (2**64 - 2, 3, "bad-value"), (0, 5000, "too-many")],
)
def test_hostile_runs_are_refused(first: int, count: int, fault: str) -> None:
    import struct

    from epto.wire._frames import pack_header

    c = codec()
    kind = token_ring_registry().by_type(Token)
    body = struct.pack(">QQQQQQ", 1, 1, 1, 0, 0, 0) + struct.pack(">I", 1)
    body += struct.pack(">Q", 0) + struct.pack(">I", 1) + struct.pack(">QQI", 9, first, count)
    body += struct.pack(">I", 0) + struct.pack(">I", 0)
    assert c.receive(pack_header(kind.code, 1, GROUP) + body) is None
    assert c.rejected[fault] == 1


@pytest.mark.parametrize(
    ("entry", "fault"),
    [
        (struct.pack(">QQQBI", 1, 0, 0, 7, 0) + b"1234567", "bad-signature-size"),
        (struct.pack(">QQQBI", 1, 0, 0, 64, 0) + b"s" * 10, "truncated"),
        (struct.pack(">QQQBI", 1, 0, 0, 0, 1000) + b"abc", "truncated"),
        (struct.pack(">QQQBI", 1, 0, 0, 0, LIMITS.max_payload_size + 1), "oversized"),
    ],
)
def test_hostile_batch_events_are_refused(entry: bytes, fault: str) -> None:
    from epto.wire._frames import pack_header

    c = codec()
    kind = token_ring_registry().by_type(DataBatch)
    good = struct.pack(">QQQBI", 2, 5, 0, 0, 4) + b"incr"
    body = struct.pack(">I", 2) + good + entry
    assert c.receive(pack_header(kind.code, 1, GROUP) + body) is None
    assert c.rejected[fault] == 1
    # The same batch with two good events, one of them signed, is accepted.
    signed = struct.pack(">QQQBI", 3, 0, 0, 64, 1) + b"s" * 64 + b"x"
    frame = c.receive(pack_header(kind.code, 1, GROUP) + struct.pack(">I", 2) + good + signed)
    assert frame is not None
    assert frame.message == DataBatch(
        events=(
            Event(source=2, seq=5, ts=0, payload=b"incr"),
            Event(source=3, seq=0, ts=0, payload=b"x", signature=b"s" * 64),
        )
    )
