"""The scheduler of the virtual-time network: a calendar queue.

A ``heapq`` of distinct due times (plain floats, cheap to compare) and, per
due time, a list of items, each a plain tuple ``(kind, a, b, c)``. Items due
at the same time run in the order they were scheduled, including items
scheduled while that time is being run. With a ``quantum`` every due time is
rounded up to a multiple of it, so thousands of arrivals share one queue
entry; without one, time is exact. The rounding never gives a time before the
due time (:meth:`CalendarQueue._push`): ``ceil(at / q) * q`` alone can, in floating
point, and a timer run before it is due does nothing and re-arms at the same
instant, forever.

An instant with more than :attr:`CalendarQueue.max_items_per_instant` items
(a protocol bouncing messages in zero time, a timer re-arming itself at the
same instant) makes the run loop raise :class:`SimulationStalled` instead of
spinning forever: virtual time would never advance.

The kinds are small integers; the run loop of :class:`Simulation`
(``_simulation.py``) tests them in the order of their frequency. Which
timer kind and which message kinds a process's items use is its engine's
choice (``_engines.py``): the queue and the run loop know kinds, not engines.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

from epto import ConfigurationError, EptoError, LocalProtocolError

ARRIVE = 0
"""A ball arriving at one process: ``(ARRIVE, dest, src, ball)``."""
TIMER = 1
"""A round timer: ``(TIMER, pid, None, None)``, re-armed from ``get_timer()`` (plus
the jitter) each time it fires."""
ARRIVE_MANY = 2
"""A ball arriving at several processes at once (constant latency)."""
PEER = 3
"""A peer-sampling (Cyclon) message: ``(PEER, dest, src, message)``."""
LINK = 4
"""A message on a reliable FIFO link: ``(LINK, dest, src, (message, epoch))``."""
VERSIONED_TIMER = 5
"""A timer kept armed at the process's ``get_timer()`` after every output
drain: ``(VERSIONED_TIMER, pid, version, None)``; stale versions are skipped
(:meth:`CalendarQueue._set_timer`)."""
CALL = 6
"""A scripted action: ``(CALL, action, None, None)``."""


DEFAULT_MAX_ITEMS_PER_INSTANT = 1_000_000
"""The default bound on the items due at one instant (see :class:`CalendarQueue`)."""
ITEMS_PER_PROCESS_PER_INSTANT = 1_000
"""With the default bound, an instant may also hold this many items per live process."""


class SimulationStalled(EptoError, RuntimeError):
    """The simulation made no progress in virtual time: more items than
    ``max_items_per_instant`` were due at one instant (a protocol bouncing
    messages in zero time, a timer that re-arms itself at the same instant).

    The items already run at that instant stay run; :attr:`at` is the instant
    and :attr:`items` how many items were due at it when the bound was passed.
    """

    def __init__(self, at: float, items: int, limit: int) -> None:
        super().__init__(
            f"the simulation stalled at t = {at!r}: {items} items due at that one instant "
            f"(more than {limit}); virtual time does not advance"
        )
        self.at = at
        self.items = items
        self.limit = limit


class CalendarQueue:
    """Due times and the items due at each; :attr:`now` is the virtual clock.

    ``max_items_per_instant`` bounds the items due at one instant (``None``:
    :data:`DEFAULT_MAX_ITEMS_PER_INSTANT` or
    :data:`ITEMS_PER_PROCESS_PER_INSTANT` per live process, whichever is
    larger); the run loop raises :class:`SimulationStalled` past it.
    """

    def __init__(self, quantum: float | None, max_items_per_instant: int | None = None) -> None:
        if quantum is not None and not (
            isinstance(quantum, int | float) and math.isfinite(quantum) and quantum > 0
        ):
            raise ConfigurationError(f"quantum must be a positive number, got {quantum!r}")
        if max_items_per_instant is not None and not (
            isinstance(max_items_per_instant, int) and max_items_per_instant >= 1
        ):
            raise ConfigurationError(
                f"max_items_per_instant must be a positive integer, got {max_items_per_instant!r}"
            )
        self.quantum = None if quantum is None else float(quantum)
        self.max_items_per_instant = max_items_per_instant
        self.now = 0.0
        self._times: list[float] = []
        self._buckets: dict[float, list[tuple[Any, ...]]] = {}
        self._armed: dict[Any, tuple[float, int]] = {}
        """The live :data:`VERSIONED_TIMER` item of each key, ``(due, version)``."""
        self._versions = 0

    def _instant_limit(self) -> int:
        """The bound the run loop checks first (cheap); :meth:`_check_stall` decides."""
        if self.max_items_per_instant is not None:
            return self.max_items_per_instant
        return DEFAULT_MAX_ITEMS_PER_INSTANT

    def _check_stall(self, at: float, items: int, live: int) -> int:
        """Raise :class:`SimulationStalled` if ``items`` due at ``at`` is past
        the bound; otherwise return the next count to check at."""
        limit = self.max_items_per_instant
        if limit is None:
            limit = max(DEFAULT_MAX_ITEMS_PER_INSTANT, ITEMS_PER_PROCESS_PER_INSTANT * live)
        if items > limit:
            raise SimulationStalled(at, items, limit)
        return limit

    def _push(self, at: float, item: tuple[Any, ...]) -> None:
        q = self.quantum
        if q is not None:
            # The smallest multiple ``k * q`` (as computed) not before ``at``:
            # when the division rounded down, ``k * q`` falls just short.
            k = math.ceil(at / q)
            due = k * q
            at = due if due >= at else (k + 1) * q
        bucket = self._buckets.get(at)
        if bucket is None:
            self._buckets[at] = [item]
            heapq.heappush(self._times, at)
        else:
            bucket.append(item)

    def _set_timer(self, key: Any, due: float) -> None:
        """Keep one live :data:`VERSIONED_TIMER` item for ``key``, due at
        ``due`` (not before now; ``math.inf``: none)."""
        if due == math.inf:
            self._armed.pop(key, None)
            return
        due = max(due, self.now)
        armed = self._armed.get(key)
        if armed is None or armed[0] != due:
            self._versions += 1
            self._armed[key] = (due, self._versions)
            self._push(due, (VERSIONED_TIMER, key, self._versions, None))

    def call_at(self, at: float, action: Callable[[], object]) -> None:
        """Run ``action()`` at virtual time ``at`` (not before now)."""
        if at < self.now:
            raise LocalProtocolError(f"cannot schedule at {at!r}, before now ({self.now!r})")
        self._push(at, (CALL, action, None, None))

    def next_time(self) -> float | None:
        """When the next item is due, or None when nothing is scheduled."""
        return self._times[0] if self._times else None
