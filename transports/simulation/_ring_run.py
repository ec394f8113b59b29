"""``run_simulation`` for ``SimulationSpec(mode="token-ring")``: the EpTO
workload, network options and summary, for a token-ring group in the same
virtual-time network.

Time is in ticks (milliseconds with the PlanetLab latencies), so the token
ring's timeouts, given in seconds, are scaled by 1000 and kept well above the
largest latency (:meth:`SimulationSpec.tokenring_config`). The links are
reliable FIFO links; loss breaks a link for one largest latency (at least one
tick); churn crashes members and joins new identities through ``pss_seeds``
members of the view; the partition cuts a random fraction of the initial
members off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from epto import EventId, ProcessId
from epto.check import check
from epto.tokenring import TokenRingProcess

from ._calendar import SimulationStalled
from ._cluster import Cluster
from ._experiment import Settled, SimulationResult, delay_summary, schedule_workload
from ._network import ROUND_TRIP
from ._ring_cluster import PositionRecorder
from ._simulation import SimulationObserver
from ._spec import SimulationSpec


def run_token_ring(
    spec: SimulationSpec,
    *,
    observers: Iterable[SimulationObserver] = (),
    progress: Callable[[float, float], None] | None = None,
) -> SimulationResult:
    """Run ``spec`` as a token ring; see :func:`run_simulation`."""
    wall = time.perf_counter()
    latency = spec.latency_model()
    config = spec.tokenring_config(latency)
    delta = spec.round_interval
    top = latency.maximum
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
    )
    positions = PositionRecorder()
    cluster.add_observer(positions)
    for obs in observers:
        cluster.add_observer(obs)
    settle = config.exclude_timeout + 4 * config.change_timeout + 10 * top
    drain = spec.max_drain_rounds
    if drain is None:
        drain = math.ceil(settle / delta)
    limit = spec.rounds + drain
    done = 0
    settled: Settled = "round-limit"
    stalled_at = None
    try:
        cluster.add_processes(spec.processes)
        schedule_workload(cluster, spec, 0.0)
        while True:
            if done >= spec.rounds:
                if spec.stop_when_complete and cluster.quiescent():
                    settled = "complete"
                    break
                if done >= limit:
                    if cluster.quiescent():
                        settled = "complete"
                    break
            cluster.run_rounds(1)
            done += 1
            if progress is not None:
                progress(done, max(limit, done))
    except SimulationStalled as stall:
        settled = "stalled"
        stalled_at = stall.at

    procs = cluster.processes
    in_view = staying = [p for p in procs if cluster.can_broadcast(p)]
    # Members that stayed: those of the latest view (the primary component's:
    # a cut-off minority keeps an older one and is excluded by the others).
    latest = None
    for p in staying:
        proc = procs[p]
        assert isinstance(proc, TokenRingProcess)
        final = proc.statistics()
        if latest is None or final.view > latest[0]:
            latest = (final.view, set(final.members))
    if latest is not None:
        staying = [p for p in staying if p in latest[1]]
    starts: dict[ProcessId, int] = {}
    for p in staying:
        proc = procs[p]
        assert isinstance(proc, TokenRingProcess)
        for member, seq, _ in proc.config.starts:
            starts[member] = seq
    position = positions.position
    kept = set(staying)
    joined = cluster.joined_at
    broadcasts = cluster.broadcasts

    def expected(pid: ProcessId, eid: EventId) -> bool:
        if pid not in kept:
            return False
        at = position.get(eid)
        if at is None:
            # Sequenced nowhere: owed by every member that had joined when it
            # was broadcast (validity; holes only count delivered events).
            return joined[pid] <= broadcasts[eid][1]
        return at >= starts.get(pid, 0)

    # With the default k nothing delivered is ever rolled back, anywhere: check
    # every process that ever ran. A k below the majority guarantees order and
    # agreement among the members that stay in the view only.
    sequences = cluster.recorder.sequences
    if spec.k is not None:
        sequences = {p: seq for p, seq in sequences.items() if p in kept}
    report = check(sequences, broadcast=cluster.broadcasts, expected=expected, staying=kept)
    delays = sorted(cluster.recorder.delays)
    stats = None
    if in_view:
        first = procs[in_view[0]]
        assert isinstance(first, TokenRingProcess)
        stats = first.statistics()
    excluded = sum(1 for p in procs.values() if isinstance(p, TokenRingProcess) and p.excluded)
    return SimulationResult(
        spec=spec,
        config=config,
        processes=len(cluster.joined_at),
        processes_at_end=len(procs),
        events=len(cluster.broadcasts),
        events_delivered=report.events,
        deliveries=report.deliveries,
        out_of_order_deliveries=0,
        holes=report.total_holes,
        processes_with_holes=sum(1 for h in report.holes.values() if h),
        validity_violations=len(report.validity_violations),
        undelivered=report.total_undelivered,
        order_violations=len(report.order_violations),
        integrity_violations=len(report.integrity_violations),
        delay=delay_summary(delays),
        entries_processed=cluster.entries_processed(),
        network=cluster.network_statistics(),
        rounds_run=cluster.now / delta,
        virtual_time=cluster.now,
        settled=settled,
        stalled_at=stalled_at,
        wall_seconds=time.perf_counter() - wall,
        report=report,
        delays=delays,
        extra_parameters={
            "k": config.effective_k(spec.processes, spec.processes) if spec.k is None else spec.k,
            "members_at_end": len(in_view),
            "excluded": excluded,
            "view_changes": None if stats is None else stats.full_changes,
            "iview_changes": None if stats is None else stats.light_changes,
            "view": None if stats is None else stats.view,
            "core_at_end": None if stats is None else len(stats.core),
        },
    )
