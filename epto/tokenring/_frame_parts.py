"""The pieces token-ring frame bodies are made of: events, id runs,
assignment runs, process ids, token states, configurations, ballots.

Integers are big-endian; every count is checked against a limit and against
the bytes left before anything is allocated (:meth:`epto.Reader.count`), so a
decoder raises only ``RemoteProtocolError``. Encoders raise
``LocalProtocolError`` for values out of range or lists beyond the limits.
Layouts are in docs/wire-format.md ("Token ring").
"""

from __future__ import annotations

import functools
import struct
from itertools import repeat

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Event, EventId
from ..wire._frames import Reader
from ..wire._limits import SIGNATURE_SIZE, Limits
from ._messages import Batch, RingConfig, TokenState

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
_F64 = struct.Struct(">d")
_PID_SECONDS = struct.Struct(">Qd")
MAX_SECONDS = 1e9
"""Largest time, latency or rate a frame may carry (and never NaN or < 0)."""
MAX_MEMBERS = 0xFFFF
"""Most members or core members one configuration may list."""


class Out:
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


def put_event(out: Out, event: Event, limits: Limits) -> None:
    if len(event.payload) > limits.max_payload_size:
        raise LocalProtocolError(
            f"payload of {len(event.payload)} bytes exceeds Limits.max_payload_size"
        )
    siglen = len(event.signature)
    if siglen not in (0, SIGNATURE_SIZE):
        raise LocalProtocolError(f"signature must be empty or 64 bytes, not {siglen}")
    out.pack(_EVENT, event.source, event.seq, event.ts, siglen, len(event.payload))
    out.parts += (event.signature, event.payload)


def get_event(r: Reader, limits: Limits) -> Event:
    source, seq, ts, siglen, plen = r.unpack(_EVENT)
    if siglen not in (0, SIGNATURE_SIZE):
        raise RemoteProtocolError(f"signature of {siglen} bytes", fault="bad-signature-size")
    signature = r.blob(siglen, SIGNATURE_SIZE, "signature") if siglen else b""
    payload = r.blob(plen, limits.max_payload_size, "payload")
    return Event(source=source, seq=seq, ts=ts, payload=payload, signature=signature)


def put_events(out: Out, events: tuple[Event, ...], limits: Limits) -> None:
    out.count(len(events), limits.max_events_per_ball, "events")
    for event in events:
        put_event(out, event, limits)


def get_events(r: Reader, limits: Limits) -> tuple[Event, ...]:
    n = r.count(4, limits.max_events_per_ball, EVENT_HEAD_SIZE, "events")
    return tuple([get_event(r, limits) for _ in range(n)])


def put_ids(out: Out, ids: tuple[EventId, ...], limits: Limits) -> None:
    out.count(len(ids), limits.max_events_per_ball, "event ids")
    for source, seq in ids:
        out.pack(EID, source, seq)


EID = struct.Struct(">QQ")


def get_ids(r: Reader, limits: Limits) -> tuple[EventId, ...]:
    n = r.count(4, limits.max_events_per_ball, EID.size, "event ids")
    return tuple((r.u64(), r.u64()) for _ in range(n))


def put_id_runs(out: Out, ids: tuple[EventId, ...], limits: Limits) -> None:
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


def get_id_runs(r: Reader, limits: Limits) -> tuple[EventId, ...]:
    limit = limits.max_events_per_ball
    n = r.count(4, limit, _RUN.size, "id runs")  # checks that the runs fit
    start = r.pos
    r.pos = start + n * _RUN.size
    return _expand_runs(bytes(r.data[start : r.pos]), limit)


@functools.lru_cache(maxsize=32)
def _expand_runs(runs: bytes, limit: int) -> tuple[EventId, ...]:
    """The ids the encoded ``runs`` list, checked (a refusal raises, and is
    not remembered). Remembered because a token carries each batch of its
    window on every hop until the batch is stable: a member expands it once,
    and the same tuple comes back for the later hops, which also makes
    recognising a batch it learned already (``OrderBook.learn_batches``) an
    identity test. Bounded: 32 batches of at most ``limit`` ids."""
    ids: list[EventId] = []
    for source, first, count in _RUN.iter_unpack(runs):
        check_run(first, count, len(ids), limit)
        ids.extend(zip(repeat(source, count), range(first, first + count), strict=True))
    return tuple(ids)


def check_run(first: int, count: int, have: int, limit: int) -> None:
    if count == 0 or first + count - 1 > _U64_MAX:
        raise RemoteProtocolError(f"run of {count} from {first}", fault="bad-value")
    if have + count > limit:
        raise RemoteProtocolError(f"more than {limit} ids in runs", fault="too-many")


def put_assigned(out: Out, assigned: tuple[tuple[int, EventId], ...], limits: Limits) -> None:
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


def get_assigned(r: Reader, limits: Limits) -> tuple[tuple[int, EventId], ...]:
    limit = limits.max_events_per_ball
    n = r.count(4, limit, _SEQ_RUN.size, "assignment runs")
    out: list[tuple[int, EventId]] = []
    for _ in range(n):
        seq, source, first, count = r.unpack(_SEQ_RUN)
        check_run(max(seq, first), count, len(out), limit)
        out.extend((seq + i, (source, first + i)) for i in range(count))
    return tuple(out)


def put_pids(out: Out, pids: tuple[int, ...] | frozenset[int]) -> None:
    out.count(len(pids), MAX_MEMBERS, "process ids")
    for pid in sorted(pids) if isinstance(pids, frozenset) else pids:
        out.u64(pid)


def get_pids(r: Reader) -> tuple[int, ...]:
    n = r.count(4, MAX_MEMBERS, 8, "process ids")
    return tuple(r.u64() for _ in range(n))


def put_seq_events(out: Out, entries: tuple[tuple[int, Event], ...], limits: Limits) -> None:
    out.count(len(entries), limits.max_events_per_ball, "events")
    for seq, event in entries:
        out.u64(seq)
        put_event(out, event, limits)


def get_seq_events(r: Reader, limits: Limits) -> tuple[tuple[int, Event], ...]:
    n = r.count(4, limits.max_events_per_ball, 8 + EVENT_HEAD_SIZE, "events")
    return tuple((r.u64(), get_event(r, limits)) for _ in range(n))


def put_state(out: Out, s: TokenState, limits: Limits) -> None:
    out.pack(_STATE, s.instance, s.hop, s.next_seq, s.low, s.stable, s.low_digest)
    out.count(len(s.batches), limits.max_events_per_ball, "batches")
    for batch in s.batches:
        out.u64(batch.first)
        put_id_runs(out, batch.ids, limits)
        put_pids(out, batch.holders)
    out.count(len(s.sources), MAX_MEMBERS, "sources")
    for source, nxt in s.sources:
        out.pack(EID, source, nxt)


def get_state(r: Reader, limits: Limits) -> TokenState:
    instance, hop, next_seq, low, stable, digest = r.unpack(_STATE)
    n = r.count(4, limits.max_events_per_ball, 16, "batches")
    batches = tuple(
        Batch(first=r.u64(), ids=get_id_runs(r, limits), holders=frozenset(get_pids(r)))
        for _ in range(n)
    )
    n = r.count(4, MAX_MEMBERS, EID.size, "sources")
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


def put_ring(out: Out, c: RingConfig, limits: Limits) -> None:
    out.u64(c.instance)
    out.u64(c.view)
    out.u8(1 if c.full else 0)
    put_pids(out, c.members)
    put_pids(out, c.core)
    put_state(out, c.state, limits)
    put_seq_events(out, c.events, limits)
    out.count(len(c.starts), MAX_MEMBERS, "starts")
    for member, seq, digest in c.starts:
        out.u64(member)
        out.u64(seq)
        out.u64(digest)
    out.count(len(c.incarnations), MAX_MEMBERS, "incarnations")
    for member, incarnation in c.incarnations:
        out.u64(member)
        out.u32(incarnation)


def _seconds(value: float) -> float:
    if not 0.0 <= value <= MAX_SECONDS:  # False for NaN
        raise LocalProtocolError(f"{value!r} is not in [0, {MAX_SECONDS:g}]")
    return value


def _checked_seconds(value: float) -> float:
    if not 0.0 <= value <= MAX_SECONDS:
        raise RemoteProtocolError(f"{value!r} is not in [0, {MAX_SECONDS:g}]", fault="bad-value")
    return value


def put_seconds(out: Out, value: float) -> None:
    """A non-negative float (a time, a latency, a rate) as an IEEE 754 double."""
    out.parts.append(_F64.pack(_seconds(float(value))))


def get_seconds(r: Reader) -> float:
    (value,) = r.unpack(_F64)
    return _checked_seconds(value)


def put_pid_seconds(out: Out, row: tuple[tuple[int, float], ...]) -> None:
    """``(process id, seconds)`` pairs: a latency or delay row."""
    out.count(len(row), MAX_MEMBERS, "row entries")
    for pid, value in row:
        out.pack(_U64, pid)
        out.parts.append(_F64.pack(_seconds(float(value))))


def get_pid_seconds(r: Reader) -> tuple[tuple[int, float], ...]:
    n = r.count(4, MAX_MEMBERS, _PID_SECONDS.size, "row entries")
    row = []
    for _ in range(n):
        pid, value = r.unpack(_PID_SECONDS)
        row.append((pid, _checked_seconds(value)))
    return tuple(row)


def get_flag(r: Reader) -> bool:
    flag = r.u8()
    if flag > 1:
        raise RemoteProtocolError(f"flag byte {flag}", fault="bad-value")
    return flag == 1


def get_ring(r: Reader, limits: Limits) -> RingConfig:
    instance = r.u64()
    view = r.u64()
    full = get_flag(r)
    members = get_pids(r)
    core = get_pids(r)
    state = get_state(r, limits)
    events = get_seq_events(r, limits)
    n = r.count(4, MAX_MEMBERS, 24, "starts")
    starts = tuple((r.u64(), r.u64(), r.u64()) for _ in range(n))
    n = r.count(4, MAX_MEMBERS, 12, "incarnations")
    incarnations = tuple((r.u64(), r.u32()) for _ in range(n))
    return RingConfig(
        instance=instance,
        view=view,
        members=members,
        core=core,
        state=state,
        events=events,
        full=full,
        starts=starts,
        incarnations=incarnations,
    )


def put_ballot(out: Out, ballot: tuple[int, int]) -> None:
    out.pack(EID, ballot[0], ballot[1])


def get_ballot(r: Reader) -> tuple[int, int]:
    return (r.u64(), r.u64())
