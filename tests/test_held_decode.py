"""Decoding copies of events the receiver already holds (``FrameCodec.decode(held=)``).

A copy whose id the receiver holds, with the same content, comes back as the
held ``Event`` object (nothing built, nothing verified again); a copy of a
held id with another content is dropped and counted, so a hostile copy cannot
change what is delivered; every bound is checked as without ``held``, and a
signed group still verifies every event it does not hold.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epto
import epto.epidemic
from epto import Event, EventId, Limits, RemoteProtocolError
from epto.endpoint import EptoEndpoint, NodeConfig
from epto.wire import FrameCodec
from epto.wire._frame_bodies import KIND_BALL
from epto.wire._frames import pack_header

GROUP = 42
_ENTRY = struct.Struct(">QQQHBI")
SETTINGS = settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Entry = tuple[Event, int]


def frame_of(entries: list[Entry], sender: int = 1) -> bytes:
    """A ball frame with ``entries`` in this order, repeated ids included
    (``FrameCodec.encode`` takes a mapping and cannot repeat one)."""
    parts = [pack_header(KIND_BALL, sender, GROUP), struct.pack(">H", len(entries))]
    for event, ttl in entries:
        parts.append(
            _ENTRY.pack(
                event.source, event.seq, event.ts, ttl, len(event.signature), len(event.payload)
            )
        )
        parts += [event.signature, event.payload]
    return b"".join(parts)


def ev(
    source: int, seq: int, payload: bytes = b"p", ts: int | None = None, sig: bytes = b""
) -> Event:
    return Event(
        source=source,
        seq=seq,
        ts=seq * 10 + source if ts is None else ts,
        payload=payload,
        signature=sig,
    )


def same_content(a: Event, b: Event) -> bool:
    return a.ts == b.ts and a.payload == b.payload and a.signature == b.signature


def test_copies_of_held_events_come_back_as_the_held_objects() -> None:
    events = [ev(s, q, b"x%d" % q) for s in range(2) for q in range(3)]
    # Equal, not identical: the decoder must hand over the held objects.
    held = {e.id: ev(e.source, e.seq, e.payload) for e in events[:4]}
    codec = FrameCodec(group=GROUP)
    frame = codec.decode(frame_of([(e, 7) for e in events]), held=held.get)
    assert frame.message == {e.id: (e, 7) for e in events}
    for e in events:
        got, ttl = frame.message[e.id]
        assert ttl == 7
        assert (got is held[e.id]) if e.id in held else (got is not e and got == e)
    assert codec.copies_reused == 4 and codec.copies_conflicting == 0
    # Without held, nothing is reused.
    plain = codec.decode(frame_of([(e, 7) for e in events]))
    assert all(plain.message[e.id][0] is not held.get(e.id) for e in events)
    assert codec.copies_reused == 4


@pytest.mark.parametrize(
    "copy",
    [
        ev(0, 1, b"forged"),  # another payload
        ev(0, 1, b"pq"),  # a longer one sharing the held payload's start
        ev(0, 1, b""),  # a shorter one
        ev(0, 1, b"p", ts=999),  # another timestamp
        ev(0, 1, b"p", sig=b"s" * 64),  # a signature the held event lacks
    ],
    ids=["payload", "longer", "shorter", "ts", "signature"],
)
def test_a_copy_of_a_held_id_with_another_content_is_dropped_and_counted(copy: Event) -> None:
    held_event = ev(0, 1, b"p")
    other = ev(2, 0)
    codec = FrameCodec(group=GROUP)
    frame = codec.decode(frame_of([(copy, 5), (other, 1)]), held={held_event.id: held_event}.get)
    assert frame.message == {other.id: (other, 1)}
    assert codec.copies_conflicting == 1 and codec.copies_reused == 0


def test_a_signed_copy_with_another_signature_conflicts() -> None:
    held_event = ev(0, 1, b"p", sig=b"s" * 64)
    codec = FrameCodec(group=GROUP)
    for copy in (ev(0, 1, b"p", sig=b"t" * 64), ev(0, 1, b"p")):
        frame = codec.decode(frame_of([(copy, 5)]), held={held_event.id: held_event}.get)
        assert frame.message == {}
    frame = codec.decode(frame_of([(held_event, 5)]), held={held_event.id: held_event}.get)
    assert frame.message[held_event.id][0] is held_event
    assert codec.copies_conflicting == 2 and codec.copies_reused == 1


@pytest.mark.parametrize(
    "pair",
    [
        ("held", "held"),
        ("held", "conflict"),
        ("conflict", "held"),
        ("conflict", "conflict"),
        ("fresh", "fresh"),
    ],
)
def test_an_id_twice_in_one_frame_is_a_duplicate_whichever_way_it_decodes(
    pair: tuple[str, str],
) -> None:
    held_event = ev(0, 1, b"p")
    fresh = ev(3, 3)
    versions = {"held": held_event, "conflict": ev(0, 1, b"q"), "fresh": fresh}
    frame = frame_of([(versions[pair[0]], 1), (ev(1, 1), 1), (versions[pair[1]], 2)])
    codec = FrameCodec(group=GROUP)
    for held in (None, {held_event.id: held_event}.get):
        with pytest.raises(RemoteProtocolError) as info:
            codec.decode(frame, held=held)
        assert info.value.fault == "duplicate"


def test_bounds_are_checked_on_held_copies_as_on_any() -> None:
    held_event = ev(0, 1, b"p")
    good = frame_of([(held_event, 1)])
    bad_sig = bytearray(good)
    bad_sig[24 + 2 + 26] = 10  # siglen of the first entry: neither 0 nor 64
    oversized = frame_of([(ev(0, 1, b"p" * 200), 1)])
    cases = {
        "truncated": good[:-1],
        "bad-signature-size": bytes(bad_sig),
        "oversized": oversized,
    }
    limits = Limits(max_payload_size=100)
    for fault, data in cases.items():
        for held in (None, {held_event.id: held_event}.get):
            codec = FrameCodec(group=GROUP, limits=limits)
            with pytest.raises(RemoteProtocolError) as info:
                codec.decode(data, held=held)
            assert info.value.fault == fault
            assert codec.receive(data, held=held) is None
            assert codec.rejected == {fault: 1}


# -- signed groups ----------------------------------------------------------------------------


def test_a_signed_group_verifies_every_event_it_does_not_hold() -> None:
    pytest.importorskip("cryptography")
    signers = {pid: epto.EventSigner(pid, bytes([pid + 1]) * 32) for pid in range(3)}
    roster = {pid: s.public_key for pid, s in signers.items()}
    verifier = epto.SignatureVerifier(roster)
    events = [signers[s].sign(ev(s, q)) for s in range(3) for q in range(2)]
    bad = Event(source=1, seq=9, ts=95, payload=b"p", signature=events[0].signature)
    held = {e.id: e for e in events[:2]}
    # The held events were verified when they arrived.
    for e in held.values():
        assert verifier.check(e) is None
    before = verifier.statistics()
    codec = FrameCodec(group=GROUP, ball_filter=verifier.filter_ball)
    frame = codec.decode(frame_of([(e, 3) for e in [*events, bad]]), held=held.get)
    after = verifier.statistics()
    assert set(frame.message) == {e.id for e in events}
    assert all(frame.message[eid][0] is e for eid, e in held.items())
    # Four new events verified and passed, the forged one verified and refused;
    # the two held ones neither verified nor looked up again.
    assert after.checks - before.checks == 5
    assert after.passed - before.passed == 4
    assert after.cache_hits == before.cache_hits
    assert after.rejected == {"bad-signature": 1}
    assert codec.copies_reused == 2


def test_a_signed_groups_altered_copy_of_a_held_event_is_dropped_and_counted() -> None:
    pytest.importorskip("cryptography")
    signer = epto.EventSigner(0, bytes(range(32)))
    verifier = epto.SignatureVerifier({0: signer.public_key})
    genuine = signer.sign(ev(0, 1, b"genuine"))
    assert verifier.check(genuine) is None
    altered = Event(source=0, seq=1, ts=genuine.ts, payload=b"altered", signature=genuine.signature)
    equivocated = signer.sign(ev(0, 1, b"other", ts=genuine.ts))
    codec = FrameCodec(group=GROUP, ball_filter=verifier.filter_ball)
    held = {genuine.id: genuine}.get
    assert codec.decode(frame_of([(altered, 4)]), held=held).message == {}
    assert codec.decode(frame_of([(equivocated, 4)]), held=held).message == {}
    # The verifier counted them as it would have without held.
    assert verifier.statistics().rejected == {"altered": 1, "equivocation": 1}
    assert codec.copies_conflicting == 2


# -- a tampered duplicate does not change the delivery ----------------------------------------

PIDS = (1, 2, 3)
PROTOCOL = epto.Config(fanout=2, ttl=4, round_interval=0.01)


class Others:
    """Every other member (a full view of three)."""

    def __init__(self, me: int) -> None:
        self.others = [pid for pid in PIDS if pid != me]

    def sample(self, k: int, rng: random.Random) -> list[int]:
        return self.others[:k]


def forged_copy(genuine: Event) -> dict[EventId, Entry]:
    """A copy of ``genuine`` with another payload, at the highest ttl still
    relayed: the copy that replaces the held one when decoded in full."""
    forged = Event(source=genuine.source, seq=genuine.seq, ts=genuine.ts, payload=b"forged")
    return {genuine.id: (forged, PROTOCOL.ttl - 1)}


@pytest.mark.parametrize("use_held", [True, False])
def test_a_tampered_duplicate_does_not_change_what_is_delivered(use_held: bool) -> None:
    """Three processes exchanging frames; process 2 is handed a forged copy
    of an event it holds in two rounds. Decoded with ``held``, the copy is
    dropped and every process delivers the genuine payload; decoded in full
    (the control, which shows the test can fail) it replaces the genuine one
    at process 2."""
    processes = {
        pid: epto.epidemic.Process(
            pid, PROTOCOL, peers=Others(pid), rng=random.Random(pid), now=0.0
        )
        for pid in PIDS
    }
    codecs = {pid: FrameCodec(group=GROUP, me=pid) for pid in PIDS}
    eid = processes[1].broadcast(b"genuine", 0.0)
    delivered: dict[int, list[bytes]] = {pid: [] for pid in PIDS}

    def receive(pid: int, sender: int, data: bytes, now: float) -> None:
        process = processes[pid]
        held = process.held_event if use_held else None
        frame = codecs[pid].decode(data, now, held=held)
        process.receive(sender, frame.message, now)

    for r in range(14):
        now = 0.01 * (r + 1)
        for process in processes.values():
            process.handle_timer(now)
        for sender, process in processes.items():
            for dest, ball in process.messages_to_send():
                for data in codecs[sender].encode(sender, ball):
                    receive(dest, sender, data, now)
        if r in (1, 2):
            genuine = processes[2].held_event(eid)
            assert genuine is not None and genuine.payload == b"genuine"
            for data in FrameCodec(group=GROUP).encode(3, forged_copy(genuine)):
                receive(2, 3, data, now)
        for pid, process in processes.items():
            delivered[pid] += [d.event.payload for d in process.deliveries()]
    if use_held:
        assert delivered == {pid: [b"genuine"] for pid in PIDS}
        assert codecs[2].copies_conflicting == 2
    else:
        assert delivered[2] == [b"forged"]


def run_honest(use_held: bool, loss: float) -> tuple[dict[int, list[Event]], int]:
    """Three processes, 30 broadcasts each over 5 rounds, frames lost at
    random (the same ones whatever ``use_held``): every delivery, and the
    copies reused."""
    processes = {
        pid: epto.epidemic.Process(
            pid, PROTOCOL, peers=Others(pid), rng=random.Random(pid), now=0.0
        )
        for pid in PIDS
    }
    codecs = {pid: FrameCodec(group=GROUP, me=pid) for pid in PIDS}
    lose = random.Random(7)
    delivered: dict[int, list[Event]] = {pid: [] for pid in PIDS}
    for r in range(20):
        now = 0.01 * (r + 1)
        if r < 5:
            for pid, process in processes.items():
                for k in range(6):
                    process.broadcast(b"%d-%d-%d" % (pid, r, k), now)
        for process in processes.values():
            process.handle_timer(now)
        for sender, process in processes.items():
            for dest, ball in process.messages_to_send():
                for data in codecs[sender].encode(sender, ball):
                    if lose.random() < loss:
                        continue
                    target = processes[dest]
                    held = target.held_event if use_held else None
                    target.receive(sender, codecs[dest].decode(data, now, held=held).message, now)
        for pid, process in processes.items():
            delivered[pid] += [d.event for d in process.deliveries()]
    return delivered, sum(codec.copies_reused for codec in codecs.values())


@pytest.mark.parametrize("loss", [0.0, 0.3])
def test_in_an_honest_run_held_decoding_changes_no_delivery(loss: float) -> None:
    with_held, reused = run_honest(True, loss)
    without, none = run_honest(False, loss)
    assert with_held == without
    assert len(with_held[1]) > 0 and reused > len(with_held[1]) and none == 0


def test_the_endpoint_drops_a_tampered_duplicate_and_counts_it() -> None:
    members = {pid: f"10.0.0.{pid}:9000" for pid in PIDS}
    address = {a: pid for pid, a in members.items()}
    nodes = {
        pid: EptoEndpoint(
            NodeConfig(pid=pid, members=members, seed=pid, epto=PROTOCOL),
            now=0.0,
            rng=random.Random(pid),
        )
        for pid in PIDS
    }
    eid = nodes[1].broadcast(b"genuine", 0.0)
    spy = FrameCodec(group=0)  # NodeConfig's default group, unsealed
    genuine: Event | None = None
    injected = 0
    delivered: dict[int, list[bytes]] = {pid: [] for pid in PIDS}
    for r in range(14):
        now = 0.01 * (r + 1)
        for node in nodes.values():
            node.handle_timer(now)
        for node in nodes.values():
            for transmit in node.frames_to_send(now):
                if genuine is None:
                    genuine = spy.decode(transmit.data).message[eid][0]
                nodes[address[transmit.address]].receive(transmit.data, now)
        if r in (1, 2):
            assert genuine is not None
            for data in spy.encode(3, forged_copy(genuine)):
                assert nodes[2].receive(data, now)
                injected += 1
        for pid, node in nodes.items():
            while (delivery := node.next_delivery()) is not None:
                delivered[pid].append(delivery.event.payload)
    assert delivered == {pid: [b"genuine"] for pid in PIDS}
    assert nodes[2].statistics().rejected == {"conflicting-copy": injected}


# -- fuzzing: well-formed frames with hostile values -------------------------------------------

ids = st.tuples(st.integers(0, 2), st.integers(0, 3))
contents = st.tuples(
    st.integers(0, 3),  # ts offset
    st.sampled_from([b"", b"a", b"b", b"ab", b"ba"]),
    st.sampled_from([b"", b"s" * 64, b"t" * 64]),
)


def build(eid: EventId, content: tuple[int, bytes, bytes]) -> Event:
    ts, payload, sig = content
    return Event(source=eid[0], seq=eid[1], ts=ts, payload=payload, signature=sig)


@SETTINGS
@given(
    entries=st.lists(st.tuples(ids, contents, st.integers(0, 0xFFFF)), max_size=12),
    held_entries=st.dictionaries(ids, contents, max_size=12),
    drop=st.sets(ids),
)
def test_held_decoding_equals_full_decoding_but_for_held_ids(
    entries: list[tuple[EventId, tuple[int, bytes, bytes], int]],
    held_entries: dict[EventId, tuple[int, bytes, bytes]],
    drop: set[EventId],
) -> None:
    held = {eid: build(eid, content) for eid, content in held_entries.items()}
    data = frame_of([(build(eid, content), ttl) for eid, content, ttl in entries])
    shown: list[set[EventId]] = []

    def ball_filter(ball: dict[EventId, Entry], now: float) -> dict[EventId, Entry]:
        shown.append(set(ball))
        return {eid: entry for eid, entry in ball.items() if eid not in drop}

    full_codec = FrameCodec(group=GROUP, ball_filter=ball_filter)
    codec = FrameCodec(group=GROUP, ball_filter=ball_filter)
    try:
        full = full_codec.decode(data).message
    except RemoteProtocolError as exc:
        with pytest.raises(RemoteProtocolError) as info:
            codec.decode(data, held=held.get)
        assert info.value.fault == exc.fault == "duplicate"
        return
    shown.clear()
    got = codec.decode(data, held=held.get).message
    unfiltered = {eid: (build(eid, content), ttl) for eid, content, ttl in entries}
    conflicting = {
        eid
        for eid, (event, _ttl) in unfiltered.items()
        if eid in held and not same_content(event, held[eid])
    }
    reused = {eid for eid in unfiltered if eid in held and eid not in conflicting}
    expected = {eid: entry for eid, entry in full.items() if eid not in conflicting}
    for eid in reused:
        expected[eid] = (held[eid], unfiltered[eid][1])
    assert got == expected
    for eid in reused:
        assert got[eid][0] is held[eid]
    assert codec.copies_conflicting == len(conflicting)
    assert codec.copies_reused == len(reused)
    # The filter saw every copy but the reused ones (conflicting ones apart).
    assert set().union(*shown) == set(unfiltered) - reused
    assert all(not (part & conflicting) or part <= conflicting for part in shown)


@SETTINGS
@given(data=st.binary(max_size=400), cut=st.integers(0, 200))
def test_held_decoding_of_garbage_fails_as_full_decoding(data: bytes, cut: int) -> None:
    held_event = ev(0, 1, b"p")
    base = frame_of([(held_event, 1), (ev(1, 0), 2)])
    for frame in (pack_header(KIND_BALL, 1, GROUP) + data, base[:cut] + data):
        outcomes = []
        for held in (None, {held_event.id: held_event}.get):
            try:
                outcomes.append(FrameCodec(group=GROUP).decode(frame, held=held).message)
            except RemoteProtocolError as exc:
                outcomes.append(exc.fault)
        if isinstance(outcomes[0], str):
            assert outcomes[1] == outcomes[0]
        else:
            assert isinstance(outcomes[1], dict)
