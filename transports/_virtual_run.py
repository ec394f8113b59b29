"""One simulated experiment, described by a value and summarised by a value.

:func:`run_simulation` is what ``epto simulate`` runs; evaluation scripts and
demos call it directly. The workload follows the EpTO paper's evaluation
(section 6): every round, every process broadcasts with a given probability
(or a fixed number of events is spread over the broadcasting rounds), round
length 125 ticks with 1 % drift, PlanetLab latencies; then the simulation runs
on, without new broadcasts, until every event has been delivered or dropped
everywhere (or a round limit passes).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs

from epto import Config, ConfigurationError, CyclonConfig, EventId, ProcessId
from epto.check import CheckReport

from ._cluster import Cluster
from ._latency import ConstantLatency, LatencyModel, PlanetLabLatency, UniformLatency
from ._network import NetworkStatistics
from ._virtual import SimulationObserver

LatencyKind = Literal["constant", "uniform", "planetlab"]


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not (isinstance(value, int | float) and low <= value < high):
        raise ConfigurationError(f"{name} must be in [{low}, {high}), got {value!r}")


@attrs.frozen(kw_only=True)
class SimulationSpec:
    """Everything that defines a simulated run; same spec, same result."""

    processes: int = 100
    rounds: int = 60
    """Rounds (of ``round_interval``) during which events are broadcast."""
    broadcast_rate: float = 0.05
    """Probability that a process broadcasts in a round (ignored with ``events``)."""
    events: int | None = None
    """A fixed number of events, at uniformly random times and sources."""
    clock: Literal["logical", "global"] = "logical"
    fanout: int | None = None
    """``None``: from :func:`epto.params.derive_parameters`."""
    ttl: int | None = None
    """``None``: from :func:`epto.params.derive_parameters`."""
    c: float = 2.0
    round_interval: float = 125.0
    drift: float = 0.01
    """Each process's round length is uniform in ``[δ(1-d), δ(1+d)]``."""
    jitter: float = 0.0
    latency: LatencyKind = "planetlab"
    latency_low: float = 0.0
    """Uniform model: smallest latency."""
    latency_high: float = 100.0
    """Uniform model: largest latency; constant model: the latency."""
    planetlab_per_link: bool = True
    loss: float = 0.0
    churn: float = 0.0
    """Processes replaced per round during the broadcasting rounds (α)."""
    ordering: Literal["strict", "paper"] = "strict"
    tagged_delivery: bool = False
    seed: int = 1
    payload_size: int = 16
    quantum: float | None = 1.0
    """Time resolution of the scheduler (``None``: exact)."""
    max_drain_rounds: int | None = None
    pss: Literal["full", "cyclon"] = "full"
    """Peer sampling: the static full view, or Cyclon (:class:`epto.Node`)."""
    view_size: int = 50
    """Cyclon: entries per view."""
    shuffle_length: int = 8
    """Cyclon: entries per shuffle."""
    shuffle_period: float | None = None
    """Cyclon: time between shuffles (``None``: the round length)."""
    pss_seeds: int = 3
    """Cyclon: live processes a newcomer is given to join through (a tracker's
    answer); with one, a newcomer whose seed crashes before answering stays
    alone."""
    pss_warmup: int = 50
    """Cyclon: rounds run before the first broadcast, for the views to mix
    (processes join one by one through a random earlier one)."""
    """Rounds allowed after the broadcasting rounds for events to settle
    (``None``: four times TTL plus the largest latency in rounds)."""
    stop_when_complete: bool = True
    """Stop as soon as every live process has delivered every event broadcast
    since it joined: nothing can change the outcome after that, though stale
    copies may gossip on for up to TTL slow hops. ``False`` runs on until no
    ball is in flight (the work figures then include that tail)."""

    def validate(self) -> None:
        if not isinstance(self.processes, int) or self.processes < 2:
            raise ConfigurationError(f"processes must be at least 2, got {self.processes!r}")
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise ConfigurationError(f"rounds must be at least 1, got {self.rounds!r}")
        _check_range("broadcast_rate", self.broadcast_rate, 0, 1.000001)
        if self.events is not None and (not isinstance(self.events, int) or self.events < 0):
            raise ConfigurationError(f"events must be a non-negative integer, got {self.events!r}")
        _check_range("drift", self.drift, 0, 1)
        _check_range("loss", self.loss, 0, 1)
        _check_range("churn", self.churn, 0, self.processes)
        if self.payload_size < 8:
            raise ConfigurationError("payload_size must be at least 8 bytes")
        if self.pss not in ("full", "cyclon"):
            raise ConfigurationError(f"pss must be 'full' or 'cyclon', got {self.pss!r}")
        if not isinstance(self.pss_warmup, int) or self.pss_warmup < 0:
            raise ConfigurationError(f"pss_warmup must be >= 0, got {self.pss_warmup!r}")
        self.cyclon_config()

    def cyclon_config(self) -> CyclonConfig | None:
        """The Cyclon configuration, or None for the full view."""
        if self.pss != "cyclon":
            return None
        return CyclonConfig(
            view_size=self.view_size,
            shuffle_length=self.shuffle_length,
            shuffle_period=self.shuffle_period or self.round_interval,
        )

    def latency_model(self) -> LatencyModel:
        if self.latency == "constant":
            return ConstantLatency(self.latency_high)
        if self.latency == "uniform":
            return UniformLatency(self.latency_low, self.latency_high)
        if self.latency == "planetlab":
            return PlanetLabLatency(per_link=self.planetlab_per_link)
        raise ConfigurationError(f"unknown latency model {self.latency!r}")

    def config(self, latency: LatencyModel) -> Config:
        """The processes' configuration: the lemmas' fanout and TTL for this
        group, churn, loss, drift ratio and (when every latency is below the
        round length) Lemma 6; explicit ``fanout``/``ttl`` win."""
        n = self.processes
        config = Config.for_group(
            n,
            c=self.c,
            clock=self.clock,
            churn=self.churn,
            loss=self.loss,
            drift=(1 + self.drift) / (1 - self.drift),
            bounded_latency=latency.maximum <= self.round_interval,
            round_interval=self.round_interval,
            ordering=self.ordering,
            tagged_delivery=self.tagged_delivery,
            clock_resolution=1000.0,
        )
        changes: dict[str, Any] = {}
        if self.fanout is not None:
            changes["fanout"] = self.fanout
        if self.ttl is not None:
            changes["ttl"] = self.ttl
        return attrs.evolve(config, **changes) if changes else config


@attrs.frozen(kw_only=True)
class SimulationResult:
    """What a run did; :meth:`summary` is the JSON of ``epto simulate --json``."""

    spec: SimulationSpec
    config: Config
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
    order_violations: int
    integrity_violations: int
    delay: dict[str, float | None]
    """Delivery delay (broadcast to in-order delivery) percentiles, in time units."""
    entries_processed: int
    network: NetworkStatistics
    rounds_run: float
    virtual_time: float
    settled: Literal["complete", "quiescent", "round-limit"]
    """Why the run stopped: every live process delivered every event broadcast
    since it joined; or no ball in flight and nothing pending; or
    ``max_drain_rounds`` passed first."""
    wall_seconds: float
    report: CheckReport = attrs.field(repr=False)
    delays: Sequence[float] = attrs.field(repr=False)
    """Every in-order delivery's delay, sorted."""

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
            "order_violations": self.order_violations,
            "integrity_violations": self.integrity_violations,
            "delay": dict(self.delay),
            "entries_processed": self.entries_processed,
            "network": net,
            "rounds_run": self.rounds_run,
            "virtual_time": self.virtual_time,
            "settled": self.settled,
            "wall_seconds": self.wall_seconds,
            "parameters": {
                **attrs.asdict(self.spec),
                "fanout": self.config.fanout,
                "ttl": self.config.ttl,
                "fanout_derived": self.spec.fanout is None,
                "ttl_derived": self.spec.ttl is None,
            },
        }


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank ``q``-percentile (``0 < q <= 100``) of sorted values."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _payload(counter: int, size: int) -> bytes:
    return counter.to_bytes(8, "big") + bytes(size - 8)


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
    """
    spec.validate()
    wall = time.perf_counter()
    latency = spec.latency_model()
    config = spec.config(latency)
    delta = spec.round_interval
    cluster = Cluster(
        0,
        seed=spec.seed,
        config=config,
        latency=latency,
        loss=spec.loss,
        drift=spec.drift,
        jitter=spec.jitter,
        quantum=spec.quantum,
        pss=spec.cyclon_config() or "full",
        pss_seeds=spec.pss_seeds,
    )
    for obs in observers:
        cluster.add_observer(obs)
    cluster.add_processes(spec.processes)
    rng = cluster.schedule_rng
    if spec.pss == "cyclon" and spec.pss_warmup:
        cluster.run_rounds(spec.pss_warmup)
    t0 = cluster.now
    span = t0 + spec.rounds * delta
    counter = [0]

    def broadcast_from(pid: ProcessId) -> None:
        if pid in cluster.processes:
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

    drain = spec.max_drain_rounds
    if drain is None:
        drain = 4 * (config.ttl + math.ceil(latency.maximum / delta) + 2)
    expected_rounds = spec.rounds + config.ttl + math.ceil(latency.maximum / delta) + 2
    done = 0
    while done < spec.rounds:
        cluster.run_rounds(1)
        done += 1
        if progress is not None:
            progress(done, expected_rounds)
    limit = spec.rounds + drain
    alive = cluster.processes
    joined = cluster.joined_at
    broadcasts = cluster.broadcasts
    recorder = cluster.recorder

    def complete() -> bool:
        total = len(broadcasts)
        for pid in alive:
            got = len(recorder.sequences[pid]) + len(recorder.out_of_order.get(pid, ()))
            if got < total:
                since = joined[pid]
                if since == 0.0:
                    return False
                owed = sum(1 for _, at in broadcasts.values() if at >= since)
                got = sum(
                    1
                    for eid in (*recorder.sequences[pid], *recorder.out_of_order.get(pid, ()))
                    if broadcasts[eid][1] >= since
                )
                if got < owed:
                    return False
        return True

    settled: Literal["complete", "quiescent", "round-limit"] = "round-limit"
    while True:
        if cluster.quiescent():
            settled = "quiescent"
            break
        if spec.stop_when_complete and complete():
            settled = "complete"
            break
        if done >= limit:
            break
        cluster.run_rounds(1)
        done += 1
        if progress is not None:
            progress(done, max(expected_rounds, done))

    def expected(pid: ProcessId, eid: EventId) -> bool:
        return pid in alive and broadcasts[eid][1] >= joined[pid]

    report = cluster.check(expected=expected)
    delays = sorted(cluster.recorder.delays)
    delay: dict[str, float | None] = {
        "p50": percentile(delays, 50),
        "p95": percentile(delays, 95),
        "p99": percentile(delays, 99),
        "max": delays[-1] if delays else None,
        "mean": sum(delays) / len(delays) if delays else None,
    }
    return SimulationResult(
        spec=spec,
        config=config,
        processes=len(joined),
        processes_at_end=len(alive),
        events=len(broadcasts),
        events_delivered=report.events,
        deliveries=report.deliveries,
        out_of_order_deliveries=sum(len(v) for v in cluster.recorder.out_of_order.values()),
        holes=report.total_holes,
        processes_with_holes=sum(1 for h in report.holes.values() if h),
        order_violations=len(report.order_violations),
        integrity_violations=len(report.integrity_violations),
        delay=delay,
        entries_processed=cluster.entries_processed(),
        network=cluster.network_statistics(),
        rounds_run=(cluster.now - t0) / delta,
        virtual_time=cluster.now,
        settled=settled,
        wall_seconds=time.perf_counter() - wall,
        report=report,
        delays=delays,
    )
