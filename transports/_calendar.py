"""The scheduler of the virtual-time network: a calendar queue.

A ``heapq`` of distinct due times (plain floats, cheap to compare) and, per
due time, a list of items, each a plain tuple ``(kind, a, b, c)``. Items due
at the same time run in the order they were scheduled, including items
scheduled while that time is being run. With a ``quantum`` every due time is
rounded up to a multiple of it, so thousands of arrivals share one queue
entry; without one, time is exact.

The kinds are small integers; the run loop of :class:`Simulation`
(``transports/_virtual.py``) tests them in the order of their frequency.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

from epto import ConfigurationError, LocalProtocolError

ARRIVE = 0
"""A ball arriving at one process: ``(ARRIVE, dest, src, ball)``."""
TIMER = 1
"""An EpTO round timer: ``(TIMER, pid, None, None)``, re-armed from ``get_timer()``."""
ARRIVE_MANY = 2
"""A ball arriving at several processes at once (constant latency)."""
PEER = 3
"""A peer-sampling (Cyclon) message: ``(PEER, dest, src, message)``."""
LINK = 4
"""A message on a reliable FIFO link: ``(LINK, dest, src, (message, epoch))``."""
RING_TIMER = 5
"""A token-ring timer: ``(RING_TIMER, pid, version, None)``; stale versions are skipped."""
CALL = 6
"""A scripted action: ``(CALL, action, None, None)``."""


class CalendarQueue:
    """Due times and the items due at each; :attr:`now` is the virtual clock."""

    def __init__(self, quantum: float | None) -> None:
        if quantum is not None and not (
            isinstance(quantum, int | float) and math.isfinite(quantum) and quantum > 0
        ):
            raise ConfigurationError(f"quantum must be a positive number, got {quantum!r}")
        self.quantum = None if quantum is None else float(quantum)
        self.now = 0.0
        self._times: list[float] = []
        self._buckets: dict[float, list[tuple[Any, ...]]] = {}

    def _push(self, at: float, item: tuple[Any, ...]) -> None:
        if self.quantum is not None:
            at = math.ceil(at / self.quantum) * self.quantum
        bucket = self._buckets.get(at)
        if bucket is None:
            self._buckets[at] = [item]
            heapq.heappush(self._times, at)
        else:
            bucket.append(item)

    def call_at(self, at: float, action: Callable[[], object]) -> None:
        """Run ``action()`` at virtual time ``at`` (not before now)."""
        if at < self.now:
            raise LocalProtocolError(f"cannot schedule at {at!r}, before now ({self.now!r})")
        self._push(at, (CALL, action, None, None))

    def next_time(self) -> float | None:
        """When the next item is due, or None when nothing is scheduled."""
        return self._times[0] if self._times else None
