"""The implementation of :mod:`epto.params`; see there."""

from __future__ import annotations

import math
from typing import Literal

import attrs

from .._defaults import DEFAULT_C, DEFAULT_CLOCK
from .._errors import ConfigurationError


@attrs.frozen(kw_only=True, slots=True)
class Parameters:
    """Derived parameters and the inputs they came from."""

    n: int
    c: float
    clock: Literal["logical", "global"]
    churn: float
    loss: float
    drift: float
    bounded_latency: bool
    fanout: int
    ttl: int
    fanout_uncapped: float
    """The lemma's fanout before rounding and capping (``inf`` when ``ln ln n <= 0``)."""

    def as_dict(self) -> dict[str, object]:
        return attrs.asdict(self)


def fanout_for(n: int, *, churn: float = 0.0, loss: float = 0.0) -> tuple[int, float]:
    """``(K, uncapped K)`` for ``n`` processes with churn and loss (Lemma 7)."""
    _check_n(n)
    _check_churn_loss(n, churn, loss)
    lnln = math.log(math.log(n))
    raw = math.inf if lnln <= 0 else 2 * math.e * math.log(n) / lnln * n / (n - churn) / (1 - loss)
    if math.isinf(raw):
        return n - 1, raw
    return min(n - 1, math.ceil(raw - 1e-9)), raw


def ttl_for(
    n: int,
    *,
    c: float = DEFAULT_C,
    clock: Literal["logical", "global"] = DEFAULT_CLOCK,
    drift: float = 1.0,
    bounded_latency: bool = False,
) -> int:
    """TTL for ``n`` processes (Lemmas 3 to 6)."""
    _check_n(n)
    if not (isinstance(c, int | float) and math.isfinite(c) and c > 1):
        raise ConfigurationError(f"c must be a finite number greater than 1, got {c!r}")
    if clock not in ("logical", "global"):
        raise ConfigurationError(f"clock must be 'logical' or 'global', got {clock!r}")
    if not (isinstance(drift, int | float) and math.isfinite(drift) and drift >= 1):
        raise ConfigurationError(
            f"drift must be the ratio δmax/δmin of round durations, at least 1, got {drift!r}"
        )
    base = math.ceil((c + 1) * math.log2(n) - 1e-9)
    if clock == "logical":
        base *= 2
    ttl = math.ceil(base * drift - 1e-9)
    if bounded_latency:
        ttl += 1
    return ttl


def derive_parameters(
    n: int,
    *,
    c: float = DEFAULT_C,
    clock: Literal["logical", "global"] = DEFAULT_CLOCK,
    churn: float = 0.0,
    loss: float = 0.0,
    drift: float = 1.0,
    bounded_latency: bool = False,
) -> Parameters:
    """Fanout and TTL for a group of ``n`` processes.

    Raises :class:`~epto.ConfigurationError` for inputs the lemmas do not
    cover: ``n < 2``, ``c <= 1``, ``loss`` outside ``[0, 1)``, ``churn``
    outside ``[0, n)``, ``drift < 1``.
    """
    fanout, raw = fanout_for(n, churn=churn, loss=loss)
    ttl = ttl_for(n, c=c, clock=clock, drift=drift, bounded_latency=bounded_latency)
    return Parameters(
        n=n,
        c=c,
        clock=clock,
        churn=churn,
        loss=loss,
        drift=drift,
        bounded_latency=bounded_latency,
        fanout=fanout,
        ttl=ttl,
        fanout_uncapped=raw,
    )


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ConfigurationError(f"n must be an integer of at least 2 processes, got {n!r}")


def _check_churn_loss(n: int, churn: float, loss: float) -> None:
    if not (isinstance(loss, int | float) and 0 <= loss < 1):
        raise ConfigurationError(f"loss must be in [0, 1), got {loss!r}")
    if not (isinstance(churn, int | float) and 0 <= churn < n):
        raise ConfigurationError(
            f"churn (processes replaced per round) must be in [0, n={n}), got {churn!r}"
        )
