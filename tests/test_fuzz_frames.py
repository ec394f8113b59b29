"""Fuzzing the decoders (bounded, for CI): garbage raises only RemoteProtocolError.

Random bytes, truncations, bit flips, splices and hostile headers (counts and
lengths far past the end) are fed to plain and sealed codecs; the only
exception allowed is the library's ``RemoteProtocolError``, and memory
allocated while decoding stays within a small multiple of the frame size.
The longer run is ``python fuzz/fuzz_frames.py`` (docs/wire-format.md).
"""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epto import Event, GroupKey, Limits, RemoteProtocolError
from epto.epidemic._peer_messages import Leave, PeerDescriptor, ShuffleReply, ShuffleRequest
from epto.wire import FrameCodec, GroupSealer
from epto.wire._frame_bodies import KIND_BALL, KIND_SHUFFLE_REQUEST
from epto.wire._frames import pack_header

SETTINGS = settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
KEY = GroupKey(key_id=1, secret=bytes(range(32)))
GROUP = 42


def corpus(sealed: bool) -> list[bytes]:
    sealer = GroupSealer(KEY, counter_start=0, prefix=b"fuzz") if sealed else None
    codec = FrameCodec(group=GROUP, sealer=sealer)
    ball = {
        (s, q): (
            Event(source=s, seq=q, ts=q * 3 + s, payload=bytes([q]) * (q * 7), signature=b""),
            q,
        )
        for s in range(3)
        for q in range(4)
    }
    signed = {(9, 0): (Event(source=9, seq=0, ts=1, payload=b"p", signature=b"s" * 64), 2)}
    peers = tuple(PeerDescriptor(pid=i, address=b"10.0.0.%d:9" % i, age=i) for i in range(5))
    frames = codec.encode(1, ball) + codec.encode(1, signed) + codec.encode(1, {})
    for message in (ShuffleRequest(entries=peers), ShuffleReply(entries=()), Leave()):
        frames += codec.encode(1, message)
    return frames


PLAIN = corpus(sealed=False)
SEALED = corpus(sealed=True)


def decode_only_raises_protocol_errors(data: bytes, sealed: bool) -> None:
    sealer = GroupSealer(KEY, counter_start=0, prefix=b"recv") if sealed else None
    codec = FrameCodec(group=GROUP, sealer=sealer)
    try:
        frame = codec.decode(data)
    except RemoteProtocolError as exc:
        assert exc.fault
        assert codec.receive(data) is None
        assert sum(codec.rejected.values()) == 1
        return
    # Accepted: it must re-encode within the limits.
    assert frame.group == GROUP


@st.composite
def mutated(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(frames)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "u16", "u32"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=40))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 40))]
        elif op == "u16" and len(data) >= at + 2:
            data[at : at + 2] = struct.pack(">H", draw(st.sampled_from([0, 1, 0x7FFF, 0xFFFF])))
        elif op == "u32" and len(data) >= at + 4:
            value = draw(st.sampled_from([0, 1 << 31, 0xFFFFFFFF, 0x10000]))
            data[at : at + 4] = struct.pack(">I", value)
    return bytes(data)


@SETTINGS
@given(data=st.binary(max_size=2000))
def test_random_bytes(data: bytes) -> None:
    decode_only_raises_protocol_errors(data, sealed=False)
    decode_only_raises_protocol_errors(data, sealed=True)


@SETTINGS
@given(data=st.binary(max_size=600))
def test_random_bodies_behind_a_valid_header(data: bytes) -> None:
    for kind in (1, 2, 3, 4):
        decode_only_raises_protocol_errors(pack_header(kind, 1, GROUP) + data, sealed=False)


@SETTINGS
@given(data=mutated(PLAIN))
def test_mutated_plain_frames(data: bytes) -> None:
    decode_only_raises_protocol_errors(data, sealed=False)


@SETTINGS
@given(data=mutated(SEALED))
def test_mutated_sealed_frames(data: bytes) -> None:
    decode_only_raises_protocol_errors(data, sealed=True)


@pytest.mark.parametrize("cut", range(0, 200, 7))
def test_every_truncation(cut: int) -> None:
    for frame in PLAIN + SEALED:
        if cut < len(frame):
            decode_only_raises_protocol_errors(frame[:cut], sealed=frame in SEALED)


def hostile_frames() -> list[bytes]:
    head_ball = pack_header(KIND_BALL, 1, GROUP)
    head_peers = pack_header(KIND_SHUFFLE_REQUEST, 1, GROUP)
    entry = struct.Struct(">QQQHBI")
    return [
        head_ball + b"\xff\xff",  # 65535 events, none present
        head_ball + struct.pack(">H", 1000) + bytes(entry.size),  # 1000 claimed, 1 present
        head_ball + b"\x00\x01" + entry.pack(1, 1, 1, 1, 0, 0xFFFFFFFF),  # 4 GiB payload
        head_ball + b"\x00\x01" + entry.pack(1, 1, 1, 1, 0, 1 << 31) + bytes(100),
        head_ball + b"\x00\x01" + entry.pack(1, 1, 1, 1, 64, 900) + bytes(100),  # past the end
        head_ball + b"\x00\x01" + entry.pack(1, 1, 1, 1, 255, 0) + bytes(255),
        head_peers + b"\xff\xff" + bytes(14),
        head_peers + b"\x00\x01" + struct.pack(">QIH", 1, 1, 0xFFFF) + bytes(10),
        head_peers + b"\x00\x02" + struct.pack(">QIH", 1, 1, 3) + b"abc",
    ]


@pytest.mark.parametrize("frame", hostile_frames(), ids=lambda f: f[24:40].hex())
def test_hostile_counts_and_lengths_allocate_nothing_big(frame: bytes) -> None:
    codec = FrameCodec(group=GROUP, limits=Limits())
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError):
            codec.decode(frame)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, peak


def test_decoding_allocates_in_proportion_to_the_input() -> None:
    """A full frame of the smallest events: memory stays a bounded multiple of
    max_frame_size (objects per event, not per claimed count)."""
    limits = Limits.for_frame_size(60000)
    codec = FrameCodec(group=GROUP, limits=limits)
    rng = random.Random(1)
    ball = {
        (1, i): (Event(source=1, seq=i, ts=i, payload=b""), rng.randrange(9)) for i in range(1024)
    }
    (frame,) = codec.encode(1, ball)
    tracemalloc.start()
    try:
        decoded = codec.decode(frame)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decoded.message) == 1024
    assert peak < 600 * 1024, peak  # about 400 bytes of Python objects per event
