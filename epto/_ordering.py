"""EpTO's ordering component (EpTO paper, Algorithm 2), and only that.

Rules, line by line against Algorithm 2, with the corrections of JEpTO
(Gilberti and Lobba, Algorithm 1) as the default ``strict`` mode:

* Every round the ttl of every received event grows by one (lines 6-7). We
  store each event's *birth round* (``round - ttl``) instead, so ageing the
  whole set costs nothing: ttl = current round - birth.
* An event of the ball is accepted (lines 8-14) if
  ``strict``: ``ts > lastDeliveredTs``;
  ``paper``:  ``id not delivered and ts >= lastDeliveredTs``.
  An accepted event joins ``received`` or keeps the larger ttl (smaller birth).
* An event is deliverable when the stability oracle says so: ``ttl > TTL``
  (Algorithms 3 and 4 share this test; they differ in the clock, which lives
  in the process). ``minQueuedTs`` is the smallest ts of the rest (15-21).
* Deliverable events are held back when
  ``strict``: ``ts >= minQueuedTs``;  ``paper``: ``ts > minQueuedTs`` (22-26).
* The rest is delivered sorted by ``(ts, source)`` (27-30).

Why strict mode needs no ``delivered`` set: after a round, every event left
in ``received`` has ``ts > lastDeliveredTs`` (whatever was delivered had
``ts < minQueuedTs``), so the timestamp test alone rejects duplicates of
delivered events, and memory is bounded by what is in flight. Paper mode
accepts ``ts == lastDeliveredTs`` and must remember the ids delivered at that
timestamp, which is all it keeps.

Tagged out-of-order delivery (EpTO paper, section 8.2): an event the
timestamp test rejects, and that was never delivered, is delivered at once
with the OUT_OF_ORDER tag (the tagged deliveries of a round come before its
in-order ones, sorted by ``(ts, source)``). "Never delivered" is answered by per-source
intervals of delivered sequence numbers (:mod:`epto._intervals`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._ball import LayeredBall
from ._event import Ball, Delivery, DeliveryTag, Event, EventId, ProcessId
from ._intervals import SeqIntervals


def _order_key(event: Event) -> tuple[int, int]:
    return (event.ts, event.source)


class Ordering:
    """Orders the events handed to it once per round and emits deliveries."""

    __slots__ = (
        "_delivered_at_last_ts",
        "_delivered_seqs",
        "_emit",
        "_received",
        "_round",
        "_strict",
        "_top_seq",
        "_ttl",
        "delivered_in_order",
        "delivered_out_of_order",
        "last_delivered_ts",
        "rejected_delivered",
        "rejected_stale",
    )

    def __init__(
        self,
        *,
        ttl: int,
        strict: bool,
        tagged: bool,
        emit: Callable[[Delivery], None],
    ) -> None:
        self._ttl = ttl
        self._strict = strict
        self._emit = emit
        self._round = 0
        # id -> (event, birth round); ttl of the copy = self._round - birth
        self._received: dict[EventId, tuple[Event, int]] = {}
        self.last_delivered_ts = 0
        # Paper mode only: ids delivered with ts == last_delivered_ts.
        self._delivered_at_last_ts: set[EventId] = set()
        self._delivered_seqs: SeqIntervals | None = SeqIntervals() if tagged else None
        # Per source, the highest seq delivered: a copy of an id at or below
        # it that passes the timestamp test (a forgery, or a source that
        # equivocates; an honest copy of such an id is always stale) is
        # refused instead of being delivered twice. One int per source,
        # whatever the holes.
        self._top_seq: dict[ProcessId, int] = {}
        self.rejected_delivered = 0
        """Copies of delivered ids that passed the timestamp test (forged or
        equivocated: an honest copy of a delivered event never does)."""
        self.delivered_in_order = 0
        self.delivered_out_of_order = 0
        self.rejected_stale = 0
        """Copies refused by the timestamp test: duplicates of delivered events,
        or events that arrived after a later one was delivered (would-be holes).
        Without tagged delivery the two cannot be told apart in bounded memory."""

    @property
    def pending(self) -> int:
        """Events received and not yet delivered."""
        return len(self._received)

    def pending_events(self) -> list[tuple[Event, int]]:
        """``(event, ttl)`` of every received, undelivered event, in order-key order."""
        r = self._round
        items = [(ev, r - birth) for ev, birth in self._received.values()]
        items.sort(key=lambda item: _order_key(item[0]))
        return items

    def memory_sizes(self) -> dict[str, int]:
        sizes = {
            "received": len(self._received),
            "delivered_at_last_ts": len(self._delivered_at_last_ts),
        }
        if self._delivered_seqs is not None:
            sizes["delivered_intervals"] = self._delivered_seqs.interval_count()
        return sizes

    def order(self, ball: Ball) -> None:
        """``orderEvents(ball)``: one round of the ordering component.

        ``ball`` is any mapping ``{event id: (event, ttl)}``; a
        :class:`LayeredBall` is read layer by layer without building entries.
        """
        self._round += 1
        r = self._round
        received = self._received
        last = self.last_delivered_ts

        if ball:
            layers = ball._layers if type(ball) is LayeredBall else LayeredBall(ball)._layers
            get = received.get
            strict = self._strict
            at_last = self._delivered_at_last_ts
            top_seq = self._top_seq
            stale: list[Event] = []
            for ttl, layer in layers.items():
                birth = r - ttl
                for eid, event in layer.items():
                    ts = event.ts
                    if ts > last or (not strict and ts == last and eid not in at_last):
                        current = get(eid)
                        if current is None:
                            top = top_seq.get(eid[0])
                            if top is not None and eid[1] <= top:
                                self.rejected_delivered += 1
                                continue
                            received[eid] = (event, birth)
                        elif current[1] > birth:
                            received[eid] = (event, birth)
                    else:
                        stale.append(event)
            if stale:
                self._reject_stale(stale)

        if not received:
            return

        # Stable iff ttl > TTL, i.e. birth < r - TTL.
        threshold = r - self._ttl
        min_queued = None
        deliverable: list[Event] = []
        for event, birth in received.values():
            if birth < threshold:
                deliverable.append(event)
            elif min_queued is None or event.ts < min_queued:
                min_queued = event.ts
        if not deliverable:
            return
        if min_queued is not None:
            if self._strict:
                deliverable = [e for e in deliverable if e.ts < min_queued]
            else:
                deliverable = [e for e in deliverable if e.ts <= min_queued]
            if not deliverable:
                return
        deliverable.sort(key=_order_key)
        self._deliver_in_order(deliverable)

    def _deliver_in_order(self, events: list[Event]) -> None:
        received = self._received
        emit = self._emit
        seqs = self._delivered_seqs
        new_last = events[-1].ts
        if not self._strict:
            if new_last != self.last_delivered_ts:
                self._delivered_at_last_ts.clear()
            self._delivered_at_last_ts.update(e.id for e in events if e.ts == new_last)
        top_seq = self._top_seq
        for event in events:
            del received[(event.source, event.seq)]
            if seqs is not None:
                seqs.add(event.source, event.seq)
            if event.seq > top_seq.get(event.source, -1):
                top_seq[event.source] = event.seq
            emit(Delivery(event=event, tag=DeliveryTag.IN_ORDER))
        self.last_delivered_ts = new_last
        self.delivered_in_order += len(events)

    def _reject_stale(self, stale: list[Event]) -> None:
        """Copies refused by the timestamp test. With tagged delivery, those
        never delivered are delivered now, out of order, sorted by order key."""
        self.rejected_stale += len(stale)
        seqs = self._delivered_seqs
        if seqs is None:
            return
        stale.sort(key=_order_key)
        for event in stale:
            if seqs.add(event.source, event.seq):
                self.delivered_out_of_order += 1
                self._emit(Delivery(event=event, tag=DeliveryTag.OUT_OF_ORDER))

    def held_event(self, eid: EventId) -> Event | None:
        """The event received under ``eid`` and not delivered yet, or None."""
        entry = self._received.get(eid)
        return None if entry is None else entry[0]
