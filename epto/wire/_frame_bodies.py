"""Body codecs of the library's own frame kinds: EpTO balls and Cyclon messages.

Layouts are in docs/wire-format.md. Integers are big-endian. A ball that does
not fit in one frame is split into several balls (a ball is a set of copies;
splitting it changes nothing for EpTO).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from itertools import chain, repeat

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Event, EventId
from ..epidemic._ball import CheckedBall, LayeredBall
from ..epidemic._peer_messages import Leave, PeerDescriptor, ShuffleReply, ShuffleRequest
from ._frames import FrameKind, FrameRegistry, Reader
from ._limits import EVENT_FIXED_SIZE, PEER_FIXED_SIZE, SIGNATURE_SIZE, Limits

KIND_BALL = 1
KIND_SHUFFLE_REQUEST = 2
KIND_SHUFFLE_REPLY = 3
KIND_LEAVE = 4

_COUNT = struct.Struct(">H")
_ENTRY = struct.Struct(">QQQHBI")
assert _ENTRY.size == EVENT_FIXED_SIZE
_PEER = struct.Struct(">QIH")
assert _PEER.size == PEER_FIXED_SIZE

# -- balls ------------------------------------------------------------------


def _entry_head(event: Event, ttl: int, limits: Limits) -> bytes:
    """The fixed 31 bytes of one ball entry; raises :class:`LocalProtocolError`
    if the event breaks a limit."""
    plen = len(event.payload)
    siglen = len(event.signature)
    if plen > limits.max_payload_size:
        raise LocalProtocolError(
            f"payload of {plen} bytes exceeds Limits.max_payload_size={limits.max_payload_size}"
        )
    if siglen and siglen != SIGNATURE_SIZE:
        raise LocalProtocolError(f"signature must be empty or 64 bytes, not {siglen}")
    try:
        return _ENTRY.pack(event.source, event.seq, event.ts, ttl, siglen, plen)
    except struct.error as exc:
        raise LocalProtocolError(f"event {event.id} or ttl {ttl} out of range: {exc}") from None


def _copies(ball: Mapping[EventId, tuple[Event, int]]) -> Iterable[tuple[Event, int]]:
    """``ball.values()``; for a layered ball (what a process hands out) the same
    pairs in the same order, built by C iterators instead of a generator."""
    if type(ball) is LayeredBall:
        return chain.from_iterable(
            zip(layer.values(), repeat(ttl)) for ttl, layer in ball.layers.items()
        )
    return ball.values()


def split_ball(
    ball: Mapping[EventId, tuple[Event, int]], limits: Limits, budget: int
) -> list[bytes]:
    """Encode ``ball`` as bodies of at most ``budget`` bytes each (at least one body,
    empty balls included), greedily in the ball's iteration order."""
    bodies: list[bytes] = []
    parts: list[bytes] = [b""]
    count = 0
    size = _COUNT.size
    max_events = limits.max_events_per_ball
    max_payload = limits.max_payload_size
    pack = _ENTRY.pack
    for event, ttl in _copies(ball):
        payload = event.payload
        signature = event.signature
        plen = len(payload)
        siglen = len(signature)
        # _entry_head's checks, inline (this loop runs for every copy sent);
        # it raises the precise error when one fails.
        if plen > max_payload or (siglen and siglen != SIGNATURE_SIZE):
            _entry_head(event, ttl, limits)
        try:
            head = pack(event.source, event.seq, event.ts, ttl, siglen, plen)
        except struct.error:
            head = _entry_head(event, ttl, limits)
        entry_size = EVENT_FIXED_SIZE + siglen + plen
        if size + entry_size > budget or count == max_events:
            if count == 0:
                raise LocalProtocolError(f"event {event.id} of {entry_size} bytes fits no frame")
            parts[0] = _COUNT.pack(count)
            bodies.append(b"".join(parts))
            parts = [b""]
            count = 0
            size = _COUNT.size
            if size + entry_size > budget:
                raise LocalProtocolError(f"event {event.id} of {entry_size} bytes fits no frame")
        parts += (head, signature, payload)
        count += 1
        size += entry_size
    if count or not bodies:
        parts[0] = _COUNT.pack(count)
        bodies.append(b"".join(parts))
    return bodies


def _encode_ball(ball: Mapping[EventId, tuple[Event, int]], limits: Limits) -> bytes:
    bodies = split_ball(ball, limits, 1 << 62)
    if len(bodies) != 1:
        raise LocalProtocolError("ball has more events than Limits.max_events_per_ball")
    return bodies[0]


def decode_ball(reader: Reader, limits: Limits) -> dict[EventId, tuple[Event, int]]:
    """A ball as EpTO's ``Process.receive`` takes it. Duplicated event ids are
    rejected (``fault="duplicate"``): a correct sender never repeats one."""
    # One decoder for both: holding nothing, every copy is fresh.
    fresh, _, _ = decode_ball_held(reader, limits, _hold_nothing)
    return fresh


HeldLookup = Callable[[EventId], Event | None]
"""The event a receiver already holds under an id, or None (for example
``epto.epidemic.Process.held_event``)."""


def _hold_nothing(_eid: EventId) -> Event | None:
    return None


def decode_ball_held(
    reader: Reader, limits: Limits, held: HeldLookup
) -> tuple[CheckedBall, CheckedBall, CheckedBall]:
    """A ball decoded like :func:`decode_ball`, reusing the events ``held`` knows.

    Returns ``(fresh, reused, conflicting)``, three disjoint balls:

    * ``fresh``: copies of ids ``held`` does not know, decoded in full (these,
      and only these, still need a signature check in a signed group);
    * ``reused``: copies whose content (ts, payload, signature) equals the
      held event's: the entry is ``(held event, ttl of the copy)`` and no
      ``Event`` is built, no payload copied;
    * ``conflicting``: copies of a held id with another content, decoded in
      full. The receiver holds an event under that id already and keeps it
      (the held one wins); these are for counting, never for ordering.

    Every bound is checked on every entry before ``held`` is asked, exactly as
    :func:`decode_ball` checks them, with the same faults; an id twice in one
    frame is ``fault="duplicate"`` whichever of the three it falls in.
    """
    n = reader.count(2, limits.max_events_per_ball, EVENT_FIXED_SIZE, "events")
    data = reader.data
    pos = reader.pos
    end = reader.end
    max_payload = limits.max_payload_size
    unpack = _ENTRY.unpack_from
    startswith = data.startswith
    # Every value below is in range by construction (uint64 and uint16 fields,
    # bytes, a signature of 0 or 64 bytes): the process checks only timestamps.
    fresh = CheckedBall()
    reused = CheckedBall()
    conflicting = CheckedBall()
    for _ in range(n):
        if end - pos < EVENT_FIXED_SIZE:
            raise RemoteProtocolError("ball ends inside an event", fault="truncated")
        source, seq, ts, ttl, siglen, plen = unpack(data, pos)
        start = pos + EVENT_FIXED_SIZE + siglen
        pos = start + plen
        if pos > end or plen > max_payload or (siglen and siglen != SIGNATURE_SIZE):
            _diagnose(siglen, plen, max_payload)
            raise RemoteProtocolError("ball ends inside a payload", fault="truncated")
        eid = (source, seq)
        event = held(eid)
        if event is not None:
            # Compared in place (bytes.startswith at an offset copies nothing).
            payload = event.payload
            signature = event.signature
            if (
                event.ts == ts
                and len(payload) == plen
                and len(signature) == siglen
                and startswith(payload, start)
                and (not siglen or startswith(signature, start - siglen))
            ):
                reused[eid] = (event, ttl)
                continue
            out = conflicting
        else:
            out = fresh
        out[eid] = (
            Event(
                source=source,
                seq=seq,
                ts=ts,
                payload=data[start:pos],
                signature=data[start - siglen : start] if siglen else b"",
            ),
            ttl,
        )
    # An id lands in one ball per content, so a repeated id shrinks the sum,
    # except one copy equal to the held event and one not (checked apart).
    if len(fresh) + len(reused) + len(conflicting) != n or (
        conflicting and not reused.keys().isdisjoint(conflicting)
    ):
        raise RemoteProtocolError("an event id twice in one ball", fault="duplicate")
    reader.pos = pos
    return fresh, reused, conflicting


def _diagnose(siglen: int, plen: int, max_payload: int) -> None:
    if siglen and siglen != SIGNATURE_SIZE:
        raise RemoteProtocolError(f"signature of {siglen} bytes", fault="bad-signature-size")
    if plen > max_payload:
        raise RemoteProtocolError(f"payload of {plen} bytes", fault="oversized")


# -- Cyclon -----------------------------------------------------------------


def _encode_peers(entries: tuple[PeerDescriptor, ...], limits: Limits) -> bytes:
    if len(entries) > limits.max_peer_entries:
        raise LocalProtocolError(
            f"{len(entries)} peer entries exceed Limits.max_peer_entries={limits.max_peer_entries}"
        )
    parts = [_COUNT.pack(len(entries))]
    for entry in entries:
        if len(entry.address) > limits.max_address_size:
            raise LocalProtocolError(
                f"address of {len(entry.address)} bytes exceeds Limits.max_address_size"
            )
        try:
            parts.append(_PEER.pack(entry.pid, entry.age, len(entry.address)))
        except struct.error as exc:
            raise LocalProtocolError(f"peer descriptor out of range: {exc}") from None
        parts.append(entry.address)
    return b"".join(parts)


def _decode_peers(reader: Reader, limits: Limits) -> tuple[PeerDescriptor, ...]:
    n = reader.count(2, limits.max_peer_entries, PEER_FIXED_SIZE, "peer entries")
    out = []
    for _ in range(n):
        pid = reader.u64()
        age = reader.u32()
        address = reader.blob(reader.u16(), limits.max_address_size, "address")
        out.append(PeerDescriptor(pid=pid, address=address, age=age))
    return tuple(out)


def _encode_request(message: ShuffleRequest, limits: Limits) -> bytes:
    return _encode_peers(message.entries, limits)


def _decode_request(reader: Reader, limits: Limits) -> ShuffleRequest:
    return ShuffleRequest(entries=_decode_peers(reader, limits))


def _encode_reply(message: ShuffleReply, limits: Limits) -> bytes:
    return _encode_peers(message.entries, limits)


def _decode_reply(reader: Reader, limits: Limits) -> ShuffleReply:
    return ShuffleReply(entries=_decode_peers(reader, limits))


def _encode_leave(_message: Leave, _limits: Limits) -> bytes:
    return b""


def _decode_leave(_reader: Reader, _limits: Limits) -> Leave:
    return Leave()


BALL = FrameKind(code=KIND_BALL, name="ball", type=dict, encode=_encode_ball, decode=decode_ball)
"""An EpTO ball. Its Python type is ``dict`` (what ``Process.messages_to_send`` yields)."""
SHUFFLE_REQUEST = FrameKind(
    code=KIND_SHUFFLE_REQUEST,
    name="shuffle-request",
    type=ShuffleRequest,
    encode=_encode_request,
    decode=_decode_request,
)
SHUFFLE_REPLY = FrameKind(
    code=KIND_SHUFFLE_REPLY,
    name="shuffle-reply",
    type=ShuffleReply,
    encode=_encode_reply,
    decode=_decode_reply,
)
LEAVE = FrameKind(
    code=KIND_LEAVE, name="leave", type=Leave, encode=_encode_leave, decode=_decode_leave
)


def default_registry() -> FrameRegistry:
    """A new registry holding the ball and Cyclon kinds; register more on it."""
    return FrameRegistry((BALL, SHUFFLE_REQUEST, SHUFFLE_REPLY, LEAVE))
