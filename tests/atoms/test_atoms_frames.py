"""The atoms engine's frames (kinds 40, 41): every value round-trips, plain
and sealed; mutated and truncated frames raise nothing but
``RemoteProtocolError``."""

from __future__ import annotations

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

import epto
from epto.atoms._messages import MAX_STAMPS, Publish, Sequenced, atoms_registry
from epto.wire import FrameCodec, GroupSealer

LIMITS = epto.Limits.for_frame_size(1 << 16)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
PAYLOAD = st.binary(max_size=200)

publishes = st.builds(Publish, U32, U64, PAYLOAD)
sequenced = st.builds(
    Sequenced,
    U32,
    U64,
    U64,
    U64,
    st.integers(0, 2**16 - 1),
    st.lists(st.tuples(U32, U64), max_size=20).map(tuple),
    PAYLOAD,
)


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
@given(message=st.one_of(publishes, sequenced), sealed=st.booleans())
def test_every_message_round_trips(message: Publish | Sequenced, sealed: bool) -> None:
    sender, receiver = _codecs(sealed)
    (frame,) = sender.encode(3, message, to=9)
    decoded = receiver.decode(frame, 0.0)
    assert decoded.sender == 3 and decoded.message == message


@settings(max_examples=300, deadline=None)
@given(message=st.one_of(publishes, sequenced), data=st.data())
def test_mutated_frames_raise_only_remote_protocol_errors(
    message: Publish | Sequenced, data: st.DataObject
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
        codec.encode(3, Sequenced(0, 0, 0, 0, 0, stamps, b""))
    except epto.LocalProtocolError:
        pass
    else:
        raise AssertionError("encoded more stamps than a frame may carry")
