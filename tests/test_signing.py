"""Event signatures: sign once, verify once per event id, reject forgeries."""

from __future__ import annotations

import attrs
import pytest

from epto import ConfigurationError, Event, EventSigner, SignatureVerifier
from epto.wire import signed_message

pytest.importorskip("cryptography")

from _wire_sim import ed25519_keys


def signer_and_verifier(cache_size: int = 1024) -> tuple[EventSigner, SignatureVerifier]:
    roster = {pid: ed25519_keys(1, pid)[1] for pid in range(3)}
    return EventSigner(0, ed25519_keys(1, 0)[0]), SignatureVerifier(roster, cache_size=cache_size)


def test_signed_message_layout() -> None:
    msg = signed_message(1, 2, 3, b"pay")
    assert (
        msg
        == b"epto-event-v1\0"
        + (1).to_bytes(8, "big")
        + (2).to_bytes(8, "big")
        + (3).to_bytes(8, "big")
        + b"pay"
    )


def test_sign_then_verify_once_per_event_id() -> None:
    signer, verifier = signer_and_verifier()
    event = signer.sign(Event(source=0, seq=0, ts=5, payload=b"hello"))
    assert len(event.signature) == 64
    for _ in range(5):
        assert verifier.check(event) is None
    copy = Event(source=0, seq=0, ts=5, payload=b"hello", signature=event.signature)
    assert verifier.check(copy) is None  # an equal copy, another object
    stats = verifier.statistics()
    assert (stats.checks, stats.passed, stats.cache_hits) == (1, 1, 5)
    # Signing is cached per seq and deterministic.
    assert signer.sign(Event(source=0, seq=0, ts=5, payload=b"hello")) is event
    assert signer.signatures == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"payload": b"hellO"}, "bad-signature"),
        ({"ts": 6}, "bad-signature"),
        ({"seq": 1}, "bad-signature"),
        ({"source": 1}, "bad-signature"),
        ({"source": 9}, "unknown-source"),
        ({"signature": b""}, "unsigned"),
        ({"signature": bytes(64)}, "bad-signature"),
    ],
)
def test_forgeries_are_rejected(change: dict, reason: str) -> None:
    signer, verifier = signer_and_verifier()
    event = signer.sign(Event(source=0, seq=0, ts=5, payload=b"hello"))
    assert verifier.check(attrs.evolve(event, **change)) == reason
    assert verifier.rejected == {reason: 1}
    # The genuine event still passes afterwards: a forgery does not poison its id.
    assert verifier.check(event) is None


def test_altered_copy_of_a_verified_event_is_rejected_without_a_new_check() -> None:
    signer, verifier = signer_and_verifier()
    event = signer.sign(Event(source=0, seq=0, ts=5, payload=b"hello"))
    assert verifier.check(event) is None
    assert verifier.check(attrs.evolve(event, payload=b"HELLO")) == "altered"
    assert verifier.statistics().checks == 1


def test_filter_ball_drops_only_the_bad_events_and_cache_is_bounded() -> None:
    signer, verifier = signer_and_verifier(cache_size=4)
    good = [signer.sign(Event(source=0, seq=i, ts=i + 1, payload=b"%d" % i)) for i in range(10)]
    ball = {e.id: (e, 1) for e in good}
    assert verifier.filter_ball(ball) is ball
    bad = attrs.evolve(good[3], payload=b"x")
    mixed = dict(ball)
    mixed[bad.id] = (bad, 2)
    out = verifier.filter_ball(mixed)
    assert set(out) == set(ball) - {bad.id}
    assert len(verifier._verified) == 4
    by_bytes = SignatureVerifier({0: signer.public_key}, cache_bytes=25)
    big = [signer.sign(Event(source=0, seq=i, ts=i + 1, payload=bytes(10))) for i in range(10)]
    for event in big:
        assert by_bytes.check(event) is None
    assert len(by_bytes._verified) == 2 and by_bytes._cached_bytes == 20
    with pytest.raises(ConfigurationError):
        SignatureVerifier({1: b"short"})
    with pytest.raises(ConfigurationError):
        signer.sign(Event(source=1, seq=0, ts=1, payload=b""))


def test_sign_ball_signs_only_own_unsigned_events() -> None:
    signer, _ = signer_and_verifier()
    other = Event(source=2, seq=0, ts=1, payload=b"o")
    mine = Event(source=0, seq=3, ts=2, payload=b"m")
    ball = {other.id: (other, 4), mine.id: (mine, 0)}
    signed = signer.sign_ball(ball)
    assert signed is not ball and ball[mine.id][0].signature == b""
    assert signed[other.id] == (other, 4)
    assert len(signed[mine.id][0].signature) == 64 and signed[mine.id][1] == 0
    assert signer.sign_ball(signed) is signed


def test_two_validly_signed_versions_of_one_id_count_as_equivocation() -> None:
    """A source that signs two payloads under one event id: the second version
    is refused wherever the first was verified, and counted as equivocation
    (not as a relay's alteration)."""
    signer, verifier = signer_and_verifier()
    first = signer.sign(Event(source=0, seq=0, ts=5, payload=b"pay alice"))
    second = signer.sign(Event(source=0, seq=0, ts=5, payload=b"pay bob"))  # the source equivocates
    assert first.signature != second.signature
    ball = {first.id: (first, 1)}
    assert verifier.filter_ball(ball) is ball
    assert verifier.filter_ball({second.id: (second, 1)}) == {}
    assert verifier.check(attrs.evolve(second, signature=first.signature)) == "altered"
    stats = verifier.statistics()
    assert stats.rejected == {"equivocation": 1, "altered": 1}
    assert stats.equivocations == 1
    assert verifier.check(first) is None  # the verified version still passes
