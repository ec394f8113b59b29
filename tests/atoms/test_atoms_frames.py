"""The atoms engine's frames (kinds 40-43, 47): every value round-trips, plain
and sealed; mutated and truncated frames raise nothing but
``RemoteProtocolError``."""

from __future__ import annotations

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

import epto
from epto.atoms._messages import (
    MAX_MEMBERS,
    MAX_OPS,
    MAX_STAMPS,
    AddGroup,
    Alive,
    Change,
    EpochEnd,
    Publish,
    RemoveGroup,
    ReplaceHost,
    Sequenced,
    atoms_registry,
)
from epto.wire import FrameCodec, GroupSealer

LIMITS = epto.Limits.for_frame_size(1 << 16)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
PAYLOAD = st.binary(max_size=200)

publishes = st.builds(Publish, U32, U32, U64, PAYLOAD)
sequenced = st.builds(
    Sequenced,
    U32,
    U32,
    U64,
    U64,
    U64,
    st.integers(0, 2**16 - 1),
    st.lists(st.tuples(U32, U64), max_size=20).map(tuple),
    PAYLOAD,
)
operations = st.one_of(
    st.builds(AddGroup, U32, st.frozensets(U64, min_size=1, max_size=20)),
    st.builds(RemoveGroup, U32),
    st.builds(ReplaceHost, U64, U64),
)
changes = st.builds(Change, U32, st.lists(operations, max_size=8).map(tuple))
markers = st.builds(EpochEnd, U32, U32, st.sampled_from([0, 1]), st.integers(0, 2**16 - 1))
MESSAGES = st.one_of(publishes, sequenced, changes, markers, st.builds(Alive, U32))
Message = Publish | Sequenced | Change | EpochEnd | Alive


def _codecs(sealed: bool) -> tuple[FrameCodec, FrameCodec]:
    if not sealed:
        codec = FrameCodec(group=7, limits=LIMITS, registry=atoms_registry())
        return codec, codec
    key = epto.GroupKey(key_id=1, secret=bytes(range(32)))
    sender = FrameCodec(
        group=7,
        limits=LIMITS,
        registry=atoms_registry(),
        sealer=GroupSealer(key, counter_start=1, rng=random.Random(1)),
    )
    receiver = FrameCodec(
        group=7,
        limits=LIMITS,
        registry=atoms_registry(),
        sealer=GroupSealer(key, counter_start=1, rng=random.Random(2)),
        me=9,
    )
    return sender, receiver


@settings(max_examples=200, deadline=None)
@given(message=MESSAGES, sealed=st.booleans())
def test_every_message_round_trips(message: Message, sealed: bool) -> None:
    sender, receiver = _codecs(sealed)
    (frame,) = sender.encode(3, message, to=9)
    decoded = receiver.decode(frame, 0.0)
    assert decoded.sender == 3 and decoded.message == message


@settings(max_examples=300, deadline=None)
@given(message=MESSAGES, data=st.data())
def test_mutated_frames_raise_only_remote_protocol_errors(
    message: Message, data: st.DataObject
) -> None:
    codec = FrameCodec(group=7, limits=LIMITS, registry=atoms_registry())
    (frame,) = codec.encode(3, message)
    raw = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        with contextlib.suppress(epto.RemoteProtocolError):
            codec.decode(candidate, 0.0)


def test_too_many_stamps_is_refused_on_both_sides() -> None:
    codec = FrameCodec(
        group=7, limits=epto.Limits.for_frame_size(1 << 20), registry=atoms_registry()
    )
    stamps = tuple((i, i) for i in range(MAX_STAMPS + 1))
    try:
        codec.encode(3, Sequenced(0, 0, 0, 0, 0, 0, stamps, b""))
    except epto.LocalProtocolError:
        pass
    else:
        raise AssertionError("encoded more stamps than a frame may carry")


def test_too_many_operations_or_members_are_refused_when_encoding() -> None:
    codec = FrameCodec(
        group=7, limits=epto.Limits.for_frame_size(1 << 20), registry=atoms_registry()
    )
    too_many = [
        Change(1, tuple(RemoveGroup(i) for i in range(MAX_OPS + 1))),
        Change(1, (AddGroup(1, frozenset(range(MAX_MEMBERS + 1))),)),
    ]
    for change in too_many:
        try:
            codec.encode(3, change)
        except epto.LocalProtocolError:
            continue
        raise AssertionError("encoded a change beyond its bounds")


def test_hostile_change_bodies_are_refused_by_the_decoder() -> None:
    codec = FrameCodec(group=7, limits=LIMITS, registry=atoms_registry())
    (good,) = codec.encode(3, Change(1, (AddGroup(1, frozenset({1, 2})),)))
    header = good[:24]  # the frame header; the bodies below replace the change's
    bodies = {
        "malformed": bytes.fromhex("0000000100010900000000"),  # unknown operation kind
        "duplicate": bytes.fromhex("00000001000101000000010002") + (5).to_bytes(8, "big") * 2,
        "too-many": bytes.fromhex("00000001") + (MAX_OPS + 1).to_bytes(2, "big"),
        "truncated": bytes.fromhex("00000001000101000000010003") + (5).to_bytes(8, "big"),
    }
    for fault, body in bodies.items():
        try:
            codec.decode(header + body, 0.0)
        except epto.RemoteProtocolError as error:
            assert error.fault == fault, (fault, error.fault)
        else:
            raise AssertionError(f"decoded a change that is {fault}")
