"""The implementation of :mod:`epto.stability`; see there."""

from __future__ import annotations

import math

import attrs

from .._errors import ConfigurationError


@attrs.frozen(kw_only=True, slots=True)
class StabilityEstimate:
    rounds: int
    fraction_holding: float
    """Expected fraction of processes holding the event."""
    all_hold: float
    """Estimated probability that every process holds it."""


def estimate(rounds: int, *, fanout: int, n: int, loss: float = 0.0) -> StabilityEstimate:
    """Stability of an event that has been gossiped for ``rounds`` rounds
    (the ttl of its copy) in a group of ``n`` with fanout ``fanout``."""
    if n < 2:
        raise ConfigurationError(f"n must be at least 2, got {n!r}")
    if fanout < 1:
        raise ConfigurationError(f"fanout must be at least 1, got {fanout!r}")
    if not 0 <= loss < 1:
        raise ConfigurationError(f"loss must be in [0, 1), got {loss!r}")
    if rounds < 0:
        raise ConfigurationError(f"rounds must be non-negative, got {rounds!r}")
    k = fanout * (1 - loss)
    log_miss_one_copy = math.log1p(-1 / n)
    x = 1 / n
    log_still_missing = 0.0  # log P(a given other process lacks it)
    for _ in range(rounds):
        log_miss = x * n * k * log_miss_one_copy
        log_still_missing += log_miss
        x = 1 - (1 - x) * math.exp(log_miss)
    p_missing = math.exp(log_still_missing)
    all_hold = math.exp((n - 1) * math.log1p(-p_missing)) if p_missing < 1 else 0.0
    return StabilityEstimate(rounds=rounds, fraction_holding=x, all_hold=all_hold)
