"""``epto simulate --mode token-ring``: the same workload, network options and
JSON summary as the EpTO simulation, for a token-ring group.

Time is in simulator ticks (milliseconds with the PlanetLab latencies), so the
token-ring timeouts, given in seconds, are scaled by 1000. The network is the
token ring's own (reliable FIFO links, :mod:`epto.tokenring.simulation`) fed
with the latency model of the spec; loss is a link break (the message and what
is in flight on that link are lost, the link reconnects after one largest
latency); churn crashes members and joins new identities.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from typing import Any

import attrs

from .._event import EventId, ProcessId
from ..check import CheckReport, check
from ._config import TokenRingConfig
from ._membership import Role
from .simulation import Latency, TokenRingCluster


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[max(1, math.ceil(q / 100 * len(values))) - 1]


@attrs.define(kw_only=True)
class TokenRingSimulationResult:
    summary_dict: dict[str, Any]
    report: CheckReport
    delays: list[float]

    @property
    def order_violations(self) -> int:
        return len(self.report.order_violations)

    @property
    def integrity_violations(self) -> int:
        return len(self.report.integrity_violations)

    def summary(self) -> dict[str, Any]:
        return self.summary_dict


def run_token_ring(
    spec: Any,
    latency: Latency,
    *,
    k: int | None = None,
    ticks_per_second: float = 1000.0,
    progress: Callable[[float, float], None] | None = None,
    wall_clock: Callable[[], float] = lambda: 0.0,
) -> TokenRingSimulationResult:
    """Run ``spec`` (an ``epto.transports.virtual.SimulationSpec``) as a token ring.

    ``wall_clock`` (for example ``time.perf_counter``) only measures
    ``wall_seconds``: the core reads no clock of its own."""
    wall = wall_clock()
    maximum = float(getattr(latency, "maximum", 100.0))
    base = TokenRingConfig(k=k).scaled(ticks_per_second)
    # Timeouts must stay well above the largest one-way latency of the model.
    cfg = attrs.evolve(
        base,
        suspect_timeout=max(base.suspect_timeout, 4 * maximum),
        readmit_after=max(base.readmit_after, 8 * maximum),
        exclude_timeout=max(base.exclude_timeout, 20 * maximum),
        token_timeout=max(base.token_timeout, 8 * maximum),
        change_timeout=max(base.change_timeout, 4 * maximum),
        fetch_timeout=max(base.fetch_timeout, maximum / 2),
    )
    cluster = TokenRingCluster(
        spec.processes,
        cfg,
        seed=spec.seed,
        delay=latency,
        loss=spec.loss,
        break_duration=max(maximum, 1.0),
    )
    rng = random.Random(spec.seed * 7919 + 1)
    delta = spec.round_interval
    span = spec.rounds * delta
    counter = [0]

    def payload() -> bytes:
        counter[0] += 1
        return counter[0].to_bytes(8, "big") + bytes(spec.payload_size - 8)

    def senders() -> list[ProcessId]:
        return [
            p
            for p, proc in cluster.procs.items()
            if p not in cluster.crashed and proc.role in (Role.CORE, Role.EXTERNAL)
        ]

    def send_one() -> None:
        live = senders()
        if live:
            cluster.broadcast(rng.choice(live), payload())

    if spec.events is not None:
        for at in sorted(rng.uniform(0, span) for _ in range(spec.events)):
            cluster.at(at, send_one)
    else:
        for r in range(spec.rounds):
            for pid in range(spec.processes):
                if rng.random() < spec.broadcast_rate:
                    at = (r + rng.random()) * delta

                    def fire(pid: ProcessId = pid) -> None:
                        if pid in senders():
                            cluster.broadcast(pid, payload())
                        else:
                            send_one()

                    cluster.at(at, fire)
    if spec.churn:
        owed = [0.0]
        next_id = [spec.processes]

        def churn_round() -> None:
            owed[0] += spec.churn
            while owed[0] >= 1:
                owed[0] -= 1
                live = senders()
                if len(live) > 2:
                    cluster.crash(rng.choice(live))
                    contacts = rng.sample(senders(), min(3, len(senders())))
                    cluster.join(next_id[0], contacts)
                    next_id[0] += 1
            if cluster.now + delta < span:
                cluster.at(cluster.now + delta, churn_round)

        cluster.at(delta, churn_round)

    settle = cfg.exclude_timeout + 4 * cfg.change_timeout + 10 * maximum
    end = span + settle
    steps = 100
    for i in range(1, steps + 1):
        cluster.run_until(end * i / steps)
        if progress is not None:
            progress(spec.rounds * i / steps, spec.rounds)

    staying = [p for p in cluster.staying() if cluster.procs[p].role is not Role.JOINING]
    starts: dict[ProcessId, int] = {}
    for p in staying:
        for member, seq, _ in cluster.procs[p].config.starts:
            starts[member] = seq

    def expected(pid: ProcessId, eid: EventId) -> bool:
        return pid in staying and cluster.position.get(eid, -1) >= starts.get(pid, 0)

    report = check({p: cluster.delivered[p] for p in staying}, expected=expected)
    delays = sorted(cluster.latencies(staying))
    alive = [p for p in cluster.procs if p not in cluster.crashed]
    stats = cluster.procs[staying[0]].statistics() if staying else None
    summary: dict[str, Any] = {
        "processes": spec.processes,
        "processes_total": len(cluster.procs),
        "processes_at_end": len(alive),
        "events": len(cluster.broadcast_at),
        "events_delivered": report.events,
        "deliveries": report.deliveries,
        "out_of_order_deliveries": 0,
        "holes": report.total_holes,
        "processes_with_holes": sum(1 for h in report.holes.values() if h),
        "order_violations": len(report.order_violations),
        "integrity_violations": len(report.integrity_violations),
        "delay": {
            "p50": _percentile(delays, 50),
            "p95": _percentile(delays, 95),
            "p99": _percentile(delays, 99),
            "max": delays[-1] if delays else None,
            "mean": statistics.mean(delays) if delays else None,
        },
        "entries_processed": cluster.stats["arrived"],
        "network": {
            **cluster.stats,
            "in_flight": cluster.in_flight(),
            # No peer sampling in a token ring: every member knows the view.
            "peer_messages_sent": 0,
            "peer_messages_arrived": 0,
        },
        "rounds_run": cluster.now / delta,
        "virtual_time": cluster.now,
        # The token ring runs a fixed horizon (broadcasts plus the membership
        # timeouts); "complete" when every staying member delivered what it owed.
        "settled": "complete" if report.total_holes == 0 else "round-limit",
        "wall_seconds": wall_clock() - wall,
        "parameters": {
            **attrs.asdict(spec),
            "mode": "token-ring",
            "fanout": None,
            "ttl": None,
            "fanout_derived": False,
            "ttl_derived": False,
            "k": cfg.effective_k(spec.processes, spec.processes) if k is None else k,
            "excluded": sum(1 for p in cluster.procs.values() if p.excluded),
            "view_changes": None if stats is None else stats.full_changes,
            "iview_changes": None if stats is None else stats.light_changes,
        },
    }
    return TokenRingSimulationResult(summary_dict=summary, report=report, delays=delays)
