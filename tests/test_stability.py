from __future__ import annotations

import random

import pytest

import epto
from epto.params import derive_parameters
from epto.stability import estimate


def test_estimate_grows_with_rounds_and_reaches_certainty() -> None:
    values = [estimate(r, fanout=17, n=100) for r in range(0, 12)]
    fractions = [v.fraction_holding for v in values]
    assert fractions[0] == pytest.approx(0.01)
    assert fractions == sorted(fractions)
    assert values[0].all_hold < 1e-6
    assert values[-1].all_hold > 0.999


def test_safe_ttl_is_far_past_the_estimated_stability_point() -> None:
    p = derive_parameters(10_000)
    assert estimate(p.ttl, fanout=p.fanout, n=10_000).all_hold > 1 - 1e-9


def test_loss_slows_the_estimate() -> None:
    assert (
        estimate(3, fanout=5, n=1000, loss=0.5).fraction_holding
        < estimate(3, fanout=5, n=1000).fraction_holding
    )


def test_estimate_tracks_a_simulated_push_gossip() -> None:
    # Mean-field against a direct Monte Carlo of the model's own process.
    n, k, rounds, trials = 200, 4, 4, 300
    rng = random.Random(5)
    total = 0.0
    for _ in range(trials):
        holding = {0}
        for _ in range(rounds):
            targets = {rng.randrange(n) for _ in range(len(holding) * k)}
            holding |= targets
        total += len(holding) / n
    assert estimate(rounds, fanout=k, n=n).fraction_holding == pytest.approx(
        total / trials, abs=0.05
    )


def test_bad_inputs() -> None:
    with pytest.raises(epto.ConfigurationError):
        estimate(1, fanout=3, n=1)
