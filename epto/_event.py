"""Value objects: events, deliveries and balls.

An event is immutable; the ttl of a copy travels beside it in a ball, never in
it (DESIGN.md section 4), so one ``Event`` object can be shared by every ball
and every process of a simulation.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeAlias

import attrs

ProcessId: TypeAlias = int
"""Processes are named by non-negative integers below 2**64."""

EventId: TypeAlias = tuple[int, int]
"""``(source, seq)``: seq counts the source's broadcasts, from
``incarnation << 32`` (0 in a process's first and only start; a restarted
member numbers above every earlier start: :mod:`epto._incarnation`)."""


@attrs.frozen(kw_only=True, slots=True)
class Event:
    """One broadcast event.

    The order key is ``(ts, source)``; every source's timestamps strictly
    increase, so the key is unique.
    """

    source: ProcessId
    seq: int
    ts: int
    payload: bytes
    signature: bytes = b""
    """Ed25519 signature of the source over (source, seq, ts, payload), or empty
    when the group does not sign events. Relays forward it unchanged."""

    @property
    def id(self) -> EventId:
        return (self.source, self.seq)


BallEntry: TypeAlias = tuple[Event, int]
"""An event and the ttl of this copy."""

Ball: TypeAlias = Mapping[EventId, BallEntry]
"""What one process gossips to K peers in a round.

A ball is a set of copies keyed by event id. Processes hand out
:class:`epto.LayeredBall` objects (the same mapping stored by ttl, so that
receivers merge copies with dict operations); any mapping is accepted on
receipt. A ball is never mutated once handed out, so one ball object may be
shared by every receiver. Receivers must not mutate it either.
"""


class DeliveryTag(enum.Enum):
    """How an event reached the application."""

    IN_ORDER = "in-order"
    """Delivered in the total order."""
    OUT_OF_ORDER = "out-of-order"
    """Arrived after later events had been delivered; delivered on request,
    at most once, outside the total order (EpTO paper section 8.2)."""
    OPTIMISTIC = "optimistic"
    """Delivered before its position is known, in the order the delays of
    optimistic delivery predict (docs/optimistic.md); its ``FINAL`` delivery
    follows."""
    FINAL = "final"
    """Delivered in the total order, in a group that delivers optimistically:
    ``Delivery.reordered`` says whether the optimistic delivery predicted it."""
    REVOKED = "revoked"
    """The end of an ``OPTIMISTIC`` delivery whose message is not in the total
    order and never will be: its source left the view before the group
    sequenced it (docs/optimistic.md). Not a step of the total order."""


@attrs.frozen(kw_only=True, slots=True)
class Delivery:
    """An event handed to the application, with the round it was delivered in."""

    event: Event
    tag: DeliveryTag = DeliveryTag.IN_ORDER
    reordered: bool = False
    """On a ``FINAL`` delivery: True unless this event was the oldest optimistic
    delivery not yet final here. True means the application's tentative state
    is wrong from here on (the event was delivered optimistically elsewhere in
    the order, or not at all yet): rebuild it from the final state plus the
    optimistic deliveries still pending. False on every other tag."""

    @property
    def in_total_order(self) -> bool:
        """Whether this delivery is a step of the total order (``IN_ORDER`` or ``FINAL``)."""
        return self.tag is DeliveryTag.IN_ORDER or self.tag is DeliveryTag.FINAL
