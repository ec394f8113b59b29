"""Optimistic delivery with delay compensation (seed 001) in a token-ring
process: the part that delivers messages before their position is known.

Every broadcast already goes to every member directly. With
``TokenRingConfig.optimistic`` set, a member also delivers each message
*optimistically* at ``arrival + delay[source]`` (tag ``OPTIMISTIC``), where
the delays come from a plan that makes every member see the same spontaneous
order; the holder of the token sequences, in its own optimistic order, the
messages it delivered optimistically; the final delivery (tag ``FINAL``)
follows the sequence numbers and says whether the optimistic delivery
predicted its position (``Delivery.reordered``).

Rules:

* **Scheduling.** A message is scheduled once, when it enters the order book
  here (a broadcast, a payload, a catch-up), at ``now + delay[source]``,
  never earlier than the source's previous message (a new plan never
  reorders one source's messages). A message final before its time is not
  delivered optimistically.
* **Tentative order.** Messages delivered optimistically and not yet final
  are kept in the order of their optimistic delivery. A final delivery
  confirms (``reordered=False``) only the oldest of them; any other final
  delivery is ``reordered=True`` (the application rebuilds its tentative
  state from the final one plus the tentative messages still pending).
* **Sequencing.** The holder sequences its tentative messages that are not
  sequenced yet, in their optimistic order, after delivering what is due;
  a message in the pool that was never scheduled here (it arrived through a
  view change) is scheduled on the spot, so every message is sequenced
  eventually. Each source's messages still go in ``seq`` order
  (:func:`._sequencer.pick`).
* **Delays** come from :class:`._delayplans.DelayPlans` (probes, reports,
  the coordinator's plans); until a plan arrives they are zero.
* **Revocation.** When this member installs a configuration without a
  source, that source's messages (of the incarnation that left, or an
  earlier one) that the configuration's decided state has not sequenced are
  *departed*: no holder of this or any later configuration sequences them
  (they are left out of :meth:`OptimisticPath.sequencing_order`), so they
  are not in the order and never will be. Each one delivered optimistically
  here ends with a ``REVOKED`` delivery; the others leave the pool unseen.
  Every member of the group takes the same decision from the same decided
  state (with the default ``k``, no assignment outside it becomes stable).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable

from .._event import Delivery, DeliveryTag, Event, EventId, ProcessId
from .._incarnation import COUNT_BITS
from ._delayplans import DelayPlans
from ._membership import Role
from ._shared import Shared
from ._stats import OptimisticStatistics


class OptimisticPath:
    """Optimistic deliveries for one process; ``plans`` owns the delays."""

    __slots__ = (
        "_deliveries",
        "_departed",
        "_instance",
        "_last",
        "_members",
        "_s",
        "_scheduled",
        "_tentative",
        "_waiting",
        "confirmed",
        "optimistic",
        "plans",
        "reordered",
        "revoked",
        "unannounced",
    )

    def __init__(self, shared: Shared, plans: DelayPlans, deliveries: deque[Delivery]) -> None:
        self._s = shared
        self.plans = plans
        self._deliveries = deliveries
        """Filled here and by the data path, emptied by the process's outputs."""
        self._scheduled: list[tuple[float, ProcessId, int]] = []
        """Heap of (optimistic time, source, seq); entries no longer in
        ``_waiting`` are stale and skipped."""
        self._waiting: dict[EventId, float] = {}
        """Scheduled, not yet delivered optimistically nor final here."""
        self._last: dict[ProcessId, float] = {}
        """Latest optimistic time given to each source's messages."""
        self._tentative: dict[EventId, None] = {}
        """Delivered optimistically and not yet final, in delivery order."""
        self._instance = shared.ring.instance
        self._members = frozenset(shared.ring.members)
        self._departed: dict[ProcessId, int] = {}
        """Sources that left the view: their messages of this incarnation or
        an earlier one are never sequenced from then on."""
        self.optimistic = 0
        self.confirmed = 0
        self.reordered = 0
        self.unannounced = 0
        self.revoked = 0

    # -- sources that left ---------------------------------------------------------

    def _departed_message(self, eid: EventId) -> bool:
        bound = self._departed.get(eid[0])
        return bound is not None and eid[1] >> COUNT_BITS <= bound

    def _check_view(self) -> None:
        """On a newly installed configuration: the sources it left out are
        departed, and their messages that its decided state did not sequence
        end here."""
        s = self._s
        config = s.ring
        if config.instance == self._instance:
            return
        self._instance = config.instance
        members = frozenset(config.members)
        gone = self._members - members
        self._members = members
        departed = self._departed
        for pid in gone:
            departed[pid] = max(departed.get(pid, -1), self._highest_incarnation(pid))
        limit = 4 * len(members) + 64
        if len(departed) > limit:
            # The oldest departures have no message left in flight.
            self._departed = dict(list(departed.items())[-limit:])
        self._revoke(config.state.already_sequenced)

    def _highest_incarnation(self, pid: ProcessId) -> int:
        """The incarnation of ``pid`` that left: the one recorded, or the
        highest among its messages here."""
        known = self._s.incarnations.get(pid)
        highest = -1 if known is None else known
        for ids in (self._s.book.pool, self._waiting, self._tentative):
            for source, seq in ids:
                if source == pid:
                    highest = max(highest, seq >> COUNT_BITS)
        return highest

    def _revoke(self, sequenced: Callable[[EventId], bool]) -> None:
        """End every departed message not ``sequenced``: ``REVOKED`` if it was
        delivered optimistically here, dropped silently otherwise."""
        departed = self._departed_message
        book = self._s.book
        pool = book.pool
        for eid in [e for e in self._tentative if departed(e) and not sequenced(e)]:
            del self._tentative[eid]
            event = book.payload(eid)
            if event is None:  # not kept here any more: the id still ends
                event = Event(source=eid[0], seq=eid[1], ts=0, payload=b"")
            self._deliveries.append(Delivery(event=event, tag=DeliveryTag.REVOKED))
            self.revoked += 1
        for eid in [e for e in self._waiting if departed(e) and not sequenced(e)]:
            del self._waiting[eid]
        for eid in [e for e in pool if departed(e) and not sequenced(e)]:
            del pool[eid]

    # -- optimistic deliveries -------------------------------------------------

    def arrived(self, event: Event, now: float) -> None:
        """Schedule the optimistic delivery of ``event``, which just entered the book."""
        eid = event.id
        if eid in self._waiting or eid in self._tentative:
            return
        self._check_view()
        if self._departed_message(eid) and not self._s.ring.state.already_sequenced(eid):
            self._s.book.pool.pop(eid, None)  # never sequenced: never delivered here
            return
        source = event.source
        at = max(now + self.plans.delays.get(source, 0.0), self._last.get(source, -math.inf))
        last = self._last
        last[source] = at
        if len(last) > 4 * len(self._s.ring.members) + 16:
            members = set(self._s.ring.members)
            self._last = {p: t for p, t in last.items() if p in members or p == source}
        self._waiting[eid] = at
        heapq.heappush(self._scheduled, (at, source, event.seq))

    def deliver_due(self, now: float) -> None:
        """Deliver optimistically every scheduled message whose time has come."""
        self._check_view()
        heap = self._scheduled
        waiting = self._waiting
        book = self._s.book
        while heap and heap[0][0] <= now:
            _, source, seq = heapq.heappop(heap)
            eid = (source, seq)
            if waiting.pop(eid, None) is None:
                continue  # final already
            event = book.payload(eid)
            if event is None:
                continue
            self._tentative[eid] = None
            self._deliveries.append(Delivery(event=event, tag=DeliveryTag.OPTIMISTIC))
            self.optimistic += 1

    def finalize(self, eid: EventId) -> bool:
        """Record the final delivery of ``eid``; whether it is ``reordered``."""
        tentative = self._tentative
        if tentative and next(iter(tentative)) == eid:
            del tentative[eid]
            self.confirmed += 1
            return False
        self.reordered += 1
        if eid in tentative:
            del tentative[eid]
        else:
            # Not delivered optimistically yet: it never will be.
            self._waiting.pop(eid, None)
            self.unannounced += 1
        return True

    def sequencing_order(self, now: float) -> Iterable[EventId]:
        """The pool's messages in this member's optimistic order, for the holder
        of the token: what is delivered optimistically (after delivering what is
        due), then nothing else; a message of the pool never scheduled here is
        scheduled now."""
        self._check_view()
        pool = self._s.book.pool
        waiting = self._waiting
        tentative = self._tentative
        for eid, event in list(pool.items()):
            if eid not in waiting and eid not in tentative:
                self.arrived(event, now)
        self.deliver_due(now)
        departed = self._departed_message
        return [eid for eid in tentative if eid in pool and not departed(eid)]

    def tentative_count(self) -> int:
        """Messages delivered optimistically and not final yet (at least the
        ones the holder could sequence now)."""
        return len(self._tentative)

    def timer(self) -> float:
        if self._s.role not in (Role.CORE, Role.EXTERNAL):
            return math.inf
        heap = self._scheduled
        return min(heap[0][0] if heap else math.inf, self.plans.timer())

    # -- reading -----------------------------------------------------------------

    def statistics(self) -> OptimisticStatistics:
        return OptimisticStatistics(
            optimistic=self.optimistic,
            revoked=self.revoked,
            confirmed=self.confirmed,
            reordered=self.reordered,
            unannounced=self.unannounced,
            plans=self.plans.plans,
            plans_made=self.plans.plans_made,
            delays=tuple(sorted(self.plans.delays.items())),
            latencies=tuple(sorted(self.plans.latency_row().items())),
        )

    def sizes(self) -> dict[str, int]:
        return {
            "optimistic_waiting": len(self._waiting),
            "optimistic_heap": len(self._scheduled),
            "tentative": len(self._tentative),
        }
