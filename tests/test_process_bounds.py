"""Bounds on what a peer claims (docs/epto.md, *Bounds on what a peer claims*):
one hostile copy cannot move a process's clock to the end of its range, nor
make ``broadcast`` or the encoding of the next ball fail; out-of-range values
are refused where they enter the process and counted by fault."""

from __future__ import annotations

import random

import pytest

import epto
import epto.epidemic
import epto.wire
from epto import keys

U64_MAX = 2**64 - 1


def _process(pid: int = 1, *, signer: object = None, **fields: object) -> epto.epidemic.Process:
    config = epto.Config(fanout=2, ttl=3, **fields)  # type: ignore[arg-type]
    return epto.epidemic.Process(
        pid,
        config,
        peers=epto.epidemic.FullView(pid, [1, 2, 3]),
        rng=random.Random(pid),
        now=0.0,
        signer=signer,  # type: ignore[arg-type]
    )


def _event(source: int, seq: int, ts: int, payload: bytes = b"x") -> epto.Event:
    return epto.Event(source=source, seq=seq, ts=ts, payload=payload)


def _run_rounds(proc: epto.epidemic.Process, start: float, rounds: int) -> float:
    now = start
    for _ in range(rounds):
        now = proc.get_timer()
        proc.handle_timer(now)
    return now


def _encode_everything(proc: epto.epidemic.Process) -> int:
    codec = epto.wire.FrameCodec(group=0)
    frames = 0
    for dest, ball in proc.messages_to_send():
        frames += len(codec.encode(proc.pid, ball, to=dest))
    return frames


def test_a_top_timestamp_is_refused_and_the_process_keeps_working() -> None:
    proc = _process()
    hostile = _event(9, 0, U64_MAX)
    genuine = _event(2, 0, 1, b"genuine")
    proc.receive(9, {hostile.id: (hostile, 1), genuine.id: (genuine, 1)}, 0.0)
    eid = proc.broadcast(b"mine", 0.0)  # the old code accepted the clock at 2**64 - 1 ...
    now = _run_rounds(proc, 0.0, 1)
    assert _encode_everything(proc) > 0  # ... and failed here, in the driver's round loop
    now = _run_rounds(proc, now, 6)
    delivered = [d.event.id for d in proc.deliveries()]
    assert genuine.id in delivered and eid in delivered
    assert hostile.id not in delivered
    stats = proc.statistics()
    assert stats.rejected == {"ts-ahead": 1}
    assert stats.clock < 2**33


def test_a_signed_process_broadcasts_after_a_top_timestamp() -> None:
    pytest.importorskip("cryptography")
    private, _public = keys.generate_signing_key()
    proc = _process(signer=epto.EventSigner(1, private).signature)
    hostile = _event(9, 0, U64_MAX)
    proc.receive(9, {hostile.id: (hostile, 1)}, 0.0)
    proc.broadcast(b"signed", 0.0)  # the old code raised struct.error here
    _run_rounds(proc, 0.0, 1)
    assert _encode_everything(proc) > 0
    assert proc.statistics().rejected == {"ts-ahead": 1}


def test_a_top_timestamp_in_a_decoded_frame_is_refused() -> None:
    """The same copy, as bytes an outsider sends, through the codec and a Node."""
    codec = epto.wire.FrameCodec(group=0)
    hostile = _event(9, 0, U64_MAX)
    (frame,) = codec.encode(9, {hostile.id: (hostile, 1)})
    node = epto.epidemic.Node(
        1, epto.Config(fanout=2, ttl=3), rng=random.Random(1), now=0.0, members=[1, 2]
    )
    decoded = codec.decode(frame)
    node.receive(decoded.sender, decoded.message, 0.0)
    node.broadcast(b"after", 0.0)
    node.handle_timer(node.get_timer())
    for dest, message in node.messages_to_send():
        assert codec.encode(1, message, to=dest)
    assert node.statistics().process.rejected == {"ts-ahead": 1}


def test_the_logical_clock_moves_at_most_one_step_a_round() -> None:
    step = 1000
    proc = _process(max_clock_step=step)
    now = 0.0
    for k in range(5):
        assert proc.ts_ceiling(now) == k * step + 2 * step
        hostile = _event(9, k, U64_MAX)
        edge = _event(9, 100 + k, proc.ts_ceiling(now))  # accepted, moves the clock one step
        proc.receive(9, {hostile.id: (hostile, 1), edge.id: (edge, 1)}, now)
        assert proc.clock == (k + 1) * step
        now = _run_rounds(proc, now, 1)
    assert proc.statistics().rejected == {"ts-ahead": 5}


def test_a_process_far_behind_the_group_catches_up() -> None:
    """A new process refuses events far ahead of its clock, moves its clock one
    step a round toward them, and accepts them once within two steps."""
    step = 1000
    proc = _process(max_clock_step=step)
    ahead = _event(2, 0, 3500)
    now = 0.0
    accepted_in = None
    for r in range(6):
        proc.receive(2, {ahead.id: (ahead, 1)}, now)
        if not proc.statistics().rejected.get("ts-ahead", 0) > r:
            accepted_in = r
            break
        now = _run_rounds(proc, now, 1)
    assert accepted_in == 2  # ceilings 2000, 3000, then 4000
    assert proc.clock == 3000  # one step above the clock at the round's start
    now = _run_rounds(proc, now, 1)
    assert proc.clock == ahead.ts  # the rest at the next round
    assert proc.broadcast(b"after", now) == (1, 0)
    _run_rounds(proc, now, 1)  # the round that sends it stamps it
    assert proc.clock > ahead.ts


def test_a_process_pushed_to_the_cap_is_not_refused_by_its_peers() -> None:
    """A peer that makes one process's clock jump as far as it can (an
    outsider's top timestamp) does not make that process's next events too far
    ahead for the others: the cap is one step, the ceiling two."""
    step = 1000
    victim, peer = _process(1, max_clock_step=step), _process(2, max_clock_step=step)
    hostile = _event(9, 0, U64_MAX)
    victim.receive(9, {hostile.id: (hostile, 1)}, 0.0)
    for k in range(10):
        victim.broadcast(b"%d" % k, 0.0)
    victim.handle_timer(victim.get_timer())  # stamps and sends them
    assert victim.clock == step + 10
    for _dest, ball in victim.messages_to_send():
        peer.receive(1, ball, 0.0)
    assert peer.statistics().rejected == {}
    assert peer.clock == step


def test_the_global_clock_refuses_timestamps_beyond_the_skew() -> None:
    proc = _process(clock="global", clock_resolution=1000.0, max_clock_skew=5.0)
    now = 100.0
    within = _event(2, 0, (100 + 2 * 5) * 1000)
    beyond = _event(3, 0, (100 + 2 * 5) * 1000 + 1)
    proc.receive(2, {within.id: (within, 1), beyond.id: (beyond, 1)}, now)
    assert proc.statistics().rejected == {"ts-ahead": 1}
    assert proc.ts_ceiling(now) == 110_000
    assert proc.clock == proc.clock_cap(now) == 105_000  # moved one skew ahead at most
    honest = _event(4, 0, 104_000)  # a member 4 units ahead: accepted, followed
    later = 101.0
    proc.receive(4, {honest.id: (honest, 1)}, later)
    assert proc.clock == 105_000 and proc.statistics().rejected == {"ts-ahead": 1}


@pytest.mark.parametrize(
    ("key", "entry", "fault"),
    [
        ((2, 0), (_event(2, 0, 5), -1), "bad-ttl"),
        ((2, 0), (_event(2, 0, 5), 0x10000), "bad-ttl"),
        ((2, 0), (_event(2, 0, 5), 1.5), "bad-ttl"),
        ((2, 2**64), (_event(2, 2**64, 5), 1), "bad-event"),
        ((-1, 0), (_event(-1, 0, 5), 1), "bad-event"),
        ((2, 0), (_event(2, 0, -5), 1), "bad-event"),
        ((2, 1), (_event(2, 0, 5), 1), "bad-event"),
        ((2, 0), ("not an event", 1), "bad-event"),
        ((2, 0), (_event(2, 0, 5), 1, "extra"), "bad-event"),
        ((2, 0), 17, "bad-event"),
    ],
)
def test_out_of_range_values_are_refused_and_counted(
    key: object, entry: object, fault: str
) -> None:
    proc = _process()
    good = _event(3, 0, 4)
    proc.receive(2, {key: entry, good.id: (good, 1)}, 0.0)  # type: ignore[dict-item]
    assert proc.statistics().rejected == {fault: 1}
    now = _run_rounds(proc, 0.0, 1)
    assert _encode_everything(proc) > 0  # what is relayed still encodes
    _run_rounds(proc, now, 5)
    assert [d.event.id for d in proc.deliveries()] == [good.id]


def test_a_layered_ball_out_of_bounds_is_taken_entry_by_entry() -> None:
    hostile = _event(9, 0, U64_MAX)
    genuine = _event(2, 0, 1)
    ball = epto.wire.LayeredBall({hostile.id: (hostile, 1), genuine.id: (genuine, 2)})
    proc = _process()
    proc.receive(9, ball, 0.0)
    assert proc.statistics().rejected == {"ts-ahead": 1}
    _run_rounds(proc, 0.0, 6)
    assert [d.event.id for d in proc.deliveries()] == [genuine.id]


def test_a_broadcast_beyond_64_bits_raises_to_the_caller_only() -> None:
    proc = _process(clock="global", clock_resolution=1.0)
    with pytest.raises(epto.LocalProtocolError, match="64 bits"):
        proc.broadcast(b"too late", float(2**65))
    assert proc.statistics().broadcasts == 0 and proc.clock == 0
    assert proc.broadcast(b"fine", 10.0) == (1, 0)
