"""Optimistic delivery in a token-ring group (docs/optimistic.md), in the
virtual-time network: the plan a quiet group computes, the agreement of the
optimistic order with the final one, the final order's safety, the meaning of
``Delivery.reordered`` for an application that applies tentatively, re-planning
on a view change, and the values a peer may not make a member take."""

from __future__ import annotations

import random

import pytest
from epto.transports.simulation import LinkLatency, SimulationObserver, TokenRingCluster

from epto import Delivery, DeliveryTag, EventId, ProcessId
from epto.check import check
from epto.optimistic import OptimisticConfig
from epto.tokenring import TokenRingConfig, TokenRingProcess
from epto.tokenring._messages import Delays, Latencies, Probe

TRIANGLE = [[0.0, 0.005, 0.007], [0.005, 0.0, 0.009], [0.007, 0.009, 0.0]]
"""Seed 001's worked example: one-way latencies 5, 7 and 9 ms."""


def _config(**optimistic: object) -> TokenRingConfig:
    return TokenRingConfig(optimistic=OptimisticConfig(**optimistic))  # type: ignore[arg-type]


class Application(SimulationObserver):
    """What an application does with the two tags, per process: a confirmed
    list (the final order) and a tentative one (confirmed plus the optimistic
    deliveries not final yet, in their optimistic order), rebuilt on
    ``reordered``. Records every breach of the documented contract."""

    def __init__(self) -> None:
        self.confirmed: dict[ProcessId, list[EventId]] = {}
        self.pending: dict[ProcessId, list[EventId]] = {}
        self.tentative: dict[ProcessId, list[EventId]] = {}
        self.optimistic: dict[ProcessId, set[EventId]] = {}
        self.breaches: list[str] = []

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        eid = delivery.event.id
        confirmed = self.confirmed.setdefault(pid, [])
        pending = self.pending.setdefault(pid, [])
        tentative = self.tentative.setdefault(pid, [])
        seen = self.optimistic.setdefault(pid, set())
        if delivery.tag is DeliveryTag.OPTIMISTIC:
            if eid in seen or eid in confirmed:
                self.breaches.append(f"{pid}: {eid} optimistic twice or after final")
            seen.add(eid)
            pending.append(eid)
            tentative.append(eid)
            return
        if delivery.tag is not DeliveryTag.FINAL:
            self.breaches.append(f"{pid}: tag {delivery.tag}")
            return
        confirmed.append(eid)
        if not delivery.reordered:
            if not pending or pending[0] != eid:
                self.breaches.append(f"{pid}: {eid} confirmed but not the oldest pending")
                return
            pending.pop(0)
        else:
            if pending and pending[0] == eid:
                self.breaches.append(f"{pid}: {eid} reordered but the oldest pending")
            if eid in pending:
                pending.remove(eid)
            tentative[:] = confirmed + pending
        if tentative != confirmed + pending:
            self.breaches.append(f"{pid}: tentative state differs from final + pending")


def _traffic(
    cluster: TokenRingCluster, n: int, start: float, count: int, rate: float, seed: int
) -> float:
    rng = random.Random(seed)
    t = start
    for i in range(count):
        t += rng.expovariate(rate)
        cluster.broadcast_at(t, rng.randrange(n), b"m%d" % i)
    return t


def _stats(proc: TokenRingProcess):  # type: ignore[no-untyped-def]
    stats = proc.statistics().optimistic
    assert stats is not None
    return stats


def test_a_quiet_group_plans_the_papers_optimum() -> None:
    # Equal (zero) rates and constant latencies: the coordinator's plan is the
    # LP optimum of seed 001's example, D = [[3,5,7],[5,7,9],[7,9,11]] ms, i.e.
    # each member delays only its own messages, by 3, 7 and 11 ms.
    cluster = TokenRingCluster(3, _config(), seed=1, delay=LinkLatency(TRIANGLE))
    cluster.run_until(3.0)
    delays = {p: dict(_stats(proc).delays) for p, proc in cluster.procs.items()}
    expected = {
        0: {0: 0.003, 1: 0.0, 2: 0.0},
        1: {0: 0.0, 1: 0.007, 2: 0.0},
        2: {0: 0.0, 1: 0.0, 2: 0.011},
    }
    assert delays == {p: pytest.approx(row, abs=1e-9) for p, row in expected.items()}
    for p, proc in cluster.procs.items():
        latencies = dict(_stats(proc).latencies)
        assert latencies == {q: pytest.approx(TRIANGLE[p][q], abs=1e-9) for q in range(3) if q != p}
    assert _stats(cluster.procs[0]).plans_made >= 1


def test_with_constant_latencies_the_optimistic_order_is_the_final_order() -> None:
    cluster = TokenRingCluster(3, _config(), seed=2, delay=LinkLatency(TRIANGLE))
    app = Application()
    cluster.add_observer(app)
    end = _traffic(cluster, 3, 3.0, 1500, 150.0, seed=3)
    cluster.run_until(end + 2.0)
    assert app.breaches == []
    for proc in cluster.procs.values():
        stats = _stats(proc)
        assert stats.optimistic == 1500
        assert stats.confirmed + stats.reordered == 1500
        # Only messages in flight while a new plan reaches the members (the
        # rates change once traffic starts) may be mispredicted.
        assert stats.reordered <= 3
    assert check(cluster.delivered, broadcast=cluster.broadcasts).ok


def test_without_delays_jitter_reorders_and_the_final_order_stays_safe() -> None:
    # planner="none": every member delivers on arrival; with 5 to 9 ms links
    # the members see different spontaneous orders, which the final
    # deliveries correct.
    cluster = TokenRingCluster(
        3, _config(planner="none"), seed=4, delay=LinkLatency(TRIANGLE, 0.002)
    )
    app = Application()
    cluster.add_observer(app)
    end = _traffic(cluster, 3, 1.0, 1000, 300.0, seed=5)
    cluster.run_until(end + 2.0)
    assert app.breaches == []
    assert sum(_stats(p).reordered for p in cluster.procs.values()) > 50
    assert check(cluster.delivered, broadcast=cluster.broadcasts).ok


def _cases() -> list[tuple[int, int, float, float, str, bool]]:
    rng = random.Random(2026)
    jitters = [0.0, 0.0005, 0.002, 0.005]
    rates = [20.0, 200.0, 1000.0]
    planners = ["optimal", "fast-seto", "seto", "none"]
    return [
        (
            rng.randrange(2**16),
            rng.randint(2, 5),
            rng.choice(jitters),
            rng.choice(rates),
            planners[i % 4],
            i % 3 == 0,
        )
        for i in range(30)
    ]


@pytest.mark.parametrize(("seed", "n", "jitter", "rate", "planner", "crash"), _cases())
def test_final_order_is_safe_and_the_tags_keep_their_contract(
    seed: int, n: int, jitter: float, rate: float, planner: str, crash: bool
) -> None:
    rng = random.Random(seed)
    base = [[0.0 if r == s else rng.uniform(0.001, 0.02) for s in range(n)] for r in range(n)]
    cluster = TokenRingCluster(
        n, _config(planner=planner), seed=seed, delay=LinkLatency(base, jitter)
    )
    app = Application()
    cluster.add_observer(app)
    end = _traffic(cluster, n, 1.5, 300, rate, seed=seed + 1)
    if crash and n >= 3:
        cluster.at(1.5 + (end - 1.5) / 2, lambda: cluster.crash(n - 1))
    cluster.run_until(end + 10.0)
    assert app.breaches == []
    staying = set(cluster.staying_members())
    report = check(cluster.delivered, broadcast=cluster.broadcasts)
    assert not report.order_violations and not report.integrity_violations
    finals = {p: cluster.delivered[p] for p in staying}
    # Every staying member delivered the same final sequence (the token ring's
    # agreement), and each of its optimistic deliveries is among them.
    assert len({tuple(seq) for seq in finals.values()}) == 1
    for p in staying:
        assert app.optimistic.get(p, set()) <= set(finals[p])
        stats = _stats(cluster.procs[p])
        assert stats.confirmed + stats.reordered == len(finals[p])
        assert app.pending.get(p, []) == []


def test_a_view_change_replans_without_the_member_that_left() -> None:
    latencies = [[0.0 if r == s else 0.004 + 0.001 * (r + s) for s in range(4)] for r in range(4)]
    cluster = TokenRingCluster(4, _config(), seed=6, delay=LinkLatency(latencies))
    cluster.run_until(3.0)
    assert {p for p, _ in _stats(cluster.procs[1]).delays} == {0, 1, 2, 3}
    cluster.crash(0)  # the coordinator: member 1 takes over after the change
    end = _traffic(cluster, 1, 3.5, 0, 1.0, seed=0)
    cluster.run_until(max(end, 12.0))
    assert 0 not in cluster.procs[1].config.members
    stats = _stats(cluster.procs[1])
    assert stats.plans_made >= 1
    for p in (1, 2, 3):
        assert {q for q, _ in _stats(cluster.procs[p]).delays} == {1, 2, 3}


def _member(pid: ProcessId = 1, **optimistic: object) -> TokenRingProcess:
    return TokenRingProcess(
        pid, _config(**optimistic), rng=random.Random(0), now=0.0, members=[0, 1, 2]
    )


def test_values_a_peer_may_not_make_a_member_take() -> None:
    proc = _member()
    # A plan from a member that is not the coordinator (member 0 is).
    proc.receive(2, Delays(instance=0, epoch=1, row=((0, 0.001),)), 0.1)
    # A delay beyond max_delay, or for a process outside the view.
    proc.receive(0, Delays(instance=0, epoch=1, row=((0, 60.0),)), 0.1)
    proc.receive(0, Delays(instance=0, epoch=2, row=((9, 0.001),)), 0.1)
    # A plan of a configuration this member has not reached.
    proc.receive(0, Delays(instance=7, epoch=1, row=((0, 0.001),)), 0.1)
    # An echo whose round trip is negative (a stamp from the future).
    proc.receive(2, Probe(stamp=5.0, echo=True), 0.1)
    # A latency report sent to a member that is not the coordinator.
    proc.receive(2, Latencies(instance=0, plan=(0, 0), rate=1.0, row=((0, 0.001),)), 0.1)
    # A row longer than the view.
    long_row = tuple((p, 0.001) for p in range(5))
    proc.receive(2, Latencies(instance=0, plan=(0, 0), rate=1.0, row=long_row), 0.1)
    assert proc.rejected == {
        "not-coordinator": 2,
        "bad-delays": 2,
        "stale-plan": 1,
        "bad-probe": 1,
        "bad-row": 1,
    }
    assert _stats(proc).delays == ()
    assert _stats(proc).plans == 0
    # And the plan of the coordinator is taken.
    proc.receive(0, Delays(instance=0, epoch=1, row=((0, 0.002), (1, 0.0), (2, 0.001))), 0.2)
    assert dict(_stats(proc).delays) == {0: 0.002, 1: 0.0, 2: 0.001}
    proc.receive(0, Delays(instance=0, epoch=1, row=((0, 0.0),)), 0.3)  # the same epoch again
    assert proc.rejected["stale-plan"] == 2


def test_a_probe_is_echoed_with_its_stamp() -> None:
    proc = _member()
    proc.messages_to_send()
    proc.receive(2, Probe(stamp=0.25), 0.3)
    assert (2, Probe(stamp=0.25, echo=True)) in proc.messages_to_send()


def test_without_the_option_deliveries_stay_in_order_and_nothing_is_probed() -> None:
    cluster = TokenRingCluster(3, TokenRingConfig(), seed=7, delay=LinkLatency(TRIANGLE))
    tags: set[DeliveryTag] = set()

    class Tags(SimulationObserver):
        def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
            tags.add(delivery.tag)

    cluster.add_observer(Tags())
    end = _traffic(cluster, 3, 0.5, 100, 100.0, seed=8)
    cluster.run_until(end + 1.0)
    assert tags == {DeliveryTag.IN_ORDER}
    assert all(proc.statistics().optimistic is None for proc in cluster.procs.values())
