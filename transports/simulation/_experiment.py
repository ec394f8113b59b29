"""One simulated experiment, described by a value and summarised by a value.

:func:`run_simulation` is what ``epto simulate`` runs; evaluation scripts and
demos call it directly. The workload follows the EpTO paper's evaluation
(section 6): every round, every process broadcasts with a given probability
(or a fixed number of events is spread over the broadcasting rounds), round
length 125 ticks with 1 % drift, PlanetLab latencies; then the simulation runs
on, without new broadcasts, until every event has been delivered or dropped
everywhere (or a round limit passes). The same workload, network options and
summary serve a token ring (``SimulationSpec(mode="token-ring")``): what
differs, the engine says (``_engines.py``).

Time is in ticks (milliseconds with the PlanetLab latencies), so the token
ring's timeouts, given in seconds, are scaled by 1000 and kept well above the
largest latency (:meth:`SimulationSpec.tokenring_config`). Its links are
reliable FIFO links; loss breaks a link for one round trip of it (at least
one tick); churn crashes members and joins new identities through
``pss_seeds`` members of the view; the partition cuts a random fraction of
the initial members off.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs

from epto import ProcessId
from epto.check import CheckReport

from ._calendar import SimulationStalled
from ._cluster import Cluster
from ._engines import ENGINES
from ._members import EngineConfig, SimulationObserver
from ._network import ROUND_TRIP, NetworkStatistics
from ._simulation import Simulation
from ._spec import SimulationSpec

Settled = Literal["complete", "quiescent", "round-limit", "stalled"]


@attrs.frozen(kw_only=True)
class SimulationResult:
    """What a run did; :meth:`summary` is the JSON of ``epto simulate --json``."""

    spec: SimulationSpec
    config: EngineConfig
    processes: int
    """Processes that ever ran (initial ones plus joiners)."""
    processes_at_end: int
    events: int
    """Events broadcast."""
    events_delivered: int
    """Events delivered by at least one process."""
    deliveries: int
    """In-order deliveries summed over all processes."""
    out_of_order_deliveries: int
    holes: int
    """Events a process missed, among processes alive at the end and events
    broadcast after they joined that someone delivered."""
    processes_with_holes: int
    validity_violations: int
    """Events broadcast by a process that stayed in the group (alive at the
    end; token ring: a member of the final view) that some staying process
    expected to deliver them did not deliver, including events nobody
    delivered (which :attr:`holes` cannot count)."""
    undelivered: int
    """The missing deliveries behind :attr:`validity_violations`: (staying
    process, event) pairs."""
    order_violations: int
    integrity_violations: int
    delay: dict[str, float | None]
    """Delivery delay (broadcast to in-order delivery) percentiles, in time units."""
    entries_processed: int
    network: NetworkStatistics
    rounds_run: float
    virtual_time: float
    settled: Settled
    """Why the run stopped: every live process delivered every event broadcast
    since it joined; or no ball in flight and nothing pending; or
    ``max_drain_rounds`` passed first (a failure); or the simulation stalled
    (:class:`SimulationStalled`: no progress in virtual time; a failure)."""
    stalled_at: float | None
    """The virtual time of the stall, if the run stalled."""
    wall_seconds: float
    report: CheckReport = attrs.field(repr=False)
    delays: Sequence[float] = attrs.field(repr=False)
    """Every in-order delivery's delay, sorted."""
    extra_parameters: dict[str, Any] = attrs.field(factory=dict)
    """The engine's figures added to ``parameters`` (EpTO: fanout and TTL;
    token ring: ``k``, view changes, exclusions)."""

    @property
    def failures(self) -> list[str]:
        """Why the run failed, empty when it did not (the exit status of
        ``epto simulate``: 1 with ``"safety"``, else 3 with any other):

        * ``"safety"``: an order or integrity violation;
        * ``"stalled"``: no progress in virtual time; ``"round-limit"``: the run
          stopped at ``max_drain_rounds`` before settling (both modes);
        * ``"validity"``: :attr:`validity_violations`; ``"agreement"``:
          :attr:`holes`. Always for a token ring (deterministic agreement); for
          EpTO (probabilistic agreement) only with ``spec.require_agreement``.
        """
        out = []
        if self.order_violations or self.integrity_violations:
            out.append("safety")
        if self.settled in ("stalled", "round-limit"):
            out.append(self.settled)
        if ENGINES[self.spec.mode].deterministic_agreement or self.spec.require_agreement:
            if self.validity_violations:
                out.append("validity")
            if self.holes:
                out.append("agreement")
        return out

    def summary(self) -> dict[str, Any]:
        net = attrs.asdict(self.network)
        return {
            "processes": self.spec.processes,
            "processes_total": self.processes,
            "processes_at_end": self.processes_at_end,
            "events": self.events,
            "events_delivered": self.events_delivered,
            "deliveries": self.deliveries,
            "out_of_order_deliveries": self.out_of_order_deliveries,
            "holes": self.holes,
            "processes_with_holes": self.processes_with_holes,
            "validity_violations": self.validity_violations,
            "undelivered": self.undelivered,
            "order_violations": self.order_violations,
            "integrity_violations": self.integrity_violations,
            "delay": dict(self.delay),
            "entries_processed": self.entries_processed,
            "network": net,
            "rounds_run": self.rounds_run,
            "virtual_time": self.virtual_time,
            "settled": self.settled,
            "stopped_at_round_limit": self.settled == "round-limit",
            "stalled_at": self.stalled_at,
            "failures": self.failures,
            "ok": not self.failures,
            "wall_seconds": self.wall_seconds,
            "parameters": self._parameters(),
        }

    def _parameters(self) -> dict[str, Any]:
        spec = attrs.asdict(self.spec)
        if spec["optimistic"] is None:
            del spec["optimistic"]  # a token ring without it, or another engine
        if not spec["wire"]:
            del spec["wire"]  # message level, the default
        return {**spec, **self.extra_parameters}


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank ``q``-percentile (``0 < q <= 100``) of sorted values."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def delay_summary(delays: Sequence[float]) -> dict[str, float | None]:
    """Percentiles, maximum and mean of sorted delays (the summary's ``delay``)."""
    return {
        "p50": percentile(delays, 50),
        "p95": percentile(delays, 95),
        "p99": percentile(delays, 99),
        "max": delays[-1] if delays else None,
        "mean": sum(delays) / len(delays) if delays else None,
    }


def _payload(counter: int, size: int) -> bytes:
    return counter.to_bytes(8, "big") + bytes(size - 8)


def schedule_workload(cluster: Simulation, spec: SimulationSpec, t0: float) -> float:
    """Schedule the broadcasts, churn and partition of ``spec`` from ``t0``,
    with the schedule's random stream; returns the end of the broadcasting
    rounds."""
    rng = cluster.schedule_rng
    delta = spec.round_interval
    span = t0 + spec.rounds * delta
    counter = [0]

    def broadcast_from(pid: ProcessId) -> None:
        if cluster.can_broadcast(pid):
            cluster.broadcast(pid, _payload(counter[0], spec.payload_size))
            counter[0] += 1

    if spec.events is not None:
        for at in sorted(rng.uniform(t0, span) for _ in range(spec.events)):

            def fire() -> None:
                members = list(cluster.processes)
                broadcast_from(members[rng.randrange(len(members))])

            cluster.call_at(at, fire)
    elif spec.broadcast_rate > 0:
        rate = spec.broadcast_rate

        def round_of_broadcasts() -> None:
            start = cluster.now
            for pid in list(cluster.processes):
                if rng.random() < rate:
                    at = start + delta * rng.random()
                    cluster.call_at(at, lambda pid=pid: broadcast_from(pid))  # type: ignore[misc]
            if start + delta < span:
                cluster.call_at(start + delta, round_of_broadcasts)

        cluster.call_at(t0, round_of_broadcasts)
    if spec.churn:
        cluster.schedule_churn(spec.churn, stop=span)
    window = spec.partition_window()
    if window is not None:
        initial = sorted(cluster.processes)
        side = rng.sample(initial, max(1, round(spec.partition * len(initial))))
        cluster.partition([side], start=t0 + window[0] * delta, end=t0 + window[1] * delta)
    return span


def run_simulation(
    spec: SimulationSpec,
    *,
    observers: Iterable[SimulationObserver] = (),
    progress: Callable[[float, float], None] | None = None,
) -> SimulationResult:
    """Run ``spec`` in the virtual-time network and check what was delivered.

    ``observers`` see every join, leave, broadcast and delivery (a delivery
    log writer is one). ``progress(rounds_done, rounds_expected)`` is called
    once per round.

    The interpreter's cyclic garbage collector is paused for the run (and
    restored after it): a large run holds tens of millions of balls, layers
    and queue items, none of them in reference cycles, which every full
    collection would walk again (about 13 % of the CPU time of a
    3,000-process run).
    """
    spec.validate()
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(spec, observers, progress)
    finally:
        if collecting:
            gc.enable()


def _run(
    spec: SimulationSpec,
    observers: Iterable[SimulationObserver],
    progress: Callable[[float, float], None] | None,
) -> SimulationResult:
    wall = time.perf_counter()
    latency = spec.latency_model()
    engine_type = ENGINES[spec.mode]
    config = engine_type.configure(spec, latency)
    delta = spec.round_interval
    cluster = Cluster(
        0,
        seed=spec.seed,
        config=config,
        latency=latency,
        loss=spec.loss,
        quantum=spec.quantum,
        pss_seeds=spec.pss_seeds,
        round_interval=delta,
        break_duration=ROUND_TRIP if spec.break_duration is None else spec.break_duration,
        max_items_per_instant=spec.max_items_per_instant,
        **engine_type.options(spec),
    )
    engine = cluster.engine
    for obs in (*engine.observers(), *observers):
        cluster.add_observer(obs)
    cluster.add_processes(spec.processes)
    drain = spec.max_drain_rounds
    if drain is None:
        drain = engine.drain_rounds(spec, latency)
    limit = spec.rounds + drain
    expected_rounds = engine.expected_rounds(spec, latency, limit)
    recorder = cluster.recorder
    sequences = recorder.sequences
    out_of_order = recorder.out_of_order

    settled: Settled = "round-limit"
    stalled_at = None
    t0 = cluster.now
    try:
        if spec.pss == "cyclon" and spec.pss_warmup:
            cluster.run_rounds(spec.pss_warmup)
        t0 = cluster.now
        schedule_workload(cluster, spec, t0)
        done = 0
        while done < spec.rounds:
            cluster.run_rounds(1)
            done += 1
            if progress is not None:
                progress(done, expected_rounds)
        while True:
            if engine.idle():
                settled = "quiescent"
                break
            if spec.stop_when_complete and engine.complete(sequences, out_of_order):
                settled = "complete"
                break
            if done >= limit:
                # EpTO: only the gossip tail was left (--run-to-quiescence).
                if engine.complete(sequences, out_of_order):
                    settled = "complete"
                break
            cluster.run_rounds(1)
            done += 1
            if progress is not None:
                progress(done, max(expected_rounds, done))
    except SimulationStalled as stall:
        settled = "stalled"
        stalled_at = stall.at

    report = engine.verdict(spec, sequences)
    delays = sorted(recorder.delays)
    return SimulationResult(
        spec=spec,
        config=config,
        processes=len(cluster.joined_at),
        processes_at_end=len(cluster.processes),
        events=len(cluster.broadcasts),
        events_delivered=report.events,
        deliveries=report.deliveries,
        out_of_order_deliveries=sum(len(v) for v in out_of_order.values()),
        holes=report.total_holes,
        processes_with_holes=sum(1 for h in report.holes.values() if h),
        validity_violations=len(report.validity_violations),
        undelivered=report.total_undelivered,
        order_violations=len(report.order_violations),
        integrity_violations=len(report.integrity_violations),
        delay=delay_summary(delays),
        entries_processed=cluster.entries_processed(),
        network=cluster.network_statistics(),
        rounds_run=(cluster.now - t0) / delta,
        virtual_time=cluster.now,
        settled=settled,
        stalled_at=stalled_at,
        wall_seconds=time.perf_counter() - wall,
        report=report,
        delays=delays,
        extra_parameters=engine.figures(spec),
    )
