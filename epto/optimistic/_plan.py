"""The value a planner returns, and the checks every planner runs on its input.

A plan is a delay matrix ``X`` (``X[r][s] >= 0``: what receiver ``r`` adds to
messages from sender ``s``) that makes every receiver see the same gaps between
messages sent at the same instant: the latency matrix ``D = W + X`` is additive,
``D[r][s] = a[r] + b[s]`` (notes-seed-001 §1.1). ``a`` and ``b`` are reported
with ``min(a) == 0``, so ``b[s]`` is the earliest delivery latency of sender
``s``'s messages anywhere and ``a[r]`` is receiver ``r``'s lag behind the
earliest receiver.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import attrs

from .._errors import ConfigurationError

Matrix = tuple[tuple[float, ...], ...]
Vector = tuple[float, ...]


@attrs.frozen(kw_only=True, slots=True)
class Plan:
    """Delays for optimistic delivery, with what they cost.

    ``method`` names the planner (``"seto"``, ``"fast-seto"``, ``"optimal"``);
    ``delays`` is ``X``; ``latencies`` is ``D = W + X``; ``average`` is the
    overall average latency weighted by the senders' rates (the paper's eq. 3:
    ``sum rate[s] * D[r][s] / (N * sum rate)``); ``a`` and ``b`` decompose
    ``D[r][s] = a[r] + b[s]`` with ``min(a) == 0`` (exactly for the optimum,
    to float rounding for the others).
    """

    method: str
    delays: Matrix
    latencies: Matrix
    average: float
    a: Vector
    b: Vector

    @property
    def size(self) -> int:
        """The number of processes."""
        return len(self.latencies)


def check_latencies(latencies: Sequence[Sequence[float]]) -> Matrix:
    """``W`` as a tuple of float rows, or :class:`ConfigurationError`."""
    try:
        rows = [list(row) for row in latencies]
    except TypeError:
        raise ConfigurationError("latencies must be a square matrix (a sequence of rows)") from None
    n = len(rows)
    if n == 0:
        raise ConfigurationError("latencies must have at least one row")
    out = []
    for r, row in enumerate(rows):
        if len(row) != n:
            raise ConfigurationError(
                f"latencies must be square: row {r} has {len(row)} entries, expected {n}"
            )
        values = []
        for s, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
                raise ConfigurationError(f"latencies[{r}][{s}] must be a number, got {value!r}")
            number = float(value)
            if not math.isfinite(number) or number < 0:
                raise ConfigurationError(
                    f"latencies[{r}][{s}] must be finite and >= 0, got {value!r}"
                )
            if r == s and number != 0:
                raise ConfigurationError(
                    f"latencies[{r}][{r}] must be 0 (a process delivers its own message "
                    f"locally), got {value!r}"
                )
            values.append(number)
        out.append(tuple(values))
    return tuple(out)


def check_rates(rates: Sequence[float] | None, n: int) -> Vector:
    """The senders' rates as floats (equal rates when ``None``), or
    :class:`ConfigurationError`. Zero is allowed; a zero total is not."""
    if rates is None:
        return (1.0,) * n
    try:
        values = list(rates)
    except TypeError:
        raise ConfigurationError("rates must be a sequence of numbers") from None
    if len(values) != n:
        raise ConfigurationError(f"rates must have one entry per process ({n}), got {len(values)}")
    out = []
    for s, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
            raise ConfigurationError(f"rates[{s}] must be a number, got {value!r}")
        number = float(value)
        if not math.isfinite(number) or number < 0:
            raise ConfigurationError(f"rates[{s}] must be finite and >= 0, got {value!r}")
        out.append(number)
    if sum(out) <= 0:
        raise ConfigurationError("rates must not all be zero (nothing is sent, nothing to plan)")
    return tuple(out)


def check_process(value: int, n: int, name: str) -> int:
    """A process index in ``0 .. n-1``, or :class:`ConfigurationError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise ConfigurationError(f"{name} must be a process index in 0..{n - 1}, got {value!r}")
    return value


def average_latency(latencies: Matrix, rates: Vector) -> float:
    """Eq. 3 of the paper: ``fsum`` of the rate-weighted latencies (correctly
    rounded, so the same inputs give the same bits) over ``N * sum(rate)``."""
    n = len(latencies)
    total = math.fsum(rates[s] * value for row in latencies for s, value in enumerate(row))
    return total / (n * math.fsum(rates))


def decompose(latencies: Matrix) -> tuple[Vector, Vector]:
    """``a, b`` with ``D[r][s] = a[r] + b[s]`` and ``min(a) == 0``, read off an
    additive ``D``: ``b[s] = min_r D[r][s]``, ``a[r] = D[r][0] - b[0]``."""
    n = len(latencies)
    b = tuple(min(latencies[r][s] for r in range(n)) for s in range(n))
    a = tuple(max(0.0, latencies[r][0] - b[0]) for r in range(n))
    return a, b


def make_plan(method: str, weights: Matrix, latencies: Matrix, rates: Vector) -> Plan:
    """A :class:`Plan` from ``W`` and an additive ``D >= W``; delays are
    ``D - W`` clamped at 0 against float rounding."""
    delays = tuple(
        tuple(max(0.0, d - w) for d, w in zip(drow, wrow, strict=True))
        for drow, wrow in zip(latencies, weights, strict=True)
    )
    a, b = decompose(latencies)
    return Plan(
        method=method,
        delays=delays,
        latencies=latencies,
        average=average_latency(latencies, rates),
        a=a,
        b=b,
    )
