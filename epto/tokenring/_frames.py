"""Frame kinds of the token ring (codes 16..31) and their body codecs.

Layouts are in docs/wire-format.md ("Token ring"). Integers are big-endian;
every count is checked against a limit and against the bytes left before
anything is allocated (:meth:`epto.Reader.count`), so a decoder raises only
``RemoteProtocolError``. Encoders raise ``LocalProtocolError`` for values out
of range or lists beyond the limits.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from itertools import repeat
from typing import Any

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Event, EventId
from .._frame_bodies import default_registry
from .._frames import FrameKind, FrameRegistry, Reader
from .._limits import SIGNATURE_SIZE, Limits
from ._messages import (
    Accept,
    Accepted,
    Batch,
    Catchup,
    ConfigRequest,
    Data,
    DataBatch,
    Decided,
    Fetch,
    Heartbeat,
    Join,
    Nack,
    Order,
    Prepare,
    Promise,
    Report,
    RingConfig,
    Token,
    TokenAck,
    TokenState,
)

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_EVENT = struct.Struct(">QQQBI")
EVENT_HEAD_SIZE = _EVENT.size
"""Bytes of one event besides its signature and payload (29)."""
_STATE = struct.Struct(">QQQQQQ")
_RUN = struct.Struct(">QQI")
_SEQ_RUN = struct.Struct(">QQQI")
_U64_MAX = (1 << 64) - 1
MAX_MEMBERS = 0xFFFF
"""Most members or core members one configuration may list."""


class _Out:
    """Collects the parts of one body; packs with range checks."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def pack(self, fmt: struct.Struct, *values: int) -> None:
        try:
            self.parts.append(fmt.pack(*values))
        except struct.error as exc:
            raise LocalProtocolError(f"token-ring field out of range: {exc}") from None

    def u8(self, value: int) -> None:
        self.pack(_U8, value)

    def u16(self, value: int) -> None:
        self.pack(_U16, value)

    def u32(self, value: int) -> None:
        self.pack(_U32, value)

    def u64(self, value: int) -> None:
        self.pack(_U64, value)

    def count(self, n: int, limit: int, what: str) -> None:
        if n > limit:
            raise LocalProtocolError(f"{n} {what} exceed the limit {limit}")
        self.u32(n)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


_U8 = struct.Struct(">B")


# -- shared pieces ------------------------------------------------------------


def _put_event(out: _Out, event: Event, limits: Limits) -> None:
    if len(event.payload) > limits.max_payload_size:
        raise LocalProtocolError(
            f"payload of {len(event.payload)} bytes exceeds Limits.max_payload_size"
        )
    siglen = len(event.signature)
    if siglen not in (0, SIGNATURE_SIZE):
        raise LocalProtocolError(f"signature must be empty or 64 bytes, not {siglen}")
    out.pack(_EVENT, event.source, event.seq, event.ts, siglen, len(event.payload))
    out.parts += (event.signature, event.payload)


def _get_event(r: Reader, limits: Limits) -> Event:
    source, seq, ts, siglen, plen = r.unpack(_EVENT)
    if siglen not in (0, SIGNATURE_SIZE):
        raise RemoteProtocolError(f"signature of {siglen} bytes", fault="bad-signature-size")
    signature = r.blob(siglen, SIGNATURE_SIZE, "signature") if siglen else b""
    payload = r.blob(plen, limits.max_payload_size, "payload")
    return Event(source=source, seq=seq, ts=ts, payload=payload, signature=signature)


def _put_events(out: _Out, events: tuple[Event, ...], limits: Limits) -> None:
    out.count(len(events), limits.max_events_per_ball, "events")
    for event in events:
        _put_event(out, event, limits)


def _get_events(r: Reader, limits: Limits) -> tuple[Event, ...]:
    n = r.count(4, limits.max_events_per_ball, EVENT_HEAD_SIZE, "events")
    return tuple(_get_event(r, limits) for _ in range(n))


def _put_ids(out: _Out, ids: tuple[EventId, ...], limits: Limits) -> None:
    out.count(len(ids), limits.max_events_per_ball, "event ids")
    for source, seq in ids:
        out.pack(_EID, source, seq)


_EID = struct.Struct(">QQ")


def _get_ids(r: Reader, limits: Limits) -> tuple[EventId, ...]:
    n = r.count(4, limits.max_events_per_ball, _EID.size, "event ids")
    return tuple((r.u64(), r.u64()) for _ in range(n))


def _put_id_runs(out: _Out, ids: tuple[EventId, ...], limits: Limits) -> None:
    """Event ids as runs ``(source, first seq, count)``: a batch lists every
    source's messages consecutively, so it takes one run per source."""
    if len(ids) > limits.max_events_per_ball:
        raise LocalProtocolError(
            f"{len(ids)} event ids exceed the limit {limits.max_events_per_ball}"
        )
    runs: list[list[int]] = []
    for source, seq in ids:
        if runs:
            last = runs[-1]
            if last[0] == source and last[1] + last[2] == seq:
                last[2] += 1
                continue
        runs.append([source, seq, 1])
    out.u32(len(runs))
    for source, first, count in runs:
        out.pack(_RUN, source, first, count)


def _get_id_runs(r: Reader, limits: Limits) -> tuple[EventId, ...]:
    limit = limits.max_events_per_ball
    n = r.count(4, limit, _RUN.size, "id runs")
    ids: list[EventId] = []
    for _ in range(n):
        source, first, count = r.unpack(_RUN)
        _check_run(first, count, len(ids), limit)
        ids.extend(zip(repeat(source, count), range(first, first + count), strict=True))
    return tuple(ids)


def _check_run(first: int, count: int, have: int, limit: int) -> None:
    if count == 0 or first + count - 1 > _U64_MAX:
        raise RemoteProtocolError(f"run of {count} from {first}", fault="bad-value")
    if have + count > limit:
        raise RemoteProtocolError(f"more than {limit} ids in runs", fault="too-many")


def _put_assigned(out: _Out, assigned: tuple[tuple[int, EventId], ...], limits: Limits) -> None:
    """Assignments as runs ``(seq, source, first source seq, count)``."""
    if len(assigned) > limits.max_events_per_ball:
        raise LocalProtocolError(
            f"{len(assigned)} assignments exceed the limit {limits.max_events_per_ball}"
        )
    runs: list[list[int]] = []
    for seq, (source, sseq) in assigned:
        if runs:
            last = runs[-1]
            if last[1] == source and last[0] + last[3] == seq and last[2] + last[3] == sseq:
                last[3] += 1
                continue
        runs.append([seq, source, sseq, 1])
    out.u32(len(runs))
    for seq, source, first, count in runs:
        out.pack(_SEQ_RUN, seq, source, first, count)


def _get_assigned(r: Reader, limits: Limits) -> tuple[tuple[int, EventId], ...]:
    limit = limits.max_events_per_ball
    n = r.count(4, limit, _SEQ_RUN.size, "assignment runs")
    out: list[tuple[int, EventId]] = []
    for _ in range(n):
        seq, source, first, count = r.unpack(_SEQ_RUN)
        _check_run(max(seq, first), count, len(out), limit)
        out.extend((seq + i, (source, first + i)) for i in range(count))
    return tuple(out)


def _put_pids(out: _Out, pids: tuple[int, ...] | frozenset[int]) -> None:
    out.count(len(pids), MAX_MEMBERS, "process ids")
    for pid in sorted(pids) if isinstance(pids, frozenset) else pids:
        out.u64(pid)


def _get_pids(r: Reader) -> tuple[int, ...]:
    n = r.count(4, MAX_MEMBERS, 8, "process ids")
    return tuple(r.u64() for _ in range(n))


def _put_seq_events(out: _Out, entries: tuple[tuple[int, Event], ...], limits: Limits) -> None:
    out.count(len(entries), limits.max_events_per_ball, "events")
    for seq, event in entries:
        out.u64(seq)
        _put_event(out, event, limits)


def _get_seq_events(r: Reader, limits: Limits) -> tuple[tuple[int, Event], ...]:
    n = r.count(4, limits.max_events_per_ball, 8 + EVENT_HEAD_SIZE, "events")
    return tuple((r.u64(), _get_event(r, limits)) for _ in range(n))


def _put_state(out: _Out, s: TokenState, limits: Limits) -> None:
    out.pack(_STATE, s.instance, s.hop, s.next_seq, s.low, s.stable, s.low_digest)
    out.count(len(s.batches), limits.max_events_per_ball, "batches")
    for batch in s.batches:
        out.u64(batch.first)
        _put_id_runs(out, batch.ids, limits)
        _put_pids(out, batch.holders)
    out.count(len(s.sources), MAX_MEMBERS, "sources")
    for source, nxt in s.sources:
        out.pack(_EID, source, nxt)


def _get_state(r: Reader, limits: Limits) -> TokenState:
    instance, hop, next_seq, low, stable, digest = r.unpack(_STATE)
    n = r.count(4, limits.max_events_per_ball, 16, "batches")
    batches = tuple(
        Batch(first=r.u64(), ids=_get_id_runs(r, limits), holders=frozenset(_get_pids(r)))
        for _ in range(n)
    )
    n = r.count(4, MAX_MEMBERS, _EID.size, "sources")
    sources = tuple((r.u64(), r.u64()) for _ in range(n))
    return TokenState(
        instance=instance,
        hop=hop,
        next_seq=next_seq,
        low=low,
        stable=stable,
        batches=batches,
        low_digest=digest,
        sources=sources,
    )


def _put_ring(out: _Out, c: RingConfig, limits: Limits) -> None:
    out.u64(c.instance)
    out.u64(c.view)
    out.u8(1 if c.full else 0)
    _put_pids(out, c.members)
    _put_pids(out, c.core)
    _put_state(out, c.state, limits)
    _put_seq_events(out, c.events, limits)
    out.count(len(c.starts), MAX_MEMBERS, "starts")
    for member, seq, digest in c.starts:
        out.u64(member)
        out.u64(seq)
        out.u64(digest)


def _get_flag(r: Reader) -> bool:
    flag = r.u8()
    if flag > 1:
        raise RemoteProtocolError(f"flag byte {flag}", fault="bad-value")
    return flag == 1


def _get_ring(r: Reader, limits: Limits) -> RingConfig:
    instance = r.u64()
    view = r.u64()
    full = _get_flag(r)
    members = _get_pids(r)
    core = _get_pids(r)
    state = _get_state(r, limits)
    events = _get_seq_events(r, limits)
    n = r.count(4, MAX_MEMBERS, 24, "starts")
    starts = tuple((r.u64(), r.u64(), r.u64()) for _ in range(n))
    return RingConfig(
        instance=instance,
        view=view,
        members=members,
        core=core,
        state=state,
        events=events,
        full=full,
        starts=starts,
    )


def _put_ballot(out: _Out, ballot: tuple[int, int]) -> None:
    out.pack(_EID, ballot[0], ballot[1])


def _get_ballot(r: Reader) -> tuple[int, int]:
    return (r.u64(), r.u64())


# -- one encoder and decoder per message ------------------------------------------

Put = Callable[[_Out, Any, Limits], None]
Get = Callable[[Reader, Limits], Any]


def _data(out: _Out, m: Data, lim: Limits) -> None:
    _put_event(out, m.event, lim)


def _token(out: _Out, m: Token, lim: Limits) -> None:
    _put_state(out, m.state, lim)


def _token_ack(out: _Out, m: TokenAck, _lim: Limits) -> None:
    out.pack(_EID, m.instance, m.hop)


def _order(out: _Out, m: Order, lim: Limits) -> None:
    _put_state(out, m.state, lim)
    _put_assigned(out, m.assigned, lim)


def _get_order(r: Reader, lim: Limits) -> Order:
    state = _get_state(r, lim)
    return Order(state=state, assigned=_get_assigned(r, lim))


def _heartbeat(out: _Out, m: Heartbeat, _lim: Limits) -> None:
    out.pack(_EID, m.instance, m.delivered)


def _fetch(out: _Out, m: Fetch, lim: Limits) -> None:
    out.pack(_EID, m.start, m.end)
    _put_ids(out, m.ids, lim)


def _catchup(out: _Out, m: Catchup, lim: Limits) -> None:
    out.pack(_EID, m.stable, m.oldest)
    _put_seq_events(out, m.entries, lim)
    _put_events(out, m.events, lim)


def _get_catchup(r: Reader, lim: Limits) -> Catchup:
    stable = r.u64()
    oldest = r.u64()
    entries = _get_seq_events(r, lim)
    events = _get_events(r, lim)
    return Catchup(entries=entries, events=events, stable=stable, oldest=oldest)


def _empty(_out: _Out, _m: object, _lim: Limits) -> None:
    return None


def _prepare(out: _Out, m: Prepare, _lim: Limits) -> None:
    out.u64(m.instance)
    _put_ballot(out, m.ballot)
    out.u8(1 if m.full else 0)


def _promise(out: _Out, m: Promise, lim: Limits) -> None:
    out.u64(m.instance)
    _put_ballot(out, m.ballot)
    if m.accepted is None:
        out.u8(0)
    else:
        out.u8(1)
        _put_ballot(out, m.accepted[0])
        _put_ring(out, m.accepted[1], lim)
    _put_state(out, m.report.state, lim)
    _put_seq_events(out, m.report.events, lim)
    out.u64(m.report.delivered)


def _get_promise(r: Reader, lim: Limits) -> Promise:
    instance = r.u64()
    ballot = _get_ballot(r)
    accepted = None
    if _get_flag(r):
        accepted = (_get_ballot(r), _get_ring(r, lim))
    state = _get_state(r, lim)
    events = _get_seq_events(r, lim)
    report = Report(state=state, events=events, delivered=r.u64())
    return Promise(instance=instance, ballot=ballot, accepted=accepted, report=report)


def _nack(out: _Out, m: Nack, _lim: Limits) -> None:
    out.u64(m.instance)
    _put_ballot(out, m.ballot)
    _put_ballot(out, m.promised)


def _accept(out: _Out, m: Accept, lim: Limits) -> None:
    out.u64(m.instance)
    _put_ballot(out, m.ballot)
    _put_ring(out, m.value, lim)


def _accepted(out: _Out, m: Accepted, _lim: Limits) -> None:
    out.u64(m.instance)
    _put_ballot(out, m.ballot)


def _decided(out: _Out, m: Decided, lim: Limits) -> None:
    _put_ring(out, m.config, lim)


_KINDS: tuple[tuple[int, str, type[Any], Put, Get], ...] = (
    (16, "tr-data", Data, _data, lambda r, lim: Data(event=_get_event(r, lim))),
    (17, "tr-token", Token, _token, lambda r, lim: Token(state=_get_state(r, lim))),
    (
        18,
        "tr-token-ack",
        TokenAck,
        _token_ack,
        lambda r, lim: TokenAck(instance=r.u64(), hop=r.u64()),
    ),
    (19, "tr-order", Order, _order, _get_order),
    (
        20,
        "tr-heartbeat",
        Heartbeat,
        _heartbeat,
        lambda r, lim: Heartbeat(instance=r.u64(), delivered=r.u64()),
    ),
    (
        21,
        "tr-fetch",
        Fetch,
        _fetch,
        lambda r, lim: Fetch(start=r.u64(), end=r.u64(), ids=_get_ids(r, lim)),
    ),
    (22, "tr-catchup", Catchup, _catchup, _get_catchup),
    (23, "tr-join", Join, _empty, lambda r, lim: Join()),
    (24, "tr-config-request", ConfigRequest, _empty, lambda r, lim: ConfigRequest()),
    (
        25,
        "tr-prepare",
        Prepare,
        _prepare,
        lambda r, lim: Prepare(instance=r.u64(), ballot=_get_ballot(r), full=_get_flag(r)),
    ),
    (26, "tr-promise", Promise, _promise, _get_promise),
    (
        27,
        "tr-nack",
        Nack,
        _nack,
        lambda r, lim: Nack(instance=r.u64(), ballot=_get_ballot(r), promised=_get_ballot(r)),
    ),
    (
        28,
        "tr-accept",
        Accept,
        _accept,
        lambda r, lim: Accept(instance=r.u64(), ballot=_get_ballot(r), value=_get_ring(r, lim)),
    ),
    (
        29,
        "tr-accepted",
        Accepted,
        _accepted,
        lambda r, lim: Accepted(instance=r.u64(), ballot=_get_ballot(r)),
    ),
    (30, "tr-decided", Decided, _decided, lambda r, lim: Decided(config=_get_ring(r, lim))),
    (
        31,
        "tr-data-batch",
        DataBatch,
        lambda out, m, lim: _put_events(out, m.events, lim),
        lambda r, lim: DataBatch(events=_get_events(r, lim)),
    ),
)


def _encoder(put: Put) -> Callable[[Any, Limits], bytes]:
    def encode(message: Any, limits: Limits) -> bytes:
        out = _Out()
        put(out, message, limits)
        return out.bytes()

    return encode


TOKEN_RING_KINDS: tuple[FrameKind, ...] = tuple(
    FrameKind(code=code, name=name, type=cls, encode=_encoder(put), decode=get)
    for code, name, cls, put, get in _KINDS
)
"""One frame kind per token-ring message type, codes 16..31."""


def token_ring_registry() -> FrameRegistry:
    """A new registry with EpTO's and Cyclon's kinds and every token-ring kind."""
    registry = default_registry()
    for kind in TOKEN_RING_KINDS:
        registry.register(kind)
    return registry
