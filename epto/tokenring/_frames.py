"""Frame kinds of the token ring (codes 16..31) and their body codecs, built
from the pieces of :mod:`._frame_parts`.

Layouts are in docs/wire-format.md ("Token ring"). A decoder raises only
``RemoteProtocolError``; an encoder raises ``LocalProtocolError`` for values
out of range or lists beyond the limits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..wire._frame_bodies import default_registry
from ..wire._frames import FrameKind, FrameRegistry, Reader
from ..wire._limits import Limits
from . import _frame_parts as fp
from ._messages import (
    Accept,
    Accepted,
    Catchup,
    ConfigRequest,
    Data,
    DataBatch,
    Decided,
    Delays,
    Fetch,
    Heartbeat,
    Join,
    Latencies,
    Nack,
    Order,
    Prepare,
    Probe,
    Promise,
    Report,
    Token,
    TokenAck,
)

# -- one encoder and decoder per message ------------------------------------------

Put = Callable[[fp.Out, Any, Limits], None]
Get = Callable[[Reader, Limits], Any]


def _data(out: fp.Out, m: Data, lim: Limits) -> None:
    fp.put_event(out, m.event, lim)


def _token(out: fp.Out, m: Token, lim: Limits) -> None:
    fp.put_state(out, m.state, lim)
    # Optional trailing fields: a token without them is the state alone, as
    # before. After the events, 8 bytes are forward_to, 1 byte copy, 9 both.
    if m.events or m.forward_to is not None or m.copy:
        fp.put_events(out, m.events, lim)
    if m.forward_to is not None:
        out.u64(m.forward_to)
    if m.copy:
        out.u8(m.copy)


def _get_token(r: Reader, lim: Limits) -> Token:
    state = fp.get_state(r, lim)
    events = fp.get_events(r, lim) if r.remaining else ()
    forward_to = r.u64() if r.remaining in (8, 9) else None
    copy = r.u8() if r.remaining == 1 else 0  # anything else is refused as trailing
    return Token(state=state, events=events, forward_to=forward_to, copy=copy)


def _token_ack(out: fp.Out, m: TokenAck, _lim: Limits) -> None:
    out.pack(fp.EID, m.instance, m.hop)
    if m.copy:
        out.u8(m.copy)  # optional: an acknowledgement of a first send is as before


def _get_token_ack(r: Reader, _lim: Limits) -> TokenAck:
    instance, hop = r.u64(), r.u64()
    return TokenAck(instance=instance, hop=hop, copy=r.u8() if r.remaining else 0)


def _order(out: fp.Out, m: Order, lim: Limits) -> None:
    fp.put_state(out, m.state, lim)
    fp.put_assigned(out, m.assigned, lim)


def _get_order(r: Reader, lim: Limits) -> Order:
    state = fp.get_state(r, lim)
    return Order(state=state, assigned=fp.get_assigned(r, lim))


def _heartbeat(out: fp.Out, m: Heartbeat, _lim: Limits) -> None:
    out.pack(fp.EID, m.instance, m.delivered)
    out.pack(fp.EID, m.sent, m.base)
    out.u64(m.received)
    out.u8(1 if m.missing else 0)
    out.u32(m.incarnation)


def _get_heartbeat(r: Reader, _lim: Limits) -> Heartbeat:
    instance, delivered, sent, base, received = (r.u64() for _ in range(5))
    return Heartbeat(
        instance=instance,
        delivered=delivered,
        sent=sent,
        base=base,
        received=received,
        missing=fp.get_flag(r),
        incarnation=r.u32(),
    )


def _join(out: fp.Out, m: Join, _lim: Limits) -> None:
    out.u32(m.incarnation)
    if m.resumes is not None:
        # Optional trailing field: a join without it is four bytes, as before.
        out.u32(m.resumes)


def _get_join(r: Reader, _lim: Limits) -> Join:
    incarnation = r.u32()
    return Join(incarnation=incarnation, resumes=r.u32() if r.remaining >= 4 else None)


def _fetch(out: fp.Out, m: Fetch, lim: Limits) -> None:
    out.pack(fp.EID, m.start, m.end)
    fp.put_ids(out, m.ids, lim)


def _catchup(out: fp.Out, m: Catchup, lim: Limits) -> None:
    out.pack(fp.EID, m.stable, m.oldest)
    fp.put_seq_events(out, m.entries, lim)
    fp.put_events(out, m.events, lim)


def _get_catchup(r: Reader, lim: Limits) -> Catchup:
    stable = r.u64()
    oldest = r.u64()
    entries = fp.get_seq_events(r, lim)
    events = fp.get_events(r, lim)
    return Catchup(entries=entries, events=events, stable=stable, oldest=oldest)


def _empty(_out: fp.Out, _m: object, _lim: Limits) -> None:
    return None


def _prepare(out: fp.Out, m: Prepare, _lim: Limits) -> None:
    out.u64(m.instance)
    fp.put_ballot(out, m.ballot)
    out.u8(1 if m.full else 0)


def _promise(out: fp.Out, m: Promise, lim: Limits) -> None:
    out.u64(m.instance)
    fp.put_ballot(out, m.ballot)
    if m.accepted is None:
        out.u8(0)
    else:
        out.u8(1)
        fp.put_ballot(out, m.accepted[0])
        fp.put_ring(out, m.accepted[1], lim)
    fp.put_state(out, m.report.state, lim)
    fp.put_seq_events(out, m.report.events, lim)
    out.u64(m.report.delivered)


def _get_promise(r: Reader, lim: Limits) -> Promise:
    instance = r.u64()
    ballot = fp.get_ballot(r)
    accepted = None
    if fp.get_flag(r):
        accepted = (fp.get_ballot(r), fp.get_ring(r, lim))
    state = fp.get_state(r, lim)
    events = fp.get_seq_events(r, lim)
    report = Report(state=state, events=events, delivered=r.u64())
    return Promise(instance=instance, ballot=ballot, accepted=accepted, report=report)


def _nack(out: fp.Out, m: Nack, _lim: Limits) -> None:
    out.u64(m.instance)
    fp.put_ballot(out, m.ballot)
    fp.put_ballot(out, m.promised)


def _accept(out: fp.Out, m: Accept, lim: Limits) -> None:
    out.u64(m.instance)
    fp.put_ballot(out, m.ballot)
    fp.put_ring(out, m.value, lim)


def _accepted(out: fp.Out, m: Accepted, _lim: Limits) -> None:
    out.u64(m.instance)
    fp.put_ballot(out, m.ballot)


def _decided(out: fp.Out, m: Decided, lim: Limits) -> None:
    fp.put_ring(out, m.config, lim)


_KINDS: tuple[tuple[int, str, type[Any], Put, Get], ...] = (
    (16, "tr-data", Data, _data, lambda r, lim: Data(event=fp.get_event(r, lim))),
    (17, "tr-token", Token, _token, _get_token),
    (
        18,
        "tr-token-ack",
        TokenAck,
        _token_ack,
        _get_token_ack,
    ),
    (19, "tr-order", Order, _order, _get_order),
    (20, "tr-heartbeat", Heartbeat, _heartbeat, _get_heartbeat),
    (
        21,
        "tr-fetch",
        Fetch,
        _fetch,
        lambda r, lim: Fetch(start=r.u64(), end=r.u64(), ids=fp.get_ids(r, lim)),
    ),
    (22, "tr-catchup", Catchup, _catchup, _get_catchup),
    (
        23,
        "tr-join",
        Join,
        _join,
        _get_join,
    ),
    (24, "tr-config-request", ConfigRequest, _empty, lambda r, lim: ConfigRequest()),
    (
        25,
        "tr-prepare",
        Prepare,
        _prepare,
        lambda r, lim: Prepare(instance=r.u64(), ballot=fp.get_ballot(r), full=fp.get_flag(r)),
    ),
    (26, "tr-promise", Promise, _promise, _get_promise),
    (
        27,
        "tr-nack",
        Nack,
        _nack,
        lambda r, lim: Nack(instance=r.u64(), ballot=fp.get_ballot(r), promised=fp.get_ballot(r)),
    ),
    (
        28,
        "tr-accept",
        Accept,
        _accept,
        lambda r, lim: Accept(instance=r.u64(), ballot=fp.get_ballot(r), value=fp.get_ring(r, lim)),
    ),
    (
        29,
        "tr-accepted",
        Accepted,
        _accepted,
        lambda r, lim: Accepted(instance=r.u64(), ballot=fp.get_ballot(r)),
    ),
    (30, "tr-decided", Decided, _decided, lambda r, lim: Decided(config=fp.get_ring(r, lim))),
    (
        31,
        "tr-data-batch",
        DataBatch,
        lambda out, m, lim: fp.put_events(out, m.events, lim),
        lambda r, lim: DataBatch(events=fp.get_events(r, lim)),
    ),
)


def _probe(out: fp.Out, m: Probe, _lim: Limits) -> None:
    fp.put_seconds(out, m.stamp)
    out.u8(1 if m.echo else 0)


def _latencies(out: fp.Out, m: Latencies, _lim: Limits) -> None:
    out.pack(fp.EID, m.instance, m.plan[0])
    out.u64(m.plan[1])
    fp.put_seconds(out, m.rate)
    fp.put_pid_seconds(out, m.row)


def _get_latencies(r: Reader, _lim: Limits) -> Latencies:
    instance, plan = r.u64(), (r.u64(), r.u64())
    rate = fp.get_seconds(r)
    return Latencies(instance=instance, plan=plan, rate=rate, row=fp.get_pid_seconds(r))


def _delays(out: fp.Out, m: Delays, _lim: Limits) -> None:
    out.pack(fp.EID, m.instance, m.epoch)
    fp.put_pid_seconds(out, m.row)


def _get_delays(r: Reader, _lim: Limits) -> Delays:
    instance, epoch = r.u64(), r.u64()
    return Delays(instance=instance, epoch=epoch, row=fp.get_pid_seconds(r))


_OPTIMISTIC_KINDS: tuple[tuple[int, str, type[Any], Put, Get], ...] = (
    (
        44,
        "tr-probe",
        Probe,
        _probe,
        lambda r, lim: Probe(stamp=fp.get_seconds(r), echo=fp.get_flag(r)),
    ),
    (45, "tr-latencies", Latencies, _latencies, _get_latencies),
    (46, "tr-delays", Delays, _delays, _get_delays),
)


def _encoder(put: Put) -> Callable[[Any, Limits], bytes]:
    def encode(message: Any, limits: Limits) -> bytes:
        out = fp.Out()
        put(out, message, limits)
        return out.bytes()

    return encode


TOKEN_RING_KINDS: tuple[FrameKind, ...] = tuple(
    FrameKind(code=code, name=name, type=cls, encode=_encoder(put), decode=get)
    for code, name, cls, put, get in _KINDS + _OPTIMISTIC_KINDS
)
"""One frame kind per token-ring message type: codes 16..31, and 44..46 for
optimistic delivery (sent only by groups that deliver optimistically)."""


def token_ring_registry() -> FrameRegistry:
    """A new registry with EpTO's and Cyclon's kinds and every token-ring kind."""
    registry = default_registry()
    for kind in TOKEN_RING_KINDS:
        registry.register(kind)
    return registry
