"""What a token-ring member keeps on disk so that, started again, it votes as
the member it is (docs/token-ring.md, *A majority restarted at once*).

A member's vote in a view change is its acceptor's state (the configuration
installed, the ballot it promised, the value it accepted with its ballot)
and its report: the most advanced token snapshot it knows, with the
payloads of the window (the positions from the snapshot's ``low`` to its
``next_seq``). :class:`DurableState` is exactly that, for one member
incarnation; the process hands out a new one
(:meth:`~epto.tokenring.TokenRingProcess.take_durable`) whenever what it
vouches for changed (its acceptor's state, the configuration it installed,
a token state it accepted or created; a snapshot only learned from an
order notice waits for the next record), and the driver must have written
it (and flushed it, in the default mode) before it sends any frame the
process handed out after it: a promise or an acceptance, a token passed or
acknowledged, an order notice.

Rules:

* Written by a member (``role`` core or external): ``incarnation`` is its
  own, ``config`` the configuration it installed (with the events a full
  change settled: a member that missed the change installs it from this
  record's restart).
* Written by a later start that restored one and votes for the member
  until the group admits it: ``incarnation`` stays the member's (the one
  the group lists), the start's own is larger.
* :func:`encode_durable` / :func:`decode_durable`: the token-ring frame
  pieces, under a header (magic, format version, member id, a counter the
  driver numbers its records with) and a CRC-32 of everything; a record
  that does not decode exactly is None (the start then has no vote: the
  rule of a restart without state).
"""

from __future__ import annotations

import struct
import zlib

import attrs

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Event, ProcessId
from ..wire._frames import Reader
from ..wire._limits import Limits
from . import _frame_parts as fp
from ._messages import Ballot, RingConfig, TokenState

MAGIC = b"EPTV"
VERSION = 1
_HEAD = struct.Struct(">4sBIQQ")
"""magic, version, CRC-32 of what follows the header, member id, counter."""


@attrs.frozen(kw_only=True, slots=True)
class DurableState:
    """One member's vote, as it must survive the process (module rules)."""

    incarnation: int
    """The incarnation of the member whose vote this is."""
    config: RingConfig
    """The configuration installed; the acceptor's instance is its ``instance``."""
    promised: Ballot | None
    accepted: tuple[Ballot, RingConfig] | None
    state: TokenState
    """The most advanced token snapshot of ``config``'s token known here."""
    events: tuple[tuple[int, Event], ...]
    """The payloads held for positions in ``[state.low, state.next_seq)``."""

    def key(self) -> tuple[object, ...]:
        """What tells two records apart cheaply (a new one is due when it changes)."""
        accepted = None if self.accepted is None else self.accepted[0]
        return (self.incarnation, self.config.instance, self.promised, accepted, self.state.hop)


def encode_durable(pid: ProcessId, durable: DurableState, counter: int, limits: Limits) -> bytes:
    """The bytes of a record (raises :class:`LocalProtocolError` when it does
    not fit ``limits``)."""
    out = fp.Out()
    out.u32(durable.incarnation)
    fp.put_ring(out, durable.config, limits)
    if durable.promised is None:
        out.u8(0)
    else:
        out.u8(1)
        fp.put_ballot(out, durable.promised)
    if durable.accepted is None:
        out.u8(0)
    else:
        out.u8(1)
        fp.put_ballot(out, durable.accepted[0])
        fp.put_ring(out, durable.accepted[1], limits)
    fp.put_state(out, durable.state, limits)
    fp.put_seq_events(out, durable.events, limits)
    body = out.bytes()
    try:
        head = _HEAD.pack(MAGIC, VERSION, zlib.crc32(body), pid, counter)
    except struct.error as exc:
        raise LocalProtocolError(f"durable record field out of range: {exc}") from None
    return head + body


def decode_durable(pid: ProcessId, data: bytes, limits: Limits) -> tuple[int, DurableState] | None:
    """``(counter, state)`` of a record of member ``pid``, or None when the
    bytes are not one (torn, truncated, altered, another member's)."""
    if len(data) < _HEAD.size:
        return None
    magic, version, crc, owner, counter = _HEAD.unpack_from(data)
    body = data[_HEAD.size :]
    if magic != MAGIC or version != VERSION or owner != pid or zlib.crc32(body) != crc:
        return None
    r = Reader(body)
    try:
        incarnation = r.u32()
        config = fp.get_ring(r, limits)
        promised = fp.get_ballot(r) if fp.get_flag(r) else None
        accepted = None
        if fp.get_flag(r):
            accepted = (fp.get_ballot(r), fp.get_ring(r, limits))
        state = fp.get_state(r, limits)
        events = fp.get_seq_events(r, limits)
        r.finish()
    except RemoteProtocolError:
        return None
    if state.instance != config.instance or pid not in config.members:
        return None
    durable = DurableState(
        incarnation=incarnation,
        config=config,
        promised=promised,
        accepted=accepted,
        state=state,
        events=events,
    )
    return counter, durable
