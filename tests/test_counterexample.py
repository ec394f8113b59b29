"""The counterexample of JEpTO (Gilberti and Lobba, section III), rebuilt as a
scripted schedule in the virtual-time network.

p1 and p2 broadcast concurrent events e11 and e21 with the same logical
timestamp. p2's ball reaches everyone quickly; p1's ball is slow on every
link. p1 holds both events when they become stable and delivers e11 -> e21
(order key (ts, source)); p2 and p3 deliver e21 alone, then e11 arrives. With
the published conditions (``ordering="paper"``) they accept e11, whose ts
equals their last delivered ts, and deliver e21 -> e11: total order is broken.
The corrected strict conditions refuse e11 there (a hole, never a misorder).

Schedule (round length 100, TTL 2, fanout 2 = everyone else):

====  ============================================================
t     what happens
====  ============================================================
0     p1 broadcasts e11, p2 broadcasts e21; both get ts 1
10    p1's round: e11 sent with ttl 1 (arrives at 510: slow links)
20    p2's round: e21 sent with ttl 1 (arrives at 25)
130   p3 delivers e21 (stable; nothing else queued)
210   p1 delivers e11, e21 (both stable; e11 has the smaller source)
220   p2 delivers e21
510   e11 reaches p2 and p3; paper mode accepts it (ts == lastDeliveredTs)
620   paper mode: p2 delivers e11 (p3 at 630)
====  ============================================================
"""

from __future__ import annotations

import pytest
from epto.transports.simulation import (
    ConstantLatency,
    DeliveryRecorder,
    Simulation,
    SimulationObserver,
)

from epto import Config, Delivery

P1, P2, P3 = 1, 2, 3
E11 = (P1, 0)
E21 = (P2, 0)


def run_trace(ordering: str) -> tuple[Simulation, DeliveryRecorder]:
    config = Config(fanout=2, ttl=2, round_interval=100.0, ordering=ordering)  # type: ignore[arg-type]
    sim = Simulation(config, seed=0, latency=ConstantLatency(5))
    recorder = DeliveryRecorder(sim)
    sim.add_observer(recorder)
    for pid, phase in ((P1, 10.0), (P2, 20.0), (P3, 30.0)):
        sim.add_process(pid, phase=phase)
    # p1's links are slow: its event reaches the others only after they
    # delivered p2's concurrent event.
    sim.set_link_latency(P1, P2, 500.0)
    sim.set_link_latency(P1, P3, 500.0)
    assert sim.broadcast(P1, b"e11") == E11
    assert sim.broadcast(P2, b"e21") == E21
    sim.run_until(2_000)
    return sim, recorder


def test_paper_conditions_break_total_order_on_the_trace() -> None:
    from epto.check import check

    sim, recorder = run_trace("paper")
    assert recorder.sequences[P1] == [E11, E21]
    assert recorder.sequences[P2] == [E21, E11]
    assert recorder.sequences[P3] == [E21, E11]
    assert recorder.times[P1] == [210.0, 210.0]
    assert recorder.times[P3] == [130.0, 630.0]
    report = check(recorder.sequences, broadcast=sim.broadcasts)
    assert len(report.order_violations) == 1
    violation = report.order_violations[0]
    assert set(violation.cycle) == {E11, E21}
    assert P1 in violation.witnesses
    assert set(violation.witnesses) & {P2, P3}
    assert not report.integrity_violations


def test_strict_conditions_keep_total_order_on_the_trace() -> None:
    from epto.check import check

    sim, recorder = run_trace("strict")
    assert recorder.sequences[P1] == [E11, E21]
    # e11 arrives after e21, with the same timestamp, was delivered: refused.
    assert recorder.sequences[P2] == [E21]
    assert recorder.sequences[P3] == [E21]
    report = check(recorder.sequences, broadcast=sim.broadcasts)
    assert report.ok
    assert report.holes == {P1: 0, P2: 1, P3: 1}
    assert sim.processes[P3].statistics().rejected_stale >= 1


def test_the_two_events_are_concurrent() -> None:
    seen: dict[tuple[int, int], int] = {}

    class Timestamps(SimulationObserver):
        def on_delivery(self, pid: int, delivery: Delivery, now: float) -> None:
            seen[delivery.event.id] = delivery.event.ts

    # Links slower than the gap between the two rounds: neither ball reaches
    # the other source before its own round stamps its event.
    config = Config(fanout=2, ttl=2, round_interval=100.0)
    sim = Simulation(config, latency=ConstantLatency(50))
    sim.add_observer(Timestamps())
    for pid, phase in ((P1, 10.0), (P2, 20.0), (P3, 30.0)):
        sim.add_process(pid, phase=phase)
    sim.broadcast(P1, b"e11")
    sim.broadcast(P2, b"e21")
    sim.run_until(1_000)
    assert seen == {E11: 1, E21: 1}


@pytest.mark.parametrize("ordering", ["paper", "strict"])
def test_trace_is_deterministic(ordering: str) -> None:
    assert run_trace(ordering)[1].sequences == run_trace(ordering)[1].sequences
