"""Incarnations: a member started again under its own id never reuses an
event id, resumes the order after what it delivered, and a later start of
itself stops an earlier one (epto/_incarnation.py, docs/node.md *Restart*)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from epto.transports._identity import claim_member

import epto
from epto import Config, Event
from epto._incarnation import (
    COUNT_BITS,
    INCARNATION_EPOCH,
    MAX_INCARNATION,
    first_seq,
    incarnation_of,
    next_incarnation,
)
from epto.endpoint import EptoEndpoint, NodeConfig
from epto.epidemic import Process
from epto.epidemic._sampler import FullView

CONFIG = Config(fanout=2, ttl=3, round_interval=1.0)


def test_next_incarnation_grows_and_follows_the_wall_clock() -> None:
    wall = INCARNATION_EPOCH + 1000.7
    assert next_incarnation(None, wall) == 1000
    assert next_incarnation(1000, wall) == 1001  # a restart within the same second
    assert next_incarnation(5, wall) == 1000  # a directory from long ago
    assert next_incarnation(None, 0.0) == 1  # a clock before the epoch still draws >= 1
    assert next_incarnation(MAX_INCARNATION - 1, wall) == MAX_INCARNATION


def test_sequence_numbers_carry_the_incarnation() -> None:
    assert first_seq(0) == 0
    assert first_seq(7) == 7 << COUNT_BITS
    assert incarnation_of(first_seq(7) + 12345) == 7
    assert first_seq(MAX_INCARNATION) < 2**63  # a signed 64-bit column holds every seq
    with pytest.raises(epto.LocalProtocolError):
        first_seq(MAX_INCARNATION + 1)
    with pytest.raises(epto.ConfigurationError):
        NodeConfig(pid=1, incarnation=-1)


def _process(pid: int, incarnation: int) -> Process:
    return Process(
        pid,
        CONFIG,
        peers=FullView(pid, [1, 2]),
        rng=random.Random(pid),
        now=0.0,
        incarnation=incarnation,
    )


def test_a_later_incarnation_numbers_its_events_above_every_earlier_one() -> None:
    first = _process(1, 3)
    assert first.broadcast(b"a", 0.0) == (1, 3 << 32)
    assert first.broadcast(b"b", 0.0) == (1, (3 << 32) + 1)
    again = _process(1, 4)
    assert again.broadcast(b"c", 0.0) == (1, 4 << 32)


def _ball(*events: Event, ttl: int = 0) -> dict[tuple[int, int], tuple[Event, int]]:
    return {e.id: (e, ttl) for e in events}


def test_resume_after_delivers_only_the_order_past_the_earlier_start() -> None:
    proc = _process(2, 1)
    old = Event(source=1, seq=0, ts=5, payload=b"delivered before the crash")
    new = Event(source=1, seq=1, ts=9, payload=b"new")
    proc.receive(1, _ball(old), now=0.0)  # a copy that was in flight
    proc.resume_after(5)
    proc.receive(1, _ball(old, new), now=0.0)
    for r in range(1, 10):
        proc.handle_timer(float(r))
    delivered = [d.event.payload for d in proc.deliveries()]
    assert delivered == [b"new"]
    # Its own events come after what it delivered (stamped by the round
    # that sends them).
    eid = proc.broadcast(b"mine", 10.0)
    proc.handle_timer(proc.get_timer())
    assert proc.held_event(eid) is not None
    assert proc.held_event(eid).ts > 9  # type: ignore[union-attr]


def _endpoint(pid: int, incarnation: int) -> EptoEndpoint:
    config = NodeConfig(
        pid=pid,
        members={1: "a", 2: "b"},
        epto=CONFIG,
        incarnation=incarnation,
        seed=pid,
    )
    return EptoEndpoint(config, 0.0, rng=random.Random(pid))


def _deliver(endpoint: EptoEndpoint, events: list[Event], start: float = 0.0) -> None:
    """Feed ``events`` to ``endpoint`` as a ball framed by member 1, then run
    rounds until they are delivered."""
    sender = NodeConfig(pid=1, members={1: "a", 2: "b"}, epto=CONFIG)
    codec = sender.codec(start, random.Random(1))
    for frame in codec.encode(1, _ball(*events), to=endpoint.pid):
        assert endpoint.receive(frame, start)
    for r in range(1, 10):
        endpoint.handle_timer(start + r)
    while endpoint.next_delivery() is not None:
        pass


def test_holes_are_counted_within_one_incarnation_of_a_source() -> None:
    endpoint = _endpoint(2, 1)
    events = [
        Event(source=1, seq=first_seq(5), ts=1, payload=b""),
        Event(source=1, seq=first_seq(5) + 2, ts=2, payload=b""),  # one skipped
        Event(source=1, seq=first_seq(6), ts=3, payload=b""),  # a restart: nothing skipped
        Event(source=1, seq=first_seq(7) + 1, ts=4, payload=b""),  # one of the next start's
    ]
    _deliver(endpoint, events)
    stats = endpoint.statistics()
    assert stats.delivered == 4
    assert stats.holes_detected == 2


def test_an_event_of_a_later_start_of_itself_stops_the_endpoint() -> None:
    endpoint = _endpoint(2, 3)
    _deliver(endpoint, [Event(source=2, seq=first_seq(2), ts=1, payload=b"earlier start")])
    assert endpoint.stopped is None
    _deliver(endpoint, [Event(source=2, seq=first_seq(4), ts=2, payload=b"later start")], 10.0)
    assert endpoint.engine.superseded_by == 4
    assert endpoint.stopped is not None and "incarnation 4" in endpoint.stopped


def test_an_endpoint_without_a_fixed_incarnation_draws_it_from_now() -> None:
    config = NodeConfig(pid=1, members={1: "a"}, epto=CONFIG)
    endpoint = EptoEndpoint(config, INCARNATION_EPOCH + 50.0, rng=random.Random(0))
    assert endpoint.incarnation == 50
    assert endpoint.broadcast(b"x", INCARNATION_EPOCH + 50.0) == (1, first_seq(50))


def test_claim_member_stores_a_growing_incarnation_and_locks_the_member(tmp_path: Path) -> None:
    home = str(tmp_path)
    wall = INCARNATION_EPOCH + 10.0
    claim = claim_member(4, data_dir=home, wall=wall)
    assert claim.incarnation == 10
    assert claim.previous is None  # a first start
    with pytest.raises(epto.MemberRunningError, match="member 4 already runs"):
        claim_member(4, data_dir=home, wall=wall)
    # Another member may share the directory.
    other_claim = claim_member(5, data_dir=home, wall=wall)
    other_claim.release()
    claim.release()
    claim = claim_member(4, data_dir=home, wall=wall)  # the same second: one above
    assert claim.incarnation == 11
    assert claim.previous == 10  # a restart
    claim.release()
    with pytest.raises(epto.ConfigurationError, match="not above"):
        claim_member(4, data_dir=home, incarnation=11, wall=wall)


def test_claim_member_refuses_another_members_file(tmp_path: Path) -> None:
    (tmp_path / "member-6.json").write_text('{"pid": 7, "incarnation": 3}')
    with pytest.raises(epto.ConfigurationError, match="another member"):
        claim_member(6, data_dir=str(tmp_path))
    (tmp_path / "member-6.json").write_text("not json")
    with pytest.raises(epto.ConfigurationError, match="unreadable"):
        claim_member(6, data_dir=str(tmp_path))
    # The failed claims released their locks.
    (tmp_path / "member-6.json").unlink()
    claim = claim_member(6, data_dir=str(tmp_path))
    claim.release()


def test_without_a_data_dir_nothing_is_written(tmp_path: Path) -> None:
    claim = claim_member(1, data_dir=None, wall=INCARNATION_EPOCH + 77.0)
    claim.release()
    assert claim.incarnation == 77
    assert list(tmp_path.iterdir()) == []


def test_a_resumed_logical_clock_holds_broadcasts_until_it_hears_the_group() -> None:
    proc = _process(2, 2)
    proc.resume_after(5)
    eid = proc.broadcast(b"first after the restart", 0.5)
    assert eid == (2, first_seq(2))
    assert proc.held_event(eid) is None  # not stamped yet
    # The group delivered up to 40 while this member was down.
    proc.receive(1, _ball(Event(source=1, seq=9, ts=40, payload=b"")), now=0.5)
    proc.handle_timer(1.0)
    stamped = proc.held_event(eid)
    assert stamped is not None and stamped.ts > 40


def test_a_resumed_logical_clock_stops_holding_after_ttl_rounds_of_silence() -> None:
    proc = _process(2, 2)
    proc.resume_after(5)
    eid = proc.broadcast(b"into an idle group", 0.5)
    for r in range(1, CONFIG.ttl + 1):
        proc.handle_timer(float(r))
        assert proc.held_event(eid) is None
    proc.handle_timer(float(CONFIG.ttl + 1))
    assert proc.held_event(eid) is not None
