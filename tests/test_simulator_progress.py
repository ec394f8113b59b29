"""The virtual-time network always advances time or says it cannot.

Rounding a due time up to a quantum with
``ceil(at / q) * q`` alone can give a time just *before* ``at`` in floating
point; a timer then fired early, did nothing and re-armed at the same
instant, forever. And a run that makes no progress in virtual time (items
re-scheduled at the same instant without end) must be reported, never spun.
"""

from __future__ import annotations

import itertools

import pytest
from epto.transports.simulation import (
    Cluster,
    ConstantLatency,
    Simulation,
    SimulationStalled,
    UniformLatency,
)

from epto import Config, ConfigurationError
from epto.tokenring import TokenRingConfig


def small_config() -> Config:
    return Config(fanout=3, ttl=6, round_interval=100.0)


@pytest.mark.timeout(120)
def test_token_ring_with_a_millisecond_quantum_reaches_the_end_with_time_advancing() -> None:
    # Used to stop advancing at t = 0.705: a timer rounded to 0.7049999... ran
    # before it was due and re-armed at that same instant without end.
    c = Cluster(
        3,
        seed=0,
        config=TokenRingConfig(),
        latency=ConstantLatency(0.002),
        quantum=0.001,
        max_items_per_instant=10_000,
    )
    received = []
    for step in range(1, 11):
        c.run_until(step * 0.5)
        assert c.now == step * 0.5
        received.append(c.entries_processed())
    # Heartbeats keep flowing in every half second, to the end.
    assert all(b > a for a, b in itertools.pairwise(received))


@pytest.mark.parametrize("quantum", [0.001, 0.3, 0.1, 0.007])
def test_nothing_runs_before_its_due_time(quantum: float) -> None:
    sim = Simulation(small_config(), quantum=quantum)
    early: list[tuple[float, float]] = []

    def at(due: float) -> None:
        def action() -> None:
            if sim.now < due:
                early.append((due, sim.now))

        sim.call_at(due, action)

    # 0.9 = 3 x 0.3 and 0.088 were rounded to 0.8999999999999999 and
    # 0.08799999999999999; cover many sums like the ones timers compute.
    for k in range(1, 3000):
        at(k * 0.3)
        at(k * 0.001 + 0.087)
        at(0.705 + k * 0.0013)
    sim.run_until(5000.0)
    assert early == []


def test_a_datagram_never_arrives_before_its_latency() -> None:
    # The per-copy path of the network (a latency model that is not constant)
    # rounds due times too: sent at 1.5 with latency 0.3, a ball is due at 1.8,
    # which ceil(1.8 / 0.3) * 0.3 made 1.7999999999999998.
    config = Config(fanout=1, ttl=3, round_interval=100.0)
    sim = Simulation(config, latency=UniformLatency(0.3, 0.3), quantum=0.3)
    a = sim.add_process(phase=1.5)
    b = sim.add_process(phase=50.0)
    sim.broadcast(a, b"x")
    sim.run_until(1.5)
    assert sim.network_statistics().in_flight == 1
    sim.run_until(1.7999999999999998)
    assert sim.processes[b].statistics().balls_received == 0
    sim.run_until(2.1)  # the next multiple of 0.3, as computed
    assert sim.processes[b].statistics().balls_received == 1


@pytest.mark.timeout(120)
def test_an_instant_that_never_ends_is_reported_as_a_stall() -> None:
    sim = Simulation(small_config(), latency=ConstantLatency(0.0))
    calls = [0]

    def bounce() -> None:  # zero time, zero latency, forever
        calls[0] += 1
        sim.call_at(sim.now, bounce)

    sim.call_at(7.0, bounce)
    with pytest.raises(SimulationStalled) as info:
        sim.run_until(100.0)
    assert info.value.at == 7.0
    assert info.value.limit == 1_000_000
    assert 1_000_000 <= calls[0] <= 1_000_001
    assert sim.now == 7.0
    assert "stalled at t = 7.0" in str(info.value)


@pytest.mark.timeout(120)
def test_the_bound_is_configurable_and_counts_items_scheduled_during_the_instant() -> None:
    sim = Simulation(small_config(), max_items_per_instant=50, quantum=1.0)
    ran: list[float] = []
    for _ in range(50):
        sim.call_at(3.5, lambda: ran.append(sim.now))
    sim.run_until(10.0)  # 50 items at t = 4: at the bound, not past it
    assert ran == [4.0] * 50

    def bounce() -> None:
        ran.append(sim.now)
        sim.call_at(sim.now, bounce)

    sim.call_at(20.0, bounce)
    with pytest.raises(SimulationStalled) as info:
        sim.run_until(30.0)
    assert (info.value.at, info.value.limit) == (20.0, 50)
    assert info.value.items == 51


def test_a_bad_bound_is_refused() -> None:
    for bad in (0, -1, 2.5):
        with pytest.raises(ConfigurationError):
            Simulation(small_config(), max_items_per_instant=bad)  # type: ignore[arg-type]
