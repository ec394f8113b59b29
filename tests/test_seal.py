"""Group encryption: sealed frames round-trip; outsiders, tampering and replays are rejected."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epto import ConfigurationError, Event, GroupKey, LocalProtocolError
from epto.epidemic._peer_messages import Leave, PeerDescriptor, ShuffleReply
from epto.wire import FrameCodec, GroupSealer, ReplayWindow
from epto.wire._limits import HEADER_SIZE

pytest.importorskip("cryptography")

GROUP = 0xC0FFEE
KEY = GroupKey(key_id=1, secret=bytes(range(32)))


def make_codec(key: GroupKey = KEY, seed: int = 0, counter: int = 0, **kw: int) -> FrameCodec:
    sealer = GroupSealer(key, counter_start=counter, rng=random.Random(seed), **kw)
    return FrameCodec(group=GROUP, sealer=sealer)


def ball(n: int, source: int = 1) -> dict:
    return {
        (source, i): (Event(source=source, seq=i, ts=i + 1, payload=b"p%d" % i), 1)
        for i in range(n)
    }


@pytest.mark.parametrize("cipher", ["aes-256-gcm", "chacha20-poly1305"])
def test_every_kind_round_trips_sealed(cipher: str) -> None:
    key = GroupKey(key_id=7, secret=bytes(32), cipher=cipher)  # type: ignore[arg-type]
    alice, bob = make_codec(key, seed=1), make_codec(key, seed=2)
    big = ball(60)
    frames = alice.encode(10, big)
    assert len(frames) > 1 and all(len(f) <= alice.limits.max_frame_size for f in frames)
    got: dict = {}
    for raw in frames:
        assert raw[4] == 1 and raw[5] == 7  # sealed flag, key id
        assert b"p1" not in raw[HEADER_SIZE:]  # payloads are not in clear
        frame = bob.receive(raw, now=0.0)
        assert frame is not None and frame.sender == 10
        got.update(frame.message)
    assert got == big
    reply = ShuffleReply(entries=(PeerDescriptor(pid=3, address=b"10.0.0.1:9", age=2),))
    for message in (reply, Leave()):
        (raw,) = alice.encode(10, message)
        frame = bob.receive(raw)
        assert frame is not None and frame.message == message
    assert bob.rejected == {}


def test_outsider_with_another_key_is_rejected_and_counted() -> None:
    member = make_codec()
    outsider = make_codec(GroupKey(key_id=1, secret=b"\x01" * 32), seed=9)
    for raw in outsider.encode(66, ball(3, source=66)):
        assert member.receive(raw) is None
    unknown_id = make_codec(GroupKey(key_id=2, secret=bytes(range(32))), seed=9)
    for raw in unknown_id.encode(66, ball(3, source=66)):
        assert member.receive(raw) is None
    plain = FrameCodec(group=GROUP)
    for raw in plain.encode(66, ball(3, source=66)):
        assert member.receive(raw) is None
    assert member.rejected == {"bad-tag": 1, "unknown-key": 1, "unsealed": 1}
    (raw,) = make_codec().encode(1, Leave())
    assert plain.receive(raw) is None and plain.rejected == {"unexpected-seal": 1}


def test_every_single_bit_flip_is_rejected() -> None:
    sender = make_codec(seed=3)
    (raw,) = sender.encode(5, ball(4))
    flipped = 0
    for i in range(len(raw)):
        for bit in range(8):
            receiver = make_codec(seed=4)
            bad = bytearray(raw)
            bad[i] ^= 1 << bit
            assert receiver.receive(bytes(bad)) is None, (i, bit)
            flipped += 1
            assert sum(receiver.rejected.values()) == 1
    assert flipped == 8 * len(raw)
    assert make_codec(seed=4).receive(raw) is not None


def test_replays_are_rejected_reordering_within_the_window_is_not() -> None:
    sender = make_codec(seed=5, counter=1000)
    receiver = make_codec(seed=6, replay_window=64)
    frames = [sender.encode(5, Leave())[0] for _ in range(200)]
    assert receiver.receive(frames[100]) is not None
    assert receiver.receive(frames[100]) is None  # replay
    assert receiver.receive(frames[50]) is not None  # late but inside the window
    assert receiver.receive(frames[50]) is None
    assert receiver.receive(frames[10]) is None  # older than the window
    assert receiver.receive(frames[199]) is not None
    assert receiver.receive(frames[100]) is None
    assert receiver.rejected == {"replay": 4}
    # A forged frame (bad tag) does not advance the window.
    forged = bytearray(frames[150])
    forged[-1] ^= 1
    assert receiver.receive(bytes(forged)) is None
    assert receiver.receive(frames[150]) is not None


def test_key_rotation_with_grace_period() -> None:
    new = GroupKey(key_id=2, secret=b"\x02" * 32, cipher="chacha20-poly1305")
    sender = make_codec(seed=7)
    receiver = make_codec(seed=8)
    (old_frame,) = sender.encode(5, Leave())
    receiver.sealer.add_key(new)  # type: ignore[union-attr]
    sender.sealer.add_key(new)  # type: ignore[union-attr]
    sender.sealer.use_key(2, now=10.0, grace=5.0)  # type: ignore[union-attr]
    receiver.sealer.use_key(2, now=10.0, grace=5.0)  # type: ignore[union-attr]
    (new_frame,) = sender.encode(5, Leave())
    assert new_frame[5] == 2
    assert receiver.receive(new_frame, now=11.0) is not None
    assert receiver.receive(old_frame, now=14.0) is not None  # old key, within grace
    (late_old,) = make_codec(seed=9, counter=10**6).encode(5, Leave())
    assert receiver.receive(late_old, now=15.0) is None  # grace over
    assert receiver.rejected == {"unknown-key": 1}
    with pytest.raises(LocalProtocolError):
        receiver.sealer.use_key(3, now=0.0, grace=0.0)  # type: ignore[union-attr]
    with pytest.raises(LocalProtocolError):
        receiver.sealer.add_key(GroupKey(key_id=2, secret=b"\x03" * 32))  # type: ignore[union-attr]


def test_nonces_never_repeat_and_senders_use_distinct_subkeys() -> None:
    a = GroupSealer(KEY, counter_start=0, prefix=b"\0\0\0\0")
    b = GroupSealer(KEY, counter_start=0, prefix=b"\0\0\0\0")
    nonces = {a.seal(1, 1, GROUP, b"x")[HEADER_SIZE : HEADER_SIZE + 12] for _ in range(500)}
    assert len(nonces) == 500 and a.counter == 500
    # Same prefix, same counter, same plaintext, different senders: different ciphertexts.
    sa = GroupSealer(KEY, counter_start=0, prefix=b"\0\0\0\0").seal(1, 1, GROUP, b"same")
    sb = b.seal(1, 2, GROUP, b"same")
    assert sa[HEADER_SIZE:] != sb[HEADER_SIZE:]


def test_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        GroupKey(key_id=0, secret=bytes(32))
    with pytest.raises(ConfigurationError):
        GroupKey(key_id=1, secret=bytes(31))
    with pytest.raises(ConfigurationError):
        GroupSealer(KEY, counter_start=0)
    with pytest.raises(ConfigurationError):
        GroupSealer(KEY, counter_start=-1, prefix=b"abcd")
    with pytest.raises(LocalProtocolError):
        GroupSealer(KEY, counter_start=0, prefix=b"abcd").seal(1, 1, GROUP, b"", to=1 << 64)
    with pytest.raises(LocalProtocolError):
        FrameCodec(group=GROUP, me=-1)
    assert "secret" not in repr(KEY).replace("secret=<hidden>", "")
    assert str(bytes(range(32))) not in repr(KEY)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(ops=st.lists(st.integers(0, 300), max_size=80))
def test_replay_window_matches_a_set_model(ops: list[int]) -> None:
    window = ReplayWindow(size=32, max_senders=4)
    seen: set[int] = set()
    high = -1
    for counter in ops:
        expected = counter not in seen and (counter > high or high - counter < 32)
        assert window.fresh(7, counter) == expected
        if expected:
            window.accept(7, counter)
            seen.add(counter)
            high = max(high, counter)


def test_replay_window_memory_is_bounded() -> None:
    window = ReplayWindow(size=8, max_senders=3)
    for sender in range(10):
        window.accept(sender, 1)
    assert len(window) == 3 and window.evicted == 7
    assert not window.fresh(9, 1) and window.fresh(0, 1)


def test_frames_bound_to_a_receiver_cannot_be_replayed_to_another() -> None:
    sender = make_codec(seed=11)
    bob = FrameCodec(group=GROUP, sealer=GroupSealer(KEY, counter_start=0, prefix=b"bbbb"), me=2)
    carol = FrameCodec(group=GROUP, sealer=GroupSealer(KEY, counter_start=0, prefix=b"cccc"), me=3)
    (raw,) = sender.encode(1, Leave(), to=2)
    assert raw[4] == 0b11  # sealed and bound
    assert carol.receive(raw) is None and carol.rejected == {"bad-tag": 1}
    assert bob.receive(raw) is not None
    unbound_receiver = make_codec(seed=12)
    assert unbound_receiver.receive(raw) is None
    assert unbound_receiver.rejected == {"bad-header": 1}
    # Clearing the bound flag breaks authentication as well.
    stripped = bytearray(sender.encode(1, Leave(), to=3)[0])
    stripped[4] = 0b01
    assert carol.receive(bytes(stripped)) is None and carol.rejected["bad-tag"] == 2
