"""A simulation observer that writes one delivery log per process.

It has the methods of the virtual-time network's ``SimulationObserver``
(``on_broadcast``, ``on_delivery``, ``on_join``, ``on_leave``) without
importing it, so any driver that reports deliveries this way can use it.
"""

from __future__ import annotations

import os
from types import TracebackType

from .._event import Delivery, EventId, ProcessId
from ._broadcasts import write_broadcasts
from ._segment import micros
from ._writer import DeliveryLogs


class SimulationLogger:
    """Logs every delivery under ``root/<pid>/`` and, on :meth:`close`, the
    broadcast manifest ``root/broadcasts.csv``.

    Times: the driver's ``now`` times ``tick_seconds`` is seconds; the log
    stores ``origin + now * tick_seconds * 1e6`` microseconds. The virtual-time
    network counts in ticks of one millisecond (its PlanetLab latencies are
    milliseconds), hence the default ``tick_seconds=0.001``: virtual time 0
    is the timestamp ``origin`` (default 1970-01-01T00:00:00Z).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        tick_seconds: float = 0.001,
        origin: int = 0,
        **writer_options: int,
    ) -> None:
        self.root = root
        self.logs = DeliveryLogs(root, **writer_options)
        self._tick = tick_seconds
        self._origin = origin
        self._sent: dict[EventId, int] = {}

    def _stamp(self, now: float) -> int:
        return micros(now * self._tick, origin=self._origin)

    def on_broadcast(self, pid: ProcessId, event_id: EventId, now: float) -> None:
        self._sent[event_id] = self._stamp(now)

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        self.logs.write(
            pid,
            delivery,
            delivered_at=self._stamp(now),
            broadcast_at=self._sent.get(delivery.event.id),
        )

    def on_join(self, pid: ProcessId, now: float) -> None:
        """Nothing to do: a process's log is opened at its first delivery."""

    def on_leave(self, pid: ProcessId, now: float) -> None:
        """Close the departed process's log (it delivers nothing more)."""
        self.logs.close_node(pid)

    def close(self) -> None:
        self.logs.close()
        write_broadcasts(self.root, ((s, q, t) for (s, q), t in sorted(self._sent.items())))

    def __enter__(self) -> SimulationLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
