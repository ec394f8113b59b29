"""Frames: header, registry, every kind round-trips, balls split across frames."""

from __future__ import annotations

import struct

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epto
import epto.wire
from epto import Event, Limits, LocalProtocolError, RemoteProtocolError
from epto.epidemic._peer_messages import Leave, PeerDescriptor, ShuffleReply, ShuffleRequest
from epto.wire import FrameCodec, FrameKind
from epto.wire._frame_bodies import KIND_BALL, KIND_LEAVE
from epto.wire._frames import MAGIC, Reader, pack_header, unpack_header
from epto.wire._limits import EVENT_FIXED_SIZE, HEADER_SIZE, SIGNATURE_SIZE

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
LIMITS = Limits()
SETTINGS = settings(derandomize=True, max_examples=150, deadline=None)


def events(max_payload: int = LIMITS.max_payload_size) -> st.SearchStrategy[Event]:
    return st.builds(
        Event,
        source=U64,
        seq=U64,
        ts=U64,
        payload=st.binary(max_size=max_payload),
        signature=st.one_of(st.just(b""), st.binary(min_size=64, max_size=64)),
    )


def balls(max_events: int = 60, max_payload: int = 300) -> st.SearchStrategy[dict]:
    entries = st.lists(st.tuples(events(max_payload), st.integers(0, 0xFFFF)), max_size=max_events)
    return entries.map(lambda es: {e.id: (e, ttl) for e, ttl in es})


peers = st.builds(
    PeerDescriptor,
    pid=U64,
    address=st.binary(max_size=LIMITS.max_address_size),
    age=st.integers(0, (1 << 32) - 1),
)


def test_header_layout_is_documented_24_bytes() -> None:
    raw = pack_header(KIND_BALL, sender=7, group=0xABCDEF)
    assert len(raw) == HEADER_SIZE == 24
    assert raw[:2] == MAGIC
    assert raw[2] == 1 and raw[3] == KIND_BALL and raw[4] == 0 and raw[5] == 0
    assert struct.unpack(">QQ", raw[8:]) == (7, 0xABCDEF)
    header = unpack_header(raw)
    assert (header.kind, header.sender, header.group, header.sealed) == (
        KIND_BALL,
        7,
        0xABCDEF,
        False,
    )


@pytest.mark.parametrize(
    ("patch", "fault"),
    [
        ((0, b"XX"), "bad-magic"),
        ((2, b"\x02"), "bad-version"),
        ((4, b"\x80"), "bad-header"),
        ((5, b"\x01"), "bad-header"),
        ((6, b"\x00\x01"), "bad-header"),
        ((3, b"\xee"), "unknown-kind"),
    ],
)
def test_bad_headers_are_rejected_with_their_fault(patch: tuple[int, bytes], fault: str) -> None:
    codec = FrameCodec(group=1)
    (frame,) = codec.encode(3, Leave())
    at, repl = patch
    bad = frame[:at] + repl + frame[at + len(repl) :]
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(bad)
    assert info.value.fault == fault
    assert codec.receive(bad) is None
    assert codec.rejected[fault] == 1


def test_wrong_group_and_oversized_frames_are_rejected() -> None:
    codec = FrameCodec(group=1)
    (frame,) = FrameCodec(group=2).encode(3, Leave())
    assert codec.receive(frame) is None
    assert codec.receive(b"\0" * (LIMITS.max_frame_size + 1)) is None
    assert codec.receive(b"") is None
    assert codec.rejected == {"wrong-group": 1, "oversized": 1, "truncated": 1}
    assert codec.statistics()["accepted"] == {}


@SETTINGS
@given(ball=balls(), sender=U64, group=U64)
def test_ball_round_trip(ball: dict, sender: int, group: int) -> None:
    codec = FrameCodec(group=group)
    frames = codec.encode(sender, ball)
    assert all(len(f) <= LIMITS.max_frame_size for f in frames)
    merged: dict = {}
    for raw in frames:
        frame = codec.receive(raw)
        assert frame is not None
        assert (frame.kind, frame.sender, frame.group) == (KIND_BALL, sender, group)
        assert not merged.keys() & frame.message.keys()
        merged.update(frame.message)
    assert merged == ball
    assert codec.accepted["ball"] == len(frames)


@SETTINGS
@given(ball=balls(max_events=200, max_payload=1024), size=st.integers(1200, 9000))
def test_split_ball_union_equals_ball_and_frames_are_full(ball: dict, size: int) -> None:
    limits = Limits.for_frame_size(size, max_payload_size=1024)
    codec = FrameCodec(group=5, limits=limits)
    frames = codec.encode(1, ball)
    assert all(len(f) <= size for f in frames)
    parts = [codec.decode(f).message for f in frames]
    assert {k: v for p in parts for k, v in p.items()} == ball
    assert sum(len(p) for p in parts) == len(ball)
    # Greedy packing: the next frame's first event did not fit in the previous frame.
    for raw, nxt in zip(frames, parts[1:], strict=False):
        first = next(iter(nxt.values()))[0]
        entry = EVENT_FIXED_SIZE + len(first.signature) + len(first.payload)
        assert len(raw) + entry > size


def test_split_ball_respects_max_events_per_ball() -> None:
    limits = Limits.for_frame_size(60000, max_events_per_ball=10)
    codec = FrameCodec(group=0, limits=limits)
    ball = {(1, i): (Event(source=1, seq=i, ts=i, payload=b"x"), 2) for i in range(35)}
    frames = codec.encode(9, ball)
    assert [len(codec.decode(f).message) for f in frames] == [10, 10, 10, 5]


def test_empty_ball_is_one_frame() -> None:
    codec = FrameCodec(group=0)
    (frame,) = codec.encode(1, {})
    assert len(frame) == HEADER_SIZE + 2
    assert codec.decode(frame).message == {}


@SETTINGS
@given(entries=st.lists(peers, max_size=8), reply=st.booleans(), sender=U64)
def test_cyclon_round_trip(entries: list, reply: bool, sender: int) -> None:
    codec = FrameCodec(group=77)
    cls = ShuffleReply if reply else ShuffleRequest
    message = cls(entries=tuple(entries))
    (frame,) = codec.encode(sender, message)
    decoded = codec.decode(frame)
    assert decoded.message == message and decoded.sender == sender
    (leave,) = codec.encode(sender, Leave())
    assert codec.decode(leave).message == Leave()
    assert codec.decode(leave).kind == KIND_LEAVE


def test_encode_enforces_limits_locally() -> None:
    codec = FrameCodec(group=0)
    big = Event(source=1, seq=0, ts=1, payload=b"x" * (LIMITS.max_payload_size + 1))
    with pytest.raises(LocalProtocolError, match="max_payload_size"):
        codec.encode(1, {big.id: (big, 0)})
    with pytest.raises(LocalProtocolError, match="out of range"):
        codec.encode(1, {(1, 0): (Event(source=1, seq=0, ts=-1, payload=b""), 0)})
    with pytest.raises(LocalProtocolError, match="signature"):
        codec.encode(1, {(1, 0): (Event(source=1, seq=0, ts=1, payload=b"", signature=b"s"), 0)})
    too_many = tuple(PeerDescriptor(pid=i, address=b"a") for i in range(65))
    with pytest.raises(LocalProtocolError, match="max_peer_entries"):
        codec.encode(1, ShuffleRequest(entries=too_many))
    with pytest.raises(LocalProtocolError, match="max_address_size"):
        codec.encode(1, ShuffleRequest(entries=(PeerDescriptor(pid=1, address=b"a" * 256),)))
    with pytest.raises(LocalProtocolError, match="no frame kind"):
        codec.encode(1, object())
    with pytest.raises(LocalProtocolError):
        pack_header(1, sender=1 << 64, group=0)


def test_limits_validation() -> None:
    with pytest.raises(epto.ConfigurationError, match="max_payload_size"):
        Limits(max_frame_size=1400, max_payload_size=1400)
    with pytest.raises(epto.ConfigurationError, match="max_frame_size"):
        Limits(max_frame_size=0)
    limits = Limits.for_frame_size(65507)
    assert limits.max_payload_size == 65507 - 24 - 28 - 2 - EVENT_FIXED_SIZE - SIGNATURE_SIZE


def test_hostile_counts_are_rejected_before_allocation() -> None:
    codec = FrameCodec(group=0)
    header = pack_header(KIND_BALL, 1, 0)
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + b"\xff\xff")
    assert info.value.fault == "too-many"
    # 1000 events claimed (under the limit), 0 bytes of them present.
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + struct.pack(">H", 1000))
    assert info.value.fault == "truncated"
    # A payload length past the end of the frame.
    entry = struct.pack(">QQQHBI", 1, 0, 1, 0, 0, 1000)
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + struct.pack(">H", 1) + entry + b"abc")
    assert info.value.fault == "truncated"
    entry = struct.pack(">QQQHBI", 1, 0, 1, 0, 0, 1 << 31)
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + struct.pack(">H", 1) + entry)
    assert info.value.fault == "oversized"
    entry = struct.pack(">QQQHBI", 1, 0, 1, 0, 7, 0)
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + struct.pack(">H", 1) + entry + b"1234567")
    assert info.value.fault == "bad-signature-size"
    twice = struct.pack(">QQQHBI", 1, 0, 1, 0, 0, 0)
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + struct.pack(">H", 2) + twice + twice)
    assert info.value.fault == "duplicate"
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(header + struct.pack(">H", 0) + b"extra")
    assert info.value.fault == "trailing"


@attrs.frozen(kw_only=True, slots=True)
class Ping:
    nonce: int
    note: bytes


def _encode_ping(message: Ping, _limits: Limits) -> bytes:
    return struct.pack(">QH", message.nonce, len(message.note)) + message.note


def _decode_ping(reader: Reader, limits: Limits) -> Ping:
    nonce = reader.u64()
    note = reader.blob(reader.u16(), 100, "note")
    return Ping(nonce=nonce, note=note)


def test_registry_accepts_a_new_kind_and_refuses_clashes() -> None:
    registry = epto.wire.default_registry()
    ping = FrameKind(code=200, name="ping", type=Ping, encode=_encode_ping, decode=_decode_ping)
    registry.register(ping)
    assert 200 in registry and [k.code for k in registry] == [1, 2, 3, 4, 200]
    with pytest.raises(LocalProtocolError, match="already"):
        registry.register(ping)
    with pytest.raises(LocalProtocolError):
        FrameKind(code=0, name="zero", type=int, encode=_encode_ping, decode=_decode_ping)
    codec = FrameCodec(group=3, registry=registry)
    (frame,) = codec.encode(4, Ping(nonce=9, note=b"hi"))
    assert codec.decode(frame).message == Ping(nonce=9, note=b"hi")
    assert codec.receive(frame[:-1]) is None
    assert codec.rejected == {"truncated": 1}
    # The default registry does not know the new kind.
    assert FrameCodec(group=3).receive(frame) is None


def test_a_realistic_ball_is_split_across_datagrams() -> None:
    codec = FrameCodec(group=0)
    ball = {
        (s, q): (Event(source=s, seq=q, ts=q * 10 + s, payload=bytes(100)), 3)
        for s in range(10)
        for q in range(5)
    }
    frames = codec.encode(1, ball)
    assert len(frames) == 5  # 50 events of 131 bytes, 10 per 1400-byte frame
    merged = {k: v for f in frames for k, v in codec.decode(f).message.items()}
    assert merged == ball
