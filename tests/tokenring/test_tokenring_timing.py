"""Timeouts that fit the latency and the group (docs/token-ring.md, *Timing*):
floors refused or corrected, measured round trips, back-off of suspicion."""

from __future__ import annotations

import random

import pytest
from epto.transports.simulation import SimulationSpec, TokenRingCluster

from epto import ConfigurationError
from epto.tokenring import TokenRingConfig
from epto.tokenring._membership import MAX_BACKOFF, Timing


def _eleven_window_of_one(*, fit: bool) -> TokenRingCluster:
    """The liveness seed of an independent campaign: eleven members, a window
    of one message, no loss, one-way delays of 35-40 ms, a token timeout of
    0.3 s (shorter than one rotation, 11 x 40 ms plus the idle holds)."""
    rng = random.Random(2598)
    cfg = TokenRingConfig(token_timeout=0.3, max_unstable_messages=1, log_retention=1)
    cluster = TokenRingCluster(11, cfg, seed=2598, delay=(0.035, 0.04), fit=fit)
    t, count = 0.05, 0
    while t < 3.0:
        cluster.broadcast_at(t, rng.randrange(11), b"m%d" % count)
        count += 1
        t += rng.expovariate(20.0)
    return cluster


@pytest.mark.parametrize("fit", [True, False], ids=["cluster-fits", "members-measure"])
def test_eleven_members_window_of_one_deliver_everything(fit: bool) -> None:
    # Before: about 240 light view changes in 120 s and one delivery.
    cluster = _eleven_window_of_one(fit=fit)
    cluster.run_until(40.0)
    sent = set(cluster.broadcasts)
    assert len(sent) > 40
    for p in range(11):
        assert set(cluster.delivered[p]) == sent
        assert cluster.delivered[p] == cluster.delivered[0]
    stats = cluster.procs[0].statistics()
    assert stats.light_changes + stats.full_changes <= 2
    if fit:
        assert cluster.corrections["token_timeout"][0] == 0.3
    else:
        assert cluster.corrections == {}
        timeouts = cluster.procs[0].timeouts()
        # Fitted from measured round trips: at least one rotation.
        assert timeouts["token_timeout"] > 11 * 3 * 0.035
        assert 0.03 < timeouts["latency"] < 0.2


def test_floors_refuse_and_correct() -> None:
    cfg = TokenRingConfig(token_timeout=0.3)
    with pytest.raises(ConfigurationError, match=r"token_timeout=0.3 < 1.43"):
        cfg.check_timing(11, 0.04)
    fit = cfg.fitted(11, 0.04)
    fit.check_timing(11, 0.04)
    assert fit.token_timeout == pytest.approx(11 * (2 * 0.005 + 3 * 0.04))
    assert fit.suspect_timeout == cfg.suspect_timeout  # 0.3 >= 2 x 0.05 + 4 x 0.04
    assert fit.exclude_timeout > fit.suspect_timeout
    assert TokenRingConfig().fitted(5, 0.001) == TokenRingConfig()
    with pytest.raises(ConfigurationError):
        cfg.timing_floors(0, 0.01)


def test_simulation_spec_fits_the_group() -> None:
    spec = SimulationSpec(mode="token-ring", processes=30, latency="constant", latency_high=40.0)
    cfg = spec.tokenring_config(spec.latency_model())
    cfg.check_timing(30, 40.0)
    assert cfg.token_timeout >= 30 * 3 * 40.0


def test_backoff_doubles_without_progress_and_comes_back() -> None:
    timing = Timing(TokenRingConfig())
    base = timing.config(5)
    assert timing.changed(0.0, 10, waiting=True) is False  # the first change: no history
    for i in range(1, 10):
        timing.changed(float(i), 10, waiting=True)  # nothing delivered since
    assert timing.backoff == MAX_BACKOFF
    backed = timing.config(5)
    cfg = TokenRingConfig()
    top = 2 * cfg.exclude_timeout
    assert backed.token_timeout == min(base.token_timeout * MAX_BACKOFF, top)
    # Suspicion stays below the exclusion timeout.
    assert base.suspect_timeout < backed.suspect_timeout <= backed.exclude_timeout / 2
    # Progress and quiet: halved step by step, back to the configuration.
    now, delivered = 10.0, 10
    while timing.backoff > 1:
        now += 4 * backed.suspect_timeout
        delivered += 1
        assert timing.quiet(now, delivered, backed.suspect_timeout)
    assert timing.config(5) == base
    # An idle group's change (nothing waiting) does not back off.
    assert timing.changed(now + 1, delivered, waiting=False) is False


def test_round_trips_fit_the_timeouts() -> None:
    timing = Timing(TokenRingConfig())
    assert timing.sample(0.2)
    for _ in range(50):
        timing.sample(0.2)
    assert timing.latency() == pytest.approx(0.1, rel=0.05)
    cfg = timing.config(11)
    assert cfg.token_timeout >= 11 * 3 * 0.1
    assert cfg.suspect_timeout >= 4 * 0.1
    assert not timing.sample(float("nan"))
