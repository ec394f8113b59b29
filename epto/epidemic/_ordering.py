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

How a round costs about one set operation per layer, not Python statements
per copy (the rules above are unchanged): received events are bucketed by
birth round. A process's merged ball keeps the larger ttl and ages every copy
by one a round, so an event received again is nearly always at the birth it
already has: a layer's ids minus the bucket of its birth (a set difference)
leaves only the new ids and those whose birth may change, which are then
taken one by one. A layer whose timestamp floor (:mod:`epto.epidemic._ball`) is above
``lastDeliveredTs`` holds no copy the timestamp test refuses; any other layer
is taken copy by copy. A bucket turns deliverable as a whole when the round
passes its birth plus TTL; deliverable events wait in a heap by order key,
and ``minQueuedTs`` is the smallest of the per-bucket minimum timestamps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from heapq import heapify, heappop, heappush
from typing import TypeAlias

from .._event import Ball, Delivery, DeliveryTag, Event, EventId, ProcessId
from .._intervals import SeqIntervals
from ._ball import LayeredBall

_Ready: TypeAlias = tuple[int, int, int, int, Event]
"""A deliverable event in the heap: ``(ts, source, arrival, push, event)``.
``arrival`` numbers the events in the order they were first received (the
tie-break of Algorithm 2's stable sort); ``push`` makes entries distinct."""


_SMALL_LAYER = 32
"""Layers below this size are first tested whole against their bucket."""


def _order_key(event: Event) -> tuple[int, int]:
    return (event.ts, event.source)


class Ordering:
    """Orders the events handed to it once per round and emits deliveries."""

    __slots__ = (
        "_arrivals",
        "_bucket_min",
        "_buckets",
        "_delivered_at_last_ts",
        "_delivered_seqs",
        "_emit",
        "_pushes",
        "_ready",
        "_received",
        "_ripe",
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
        # id -> (event, birth round, arrival number); ttl of the copy =
        # self._round - birth. Insertion order is arrival order.
        self._received: dict[EventId, tuple[Event, int, int]] = {}
        self._arrivals = 0
        # birth round -> ids received with that birth, and the smallest
        # timestamp among them (None: to recompute, after a removal).
        self._buckets: dict[int, set[EventId]] = {}
        self._bucket_min: dict[int, int | None] = {}
        # Births below this are deliverable and their events are in _ready.
        self._ripe = -ttl
        self._ready: list[_Ready] = []
        self._pushes = 0
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
        items = [(ev, r - birth) for ev, birth, _ in self._received.values()]
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
        if ball:
            parts = ball.parts if type(ball) is LayeredBall else LayeredBall(ball).parts
            last = self.last_delivered_ts
            stale: list[Event] = []
            bucket_of = self._buckets.get
            small = _SMALL_LAYER
            for ttl, layer, floor, _ in parts:
                birth = r - ttl
                if floor <= last:
                    self._take_checked(layer, birth, stale)
                    continue
                # No copy of this layer fails the timestamp test; those at
                # the birth their event already has change nothing.
                bucket = bucket_of(birth)
                if bucket is None:
                    self._take(layer, birth, layer)
                    continue
                # One call, which hashes every id again: cheap for a few.
                if len(layer) < small and bucket.issuperset(layer):
                    continue
                rest = set(layer)
                rest.difference_update(bucket)
                if rest:
                    self._take(layer, birth, rest)
            if stale:
                self._reject_stale(stale)

        # Stable iff ttl > TTL, i.e. birth < r - TTL.
        threshold = r - self._ttl
        if threshold > self._ripe:
            self._ripen(threshold)
        if not self._ready:
            return
        min_queued = self._min_queued()
        ready = self._ready
        received = self._received
        strict = self._strict
        deliverable: list[Event] = []
        while ready:
            entry = ready[0]
            if min_queued is not None and (
                entry[0] >= min_queued if strict else entry[0] > min_queued
            ):
                break
            heappop(ready)
            event = entry[4]
            current = received.get((event.source, event.seq))
            if current is not None and current[0] is event:
                deliverable.append(event)
        if deliverable:
            self._deliver_in_order(deliverable)

    def _take(self, layer: dict[EventId, Event], birth: int, ids: Iterable[EventId]) -> None:
        """Copies of ``layer`` (every one passing the timestamp test) whose id
        is in ``ids``: a new id joins ``received``, a known one keeps the
        smaller birth."""
        received = self._received
        get = received.get
        fresh: list[EventId] = []
        for eid in ids:
            current = get(eid)
            if current is None:
                fresh.append(eid)
            elif current[1] > birth:
                self._rebirth(eid, layer[eid], birth, current)
        if not fresh:
            return
        if len(fresh) > 1 and ids is not layer:
            # Arrival order is the layer's order (the tie-break of the sort).
            wanted = set(fresh)
            fresh = [eid for eid in layer if eid in wanted]
        top_seq = self._top_seq
        for eid in fresh:
            top = top_seq.get(eid[0])
            if top is not None and eid[1] <= top:
                self.rejected_delivered += 1
                continue
            self._add(eid, layer[eid], birth)

    def _take_checked(self, layer: dict[EventId, Event], birth: int, stale: list[Event]) -> None:
        """Copies of ``layer``, each through the timestamp test (lines 8-14)."""
        received = self._received
        get = received.get
        last = self.last_delivered_ts
        strict = self._strict
        at_last = self._delivered_at_last_ts
        top_seq = self._top_seq
        for eid, event in layer.items():
            ts = event.ts
            if ts > last or (not strict and ts == last and eid not in at_last):
                current = get(eid)
                if current is None:
                    top = top_seq.get(eid[0])
                    if top is not None and eid[1] <= top:
                        self.rejected_delivered += 1
                        continue
                    self._add(eid, event, birth)
                elif current[1] > birth:
                    self._rebirth(eid, event, birth, current)
            else:
                stale.append(event)

    def _add(self, eid: EventId, event: Event, birth: int) -> None:
        arrival = self._arrivals
        self._arrivals = arrival + 1
        self._received[eid] = (event, birth, arrival)
        self._into_bucket(eid, event, birth)
        if birth < self._ripe:
            self._push(event, arrival)

    def _rebirth(
        self, eid: EventId, event: Event, birth: int, current: tuple[Event, int, int]
    ) -> None:
        """A copy with a smaller birth: it replaces the event (line 13)."""
        old, old_birth, arrival = current
        self._received[eid] = (event, birth, arrival)
        self._out_of_bucket(eid, old, old_birth)
        self._into_bucket(eid, event, birth)
        if birth < self._ripe and (old_birth >= self._ripe or event is not old):
            self._push(event, arrival)

    def _into_bucket(self, eid: EventId, event: Event, birth: int) -> None:
        bucket = self._buckets.get(birth)
        if bucket is None:
            self._buckets[birth] = {eid}
            self._bucket_min[birth] = event.ts
            return
        bucket.add(eid)
        low = self._bucket_min[birth]
        if low is not None and event.ts < low:
            self._bucket_min[birth] = event.ts

    def _out_of_bucket(self, eid: EventId, event: Event, birth: int) -> None:
        bucket = self._buckets[birth]
        bucket.discard(eid)
        if not bucket:
            del self._buckets[birth]
            del self._bucket_min[birth]
        elif self._bucket_min[birth] == event.ts:
            self._bucket_min[birth] = None

    def _push(self, event: Event, arrival: int) -> None:
        self._pushes += 1
        heappush(self._ready, (event.ts, event.source, arrival, self._pushes, event))

    def _ripen(self, threshold: int) -> None:
        """Births from the last threshold up to ``threshold`` turn deliverable."""
        ripe = self._ripe
        received = self._received
        ready = self._ready
        pushes = self._pushes
        for birth in [b for b in self._buckets if ripe <= b < threshold]:
            for eid in self._buckets[birth]:
                event, _, arrival = received[eid]
                pushes += 1
                ready.append((event.ts, event.source, arrival, pushes, event))
        self._pushes = pushes
        heapify(ready)
        self._ripe = threshold

    def _min_queued(self) -> int | None:
        """``minQueuedTs``: the smallest timestamp of the events not yet deliverable."""
        ripe = self._ripe
        bucket_min = self._bucket_min
        low: int | None = None
        for birth, value in bucket_min.items():
            if birth < ripe:
                continue
            if value is None:
                received = self._received
                value = min(received[eid][0].ts for eid in self._buckets[birth])
                bucket_min[birth] = value
            if low is None or value < low:
                low = value
        return low

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
        buckets = self._buckets
        for event in events:
            eid = (event.source, event.seq)
            birth = received.pop(eid)[1]
            # A deliverable birth: its bucket's minimum is no longer read.
            bucket = buckets[birth]
            bucket.discard(eid)
            if not bucket:
                del buckets[birth]
                del self._bucket_min[birth]
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

    def resume_after(self, ts: int) -> None:
        """Treat the order up to ``ts`` as delivered (a restarted member's
        earlier incarnation delivered it): later copies at or below ``ts``
        fail the timestamp test like any stale copy."""
        if ts > self.last_delivered_ts:
            self.last_delivered_ts = ts
            self._delivered_at_last_ts.clear()
            # Pending events at or below ts could never be delivered now.
            for eid in [eid for eid, entry in self._received.items() if entry[0].ts <= ts]:
                event, birth, _ = self._received.pop(eid)
                self._out_of_bucket(eid, event, birth)
                self.rejected_stale += 1

    def held_event(self, eid: EventId) -> Event | None:
        """The event received under ``eid`` and not delivered yet, or None."""
        entry = self._received.get(eid)
        return None if entry is None else entry[0]
