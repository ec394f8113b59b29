"""The sans-IO replica: commands, failures, the digest chain, snapshots,
newcomers' buffers and holes."""

from __future__ import annotations

import pytest

from epto import Delivery, DeliveryTag, Event
from epto.rsm import (
    EMPTY_DIGEST,
    AuditVerdicts,
    CommandFailed,
    JsonCodec,
    Replica,
    chain,
)

from .machines import KV

CODEC = JsonCodec()


def delivery(
    ts: int,
    source: int,
    seq: int,
    name: str,
    *args: object,
    tag: DeliveryTag = DeliveryTag.IN_ORDER,
) -> Delivery:
    payload = CODEC.encode(name, args)
    return Delivery(event=Event(source=source, seq=seq, ts=ts, payload=payload), tag=tag)


def test_commands_apply_in_order_and_failures_are_results() -> None:
    r = Replica(KV())
    assert r.deliver(delivery(1, 1, 0, "set", "a", 1)).result is None  # type: ignore[union-attr]
    assert r.deliver(delivery(2, 2, 0, "incr", "a", 5)).result == 6  # type: ignore[union-attr]
    failed = r.deliver(delivery(3, 1, 1, "fail", "b"))
    assert failed is not None and failed.result == CommandFailed("KeyError", "'b'")
    assert r.machine.data == {"a": 6, "b": "half-done"}  # type: ignore[attr-defined]
    assert r.cut == (3, 1, 1) and r.applied == 3
    unknown = r.deliver(delivery(4, 1, 2, "snapshot"))
    assert unknown is not None and unknown.result == CommandFailed("UnknownCommand", "snapshot")
    bad = Delivery(event=Event(source=1, seq=3, ts=5, payload=b"\xff{"))
    result = r.deliver(bad)
    assert result is not None and isinstance(result.result, CommandFailed)
    assert result.result.error == "BadCommand"
    digest = EMPTY_DIGEST
    for key in [(1, 1, 0), (2, 2, 0), (3, 1, 1), (4, 1, 2), (5, 1, 3)]:
        digest = chain(digest, key)
    assert r.digest == digest


def test_only_the_total_order_is_applied_and_never_twice() -> None:
    r = Replica(KV())
    assert r.deliver(delivery(1, 1, 0, "incr", "a", tag=DeliveryTag.OPTIMISTIC)) is None
    assert r.deliver(delivery(1, 1, 0, "incr", "a", tag=DeliveryTag.OUT_OF_ORDER)) is None
    assert r.deliver(delivery(1, 1, 0, "incr", "a", tag=DeliveryTag.FINAL)) is not None
    assert r.deliver(delivery(1, 1, 0, "incr", "a")) is None  # at the cut: covered
    assert r.machine.data == {"a": 1}  # type: ignore[attr-defined]


def test_a_newcomer_restores_a_snapshot_and_replays_what_it_buffered() -> None:
    old = Replica(KV())
    new = Replica(KV(), joining=True)
    stream = [delivery(i, 1 + i % 3, i, "incr", "n", i) for i in range(1, 21)]
    for d in stream[:12]:
        old.deliver(d)
    for d in stream[8:]:  # the newcomer delivers from position 9 on
        new.deliver(d)
    assert new.needed() == (9, 1 + 9 % 3, 9)
    with pytest.raises(ValueError, match="does not reach"):
        new.restore(Replica(KV()).snapshot())
    snapshot = old.snapshot()
    applied = new.restore(snapshot)
    assert [a.cut[0] for a in applied] == list(range(13, 21))
    for d in stream[12:]:
        old.deliver(d)
    assert (new.cut, new.digest, new.applied) == (old.cut, old.digest, old.applied)
    assert new.machine.data == old.machine.data  # type: ignore[attr-defined]
    assert new.compare(old.cut, old.digest) is True


def test_a_hole_stops_a_contiguous_replica_and_shows_in_the_digest() -> None:
    # The token ring's positions count from 0.
    stream = [delivery(i, 1, i, "incr", "n") for i in range(10)]
    whole = Replica(KV())
    holed = Replica(KV(), contiguous=True)
    loose = Replica(KV())
    for d in stream:
        whole.deliver(d)
    for d in stream[:4] + stream[5:]:
        holed.deliver(d)
        loose.deliver(d)
    assert holed.hole and not holed.ready and holed.cut == (3, 1, 3) and holed.buffered() == 5
    assert loose.cut == whole.cut and loose.compare(whole.cut, whole.digest) is False
    holed.restore(whole.snapshot())
    assert holed.ready and holed.digest == whole.digest


def test_the_buffer_is_bounded() -> None:
    new = Replica(KV(), joining=True, max_buffer=3)
    for i in range(1, 7):
        new.deliver(delivery(i, 1, i, "incr", "n"))
    assert new.overflowed and new.buffered() == 3 and new.needed() == (4, 1, 4)


def test_audits_count_peers_not_audits() -> None:
    # A correct replica beside one wrong peer, audited in turn: every other
    # verdict is a contradiction, and it must never fetch its state.
    correct = AuditVerdicts()
    assert not any(correct.record(peer, peer != "wrong") for peer in ["ok", "wrong"] * 10)
    # The wrong replica: both peers contradict it; it fetches once the second does.
    holed = AuditVerdicts()
    assert [holed.record(p, False) for p in ("a", "b")] == [False, True]
    # ... and starts afresh: one contradiction is not enough again.
    assert holed.record("a", False) is False
    # With one peer alone nobody can tell which replica is wrong.
    lone = AuditVerdicts()
    assert not any(lone.record("only", False) for _ in range(5))
    # Five peers: three confirm, two contradict; then a third contradicts.
    five = AuditVerdicts()
    verdicts = {"c": True, "d": True, "e": True, "a": False, "b": False}
    assert not any(five.record(p, v) for p, v in verdicts.items())
    assert five.record("c", False) is True
