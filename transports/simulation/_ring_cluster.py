"""A token-ring group in the virtual-time network, with the conveniences the
token-ring tests and figures use (crashes kept in view, joins by contacts,
delivery times and positions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from epto import EventId, GroupKey, Limits, ProcessId
from epto.tokenring import TokenRingConfig, TokenRingProcess

from ._cluster import Cluster
from ._engines import PositionRecorder
from ._latency import LatencyModel, UniformLatency


class TokenRingCluster(Cluster):
    """Processes ``0 .. n-1``, the bootstrap members of a token ring, in the
    virtual-time network (reliable FIFO links; see docs/simulation.md).

    ``delay`` is ``(low, high)`` for a uniform one-way latency per message, or
    any latency model. ``loss`` is the probability that a send breaks its
    link for ``break_duration`` (what is in flight on it is lost). Time is
    exact (no quantum) unless ``quantum`` is given.

    ``fit`` (the default) raises every timeout of ``config`` below its floor
    for ``n`` members at the model's largest latency
    (:meth:`TokenRingConfig.fitted`; :attr:`corrections` lists them), so
    that no run livelocks on a token timeout shorter than one rotation;
    ``fit=False`` runs ``config`` as given (the members' own measured
    timeouts then have to make up for it). ``wire`` runs every member as a
    full :class:`epto.endpoint.TokenRingEndpoint`, frames on simulated
    streams (sealed with ``wire_key``; docs/simulation.md). ``limits``
    default to a stream node's.
    """

    def __init__(
        self,
        n: int,
        config: TokenRingConfig,
        *,
        seed: int,
        delay: tuple[float, float] | LatencyModel = (0.001, 0.005),
        loss: float = 0.0,
        break_duration: float = 0.05,
        quantum: float | None = None,
        fit: bool = True,
        wire: bool = False,
        wire_key: GroupKey | None = None,
        limits: Limits | None = None,
    ) -> None:
        self._departed: dict[ProcessId, TokenRingProcess] = {}
        self.crashed: set[ProcessId] = set()
        latency = UniformLatency(*delay) if isinstance(delay, tuple) else delay
        self.corrections: dict[str, tuple[float, float]] = {}
        """Timeouts ``fit`` raised: name -> (given, used)."""
        if fit:
            fitted = config.fitted(n, latency.maximum)
            for name in config.timing_floors(n, latency.maximum):
                if getattr(fitted, name) != getattr(config, name):
                    self.corrections[name] = (getattr(config, name), getattr(fitted, name))
            config = fitted
        super().__init__(
            n,
            seed=seed,
            config=config,
            latency=latency,
            loss=loss,
            break_duration=break_duration,
            quantum=quantum,
            wire=wire,
            wire_key=wire_key,
            limits=limits,
        )
        self._positions = PositionRecorder()
        self.add_observer(self._positions)

    def remove_process(self, pid: ProcessId) -> None:
        proc = self.processes[pid]
        assert isinstance(proc, TokenRingProcess)
        super().remove_process(pid)
        self._departed[pid] = proc

    @property
    def procs(self) -> dict[ProcessId, TokenRingProcess]:
        """Every process that ever ran, crashed ones included."""
        out = dict(self._departed)
        out.update(self.processes)  # type: ignore[arg-type]
        return out

    @property
    def position(self) -> dict[EventId, int]:
        """The position in the total order of every event delivered somewhere."""
        return self._positions.position

    @property
    def delivered(self) -> dict[ProcessId, list[EventId]]:
        """Per process, the event ids it delivered, in order."""
        return self.recorder.sequences

    @property
    def delivered_at(self) -> dict[ProcessId, dict[EventId, float]]:
        rec = self.recorder
        return {p: dict(zip(seq, rec.times[p], strict=True)) for p, seq in rec.sequences.items()}

    @property
    def broadcast_times(self) -> dict[EventId, float]:
        return {eid: at for eid, (_, at) in self.broadcasts.items()}

    def at(self, when: float, action: Callable[[], object]) -> None:
        """Run ``action`` at virtual time ``when``."""
        self.call_at(when, action)

    def crash(self, pid: ProcessId) -> None:
        """Crash ``pid`` now (it stays in :attr:`procs`, in :attr:`crashed`)."""
        if pid in self.processes:
            self.remove_process(pid)
            self.crashed.add(pid)

    def join(self, pid: ProcessId, contacts: Iterable[ProcessId]) -> TokenRingProcess:
        """Start a new identity ``pid`` joining through ``contacts``."""
        self.add_process(pid, contacts=tuple(contacts))
        proc = self.processes[pid]
        assert isinstance(proc, TokenRingProcess)
        return proc

    def staying(self) -> list[ProcessId]:
        """Processes alive and not excluded (still in the view or joining)."""
        return [p for p, proc in self.processes.items() if not proc.excluded]  # type: ignore[union-attr]

    def staying_members(self) -> list[ProcessId]:
        """Processes alive and in the view (not joining, not excluded)."""
        return [p for p in self.processes if self.can_broadcast(p)]

    def latencies(self, pids: Iterable[ProcessId] | None = None) -> list[float]:
        """Delivery latency (delivery time minus broadcast time) of every
        delivery at ``pids`` (default: every process)."""
        rec = self.recorder
        out: list[float] = []
        for pid in rec.sequences if pids is None else pids:
            for eid, at in zip(rec.sequences[pid], rec.times[pid], strict=True):
                sent = self.broadcasts.get(eid)
                if sent is not None:
                    out.append(at - sent[1])
        return out
