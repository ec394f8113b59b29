"""The global clock's guard never refuses a correct member's events
(docs/parameters.md, *The global clock's guard*): a member stamps its own
events at most ``Process.stamp_limit(now)``, one skew below what any peer
whose clock lags by at most ``max_clock_skew`` accepts, and a burst beyond
that waits for the clock instead of being refused by the others."""

from __future__ import annotations

import math
import random
import warnings

import pytest
from epto.transports.simulation import Cluster, UniformLatency
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from epto import Config, ConfigurationError
from epto.epidemic import FullView, Process


def test_a_burst_of_ten_thousand_on_a_coarse_clock_is_delivered_everywhere() -> None:
    # One tick per unit of now, 100 units per round, 60 units of skew: the
    # stamps of a 10,000-event burst would run 10,000 ticks ahead of now,
    # where every peer refused them (190 of 10,001 delivered at the others).
    config = Config.for_group(10, clock="global", round_interval=100, clock_resolution=1.0)
    cluster = Cluster(10, seed=3, config=config, latency=UniformLatency(5, 50))
    cluster.broadcast_at(10.0, 1, b"first")
    for i in range(10_000):
        cluster.broadcast_at(150.0, 0, b"e%d" % i)
    # The burst waits ~100 rounds for its timestamps, past twice the skew:
    # the process says so, once.
    with pytest.warns(RuntimeWarning, match="wait for the global clock") as record:
        assert cluster.run_until_quiescent(max_rounds=500)
    assert len(record) == 1
    sequences = cluster.recorder.sequences
    assert {pid: len(seq) for pid, seq in sequences.items()} == dict.fromkeys(range(10), 10_001)
    assert len({tuple(seq) for seq in sequences.values()}) == 1
    for proc in cluster.processes.values():
        stats = proc.statistics()  # type: ignore[union-attr]
        assert stats.rejected == {}
        assert stats.waiting == 0
    assert cluster.processes[0].statistics().waited > 9_000  # type: ignore[union-attr]
    assert cluster.check().ok


def test_a_configuration_whose_guard_is_below_one_tick_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_clock_skew \\* clock_resolution"):
        Config(fanout=2, ttl=3, clock="global", clock_resolution=0.001)
    # The logical clock does not read the resolution.
    Config(fanout=2, ttl=3, clock="logical", clock_resolution=0.001)
    Config(fanout=2, ttl=3, clock="global", clock_resolution=1 / 60)


def _run_group(
    *,
    resolution: float,
    skew: float,
    offsets: list[float],
    bursts: list[tuple[int, int, int]],
    ttl: int,
    seed: int,
) -> tuple[list[Process], dict[int, list[tuple[int, int]]]]:
    """Processes whose clocks read ``true time + offsets[p]`` (pairwise within
    ``skew``), every ball to every other member at once; ``bursts`` are
    ``(process, round, count)``. Runs until every broadcast is stamped and
    delivered everywhere, or a bound on the rounds the clock needs."""
    n = len(offsets)
    interval = 1.0
    config = Config(
        fanout=n - 1,
        ttl=ttl,
        round_interval=interval,
        clock="global",
        clock_resolution=resolution,
        max_clock_skew=skew,
    )
    start = 1000.0
    procs = [
        Process(p, config, peers=FullView(p, range(n)), rng=random.Random(seed + p), now=start)
        for p in range(n)
    ]
    total = sum(count for _, _, count in bursts)
    # Waiting broadcasts are stamped at rounds, at most one skew's ticks and
    # one round's ticks a round, after clocks pushed by peers ahead catch up.
    skew_ticks = math.floor(skew * resolution)
    per_round = min(skew_ticks, resolution * interval)
    catch_up = (3 * skew_ticks + 3) / (resolution * interval)
    limit = math.ceil(total / per_round + catch_up) + 4 * ttl + 20
    delivered: dict[int, list[tuple[int, int]]] = {p: [] for p in range(n)}
    for r in range(limit):
        t = start + (r + 1) * interval
        for pid, at, count in bursts:
            if at == r:
                for i in range(count):
                    procs[pid].broadcast(b"%d" % i, t + offsets[pid])
        for p, proc in enumerate(procs):
            proc.handle_timer(t + offsets[p])
        for p, proc in enumerate(procs):
            for dest, ball in proc.messages_to_send():
                procs[dest].receive(p, ball, t + offsets[dest])
        for p, proc in enumerate(procs):
            delivered[p].extend(d.event.id for d in proc.deliveries())
        if r > max(at for _, at, _ in bursts) and all(
            len(seq) == total for seq in delivered.values()
        ):
            break
    return procs, delivered


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    resolution=st.sampled_from([0.05, 0.5, 1.0, 3.0, 10.0, 1000.0, 1e6]),
    skew=st.floats(0.5, 50.0),
    shares=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4),
    bursts=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(1, 150)),
        min_size=1,
        max_size=5,
    ),
    ttl=st.integers(2, 4),
    seed=st.integers(0, 2**16),
)
def test_no_correct_member_has_an_event_refused_whatever_the_resolution_and_burst(
    resolution: float,
    skew: float,
    shares: list[float],
    bursts: list[tuple[int, int, int]],
    ttl: int,
    seed: int,
) -> None:
    assume(skew * resolution >= 1)
    n = len(shares)
    bursts = [(pid % n, at, count) for pid, at, count in bursts]
    offsets = [share * skew for share in shares]  # every pair within the skew
    with warnings.catch_warnings():
        # Long waits are warned about; here they are expected.
        warnings.simplefilter("ignore", RuntimeWarning)
        procs, delivered = _run_group(
            resolution=resolution,
            skew=skew,
            offsets=offsets,
            bursts=bursts,
            ttl=ttl,
            seed=seed,
        )
    total = sum(count for _, _, count in bursts)
    for proc in procs:
        stats = proc.statistics()
        assert stats.rejected == {}
        assert stats.waiting == 0
    assert all(len(seq) == total for seq in delivered.values())
    assert len({tuple(seq) for seq in delivered.values()}) == 1


def test_a_member_pushed_by_a_peer_ahead_waits_instead_of_outrunning_a_lagging_one() -> None:
    # A's clock is a full skew ahead of C's; B's, in between, follows A's
    # timestamps. Neither stamps anything C refuses; B's broadcasts wait
    # while A's stamps are past its limit, and are stamped later.
    skew, resolution = 5.0, 10.0
    with warnings.catch_warnings():
        # 149 events at 10 ticks a unit: the group's stamps run past twice
        # the skew, which is warned about.
        warnings.simplefilter("ignore", RuntimeWarning)
        procs, delivered = _run_group(
            resolution=resolution,
            skew=skew,
            offsets=[skew, skew / 2, 0.0],
            bursts=[(0, 0, 49), (1, 1, 30), (2, 1, 30), (0, 2, 40)],
            ttl=2,
            seed=5,
        )
    for proc in procs:
        assert proc.statistics().rejected == {}
    assert procs[1].statistics().waited > 0
    assert all(len(seq) == 149 for seq in delivered.values())


def test_stamp_limit_is_one_skew_below_a_lagging_peers_ceiling() -> None:
    config = Config(fanout=1, ttl=2, clock="global", clock_resolution=1000.0, max_clock_skew=5.0)
    ahead = Process(0, config, peers=FullView(0, [0, 1]), rng=random.Random(1), now=105.0)
    behind = Process(1, config, peers=FullView(1, [0, 1]), rng=random.Random(1), now=100.0)
    assert ahead.stamp_limit(105.0) == 105_000 + 5_000 - 1
    assert behind.ts_ceiling(100.0) == 100_000 + 10_000
    assert ahead.stamp_limit(105.0) < behind.ts_ceiling(100.0)
    logical = Process(
        0, Config(fanout=1, ttl=2), peers=FullView(0, [0, 1]), rng=random.Random(1), now=0.0
    )
    assert logical.stamp_limit(0.0) == 2**64 - 1
