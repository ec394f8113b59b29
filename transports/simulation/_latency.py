"""Latency models of the virtual-time network.

A model answers one question: how long does a message from ``src`` to ``dst``
take, in the simulator's time unit. The unit is whatever the simulation uses
for ``now`` and :attr:`epto.Config.round_interval`; the EpTO paper's
evaluation uses milliseconds as simulator ticks with a round of 125 ticks, and
:class:`PlanetLabLatency` speaks milliseconds.

Every model draws from the ``random.Random`` it is handed (the network's), so a
run is reproducible from its seed. ``maximum`` bounds every sample; the
simulator uses it to tell whether latency stays below the round length
(the EpTO paper's Lemma 6).
"""

from __future__ import annotations

import array
import gzip
import math
import random
import sys
from functools import lru_cache
from importlib import resources
from typing import Protocol, runtime_checkable

from epto import ConfigurationError

_PLANETLAB_FILE = "planetlab-226.u16.gz"
_PLANETLAB_NODES = 226
_MISSING = 0xFFFF


@runtime_checkable
class LatencyModel(Protocol):
    """One-way message latency between two processes."""

    @property
    def maximum(self) -> float:
        """An upper bound of every sample."""
        ...

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        """The latency of one message from ``src`` to ``dst`` (non-negative)."""
        ...


def _non_negative(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ConfigurationError(f"{name} must be a non-negative finite number, got {value!r}")
    return float(value)


class ConstantLatency:
    """Every message takes exactly ``value``."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = _non_negative("latency", value)

    @property
    def maximum(self) -> float:
        return self.value

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"ConstantLatency({self.value!r})"


class UniformLatency:
    """Each message independently takes a time uniform in ``[low, high]``."""

    __slots__ = ("high", "low")

    def __init__(self, low: float, high: float) -> None:
        self.low = _non_negative("low", low)
        self.high = _non_negative("high", high)
        if self.high < self.low:
            raise ConfigurationError(f"high ({high!r}) must not be below low ({low!r})")

    @property
    def maximum(self) -> float:
        return self.high

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        return self.low + (self.high - self.low) * rng.random()

    def __repr__(self) -> str:
        return f"UniformLatency({self.low!r}, {self.high!r})"


class LinkLatency:
    """Each link has its own base latency, plus independent jitter per message.

    ``matrix[dst][src]`` is the base one-way latency from ``src`` to ``dst``
    (the receiver's row, as in docs/optimistic.md's ``W[r][s]``), for
    processes ``0 .. len(matrix) - 1``. A message takes the base plus a time
    uniform in ``[-jitter, +jitter]``, never below zero.
    """

    __slots__ = ("_rows", "jitter")

    def __init__(
        self, matrix: list[list[float]] | tuple[tuple[float, ...], ...], jitter: float = 0.0
    ) -> None:
        rows = tuple(tuple(_non_negative("latency", v) for v in row) for row in matrix)
        if not rows or any(len(row) != len(rows) for row in rows):
            raise ConfigurationError("the latency matrix must be square and non-empty")
        self._rows = rows
        self.jitter = _non_negative("jitter", jitter)

    @property
    def maximum(self) -> float:
        return max(max(row) for row in self._rows) + self.jitter

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        base = self._rows[dst][src]
        if not self.jitter:
            return base
        return max(0.0, base + self.jitter * (2.0 * rng.random() - 1.0))

    def __repr__(self) -> str:
        return f"LinkLatency({[list(r) for r in self._rows]!r}, jitter={self.jitter!r})"


@lru_cache(maxsize=1)
def _planetlab_table() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(matrix, sorted samples)`` in milliseconds; matrix is row-major 226 x 226,
    ``nan`` where the sample has no measurement."""
    raw = gzip.decompress(resources.files("epto").joinpath("data", _PLANETLAB_FILE).read_bytes())
    values = array.array("H")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    if len(values) != _PLANETLAB_NODES * _PLANETLAB_NODES:
        raise ConfigurationError(f"{_PLANETLAB_FILE} is damaged: {len(values)} entries")
    matrix = tuple(math.nan if v == _MISSING else v / 10.0 for v in values)
    measured = sorted(
        v
        for i, v in enumerate(matrix)
        if not math.isnan(v) and i // _PLANETLAB_NODES != i % _PLANETLAB_NODES
    )
    return matrix, tuple(measured)


def _mix(a: int, b: int, salt: int) -> float:
    """A uniform number in [0, 1) fixed by ``(a, b, salt)`` (splitmix64 finaliser)."""
    z = (a * 0x9E3779B97F4A7C15 + b * 0xBF58476D1CE4E5B9 + salt) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return z / 2.0**64


class PlanetLabLatency:
    """The PlanetLab sample of the EpTO paper's evaluation (226 nodes, one-way
    latencies in milliseconds: mean about 157, 5th/50th/95th percentiles about
    15/125/366, maximum about 704).

    ``per_link=True`` (the default) maps process ``p`` onto node ``p mod 226``
    and gives every message of a link the measured latency of that pair of
    nodes, as the paper authors' simulator does: some processes are far from
    every other, which is what produces the delivery tail. Pairs the sample
    lacks (about 4 %) and processes mapped to the same node (from 227
    processes on) get a fixed draw from the empirical distribution, so that
    the latencies over all pairs of processes keep the sample's distribution.

    ``per_link=False`` draws every message independently from the empirical
    distribution of the 48,859 measurements.

    ``scale`` multiplies every latency (for a simulation whose unit is not the
    millisecond).
    """

    __slots__ = ("_matrix", "_per_link", "_salt", "_samples", "_scale")

    def __init__(self, *, per_link: bool = True, scale: float = 1.0, salt: int = 0) -> None:
        if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
            raise ConfigurationError(f"scale must be a positive finite number, got {scale!r}")
        matrix, samples = _planetlab_table()
        self._per_link = per_link
        self._scale = float(scale)
        self._samples = tuple(s * self._scale for s in samples)
        self._salt = salt
        if per_link:
            n = _PLANETLAB_NODES
            filled = list(matrix)
            for i in range(n):
                for j in range(n):
                    if i == j or math.isnan(filled[i * n + j]):
                        u = _mix(min(i, j), max(i, j), salt)
                        filled[i * n + j] = samples[int(u * len(samples))]
            self._matrix = tuple(v * self._scale for v in filled)
        else:
            self._matrix = ()

    @property
    def maximum(self) -> float:
        return self._samples[-1]

    def link_table(self) -> tuple[tuple[float, ...], int] | None:
        """Per link: ``(matrix, nodes)``, the latency from ``src`` to ``dst``
        being ``matrix[(src % nodes) * nodes + dst % nodes]``, what
        :meth:`sample` returns (the network's send loop reads it without a
        call per copy); ``None`` when every message draws its own."""
        if not self._per_link:
            return None
        return self._matrix, _PLANETLAB_NODES

    def quantile(self, q: float) -> float:
        """The empirical ``q``-quantile of the sample (``0 <= q <= 1``)."""
        samples = self._samples
        return samples[min(len(samples) - 1, int(q * len(samples)))]

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        if self._per_link:
            return self._matrix[
                (src % _PLANETLAB_NODES) * _PLANETLAB_NODES + dst % _PLANETLAB_NODES
            ]
        samples = self._samples
        return samples[int(rng.random() * len(samples))]

    def __repr__(self) -> str:
        return f"PlanetLabLatency(per_link={self._per_link!r}, scale={self._scale!r})"
