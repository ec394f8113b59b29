"""The harness that tests and the command line share: a :class:`Simulation`
with a :class:`DeliveryRecorder` attached, and the checker over it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from epto import Config, Delivery, DeliveryTag, EventId, ProcessId
from epto.check import CheckReport, check

from ._members import EngineConfig, SimulationObserver
from ._simulation import Simulation


class DeliveryRecorder(SimulationObserver):
    """Records every delivery: per process, the event ids in delivery order,
    and the delay of each in-order delivery since its broadcast (a token
    ring's ``FINAL`` deliveries count as in order; its ``OPTIMISTIC`` and
    ``REVOKED`` ones are kept apart)."""

    def __init__(self, simulation: Simulation) -> None:
        self._broadcasts = simulation.broadcasts
        self.sequences: dict[ProcessId, list[EventId]] = {}
        self.out_of_order: dict[ProcessId, list[EventId]] = {}
        self.optimistic: dict[ProcessId, list[tuple[EventId, float]]] = {}
        """Token ring with optimistic delivery: per process, the optimistic
        deliveries (event id, time), in order."""
        self.reordered: dict[ProcessId, int] = {}
        """Final deliveries with ``reordered=True``, per process."""
        self.revoked: dict[ProcessId, list[EventId]] = {}
        """Token ring with optimistic delivery: per process, the optimistic
        deliveries ended as not in the order (their source left the view)."""
        self.delays: list[float] = []
        """Delivery time minus broadcast time, one per in-order delivery."""
        self.times: dict[ProcessId, list[float]] = {}
        # One id tuple per event, shared by every process's sequence (a
        # delivery's id is a new tuple: 2,000,000 deliveries, 140 MB).
        self._ids: dict[EventId, EventId] = {}
        for pid in simulation.processes:
            self.on_join(pid, simulation.now)

    def on_join(self, pid: ProcessId, now: float) -> None:
        self.sequences.setdefault(pid, [])
        self.times.setdefault(pid, [])

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        event = delivery.event
        eid = (event.source, event.seq)
        canonical = self._ids.get(eid)
        if canonical is None:
            self._ids[eid] = eid
        else:
            eid = canonical
        tag = delivery.tag
        if tag is DeliveryTag.OUT_OF_ORDER:
            self.out_of_order.setdefault(pid, []).append(eid)
            return
        if tag is DeliveryTag.OPTIMISTIC:
            self.optimistic.setdefault(pid, []).append((eid, now))
            return
        if tag is DeliveryTag.REVOKED:
            self.revoked.setdefault(pid, []).append(eid)
            return
        if delivery.reordered:
            self.reordered[pid] = self.reordered.get(pid, 0) + 1
        self.sequences[pid].append(eid)
        self.times[pid].append(now)
        sent = self._broadcasts.get(eid)
        if sent is not None:
            self.delays.append(now - sent[1])


class Cluster(Simulation):
    """A :class:`Simulation` of ``n`` processes with a :class:`DeliveryRecorder`
    attached: the harness that tests and the command line share.

    ``config`` defaults to :meth:`epto.Config.for_group` for ``n``; a
    :class:`epto.tokenring.TokenRingConfig` makes the ``n`` processes the
    bootstrap members of a token ring. Processes are numbered ``0 .. n-1``;
    ``phases`` fixes their first rounds (EpTO).
    """

    def __init__(
        self,
        n: int,
        *,
        seed: int = 0,
        config: EngineConfig | None = None,
        phases: Mapping[ProcessId, float] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            config if config is not None else Config.for_group(n), seed=seed, **options
        )
        self.recorder = DeliveryRecorder(self)
        self.add_observer(self.recorder)
        if phases is None:
            self.add_processes(n)
        else:
            for pid in range(n):
                self.add_process(pid, phase=phases.get(pid))

    def run_until_quiescent(self, max_rounds: float = 10_000) -> bool:
        """Run round by round until :meth:`quiescent`; False if ``max_rounds``
        passed first."""
        limit = self.now + max_rounds * self.round_interval
        while not self.quiescent():
            if self.now >= limit:
                return False
            self.run_rounds(1)
        return True

    def check(
        self,
        *,
        expected: Callable[[ProcessId, EventId], bool] | None = None,
        staying: Collection[ProcessId] | None = None,
    ) -> CheckReport:
        """:func:`epto.check.check` over every process that ever ran, with the
        set of broadcast events (so a never-broadcast delivery is caught);
        with ``staying`` (the processes that stayed in the group), validity too."""
        return check(
            self.recorder.sequences, broadcast=self.broadcasts, expected=expected, staying=staying
        )
