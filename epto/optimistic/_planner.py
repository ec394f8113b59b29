"""SETO's steady state and the Fast SETO heuristic (seed 001; notes-seed-001
§1.2, §1.3 and §1.7). The LP optimum is in ``_optimal.py``.

Both planners are closed-form, pure and deterministic: same ``W`` and rates,
same plan, bit for bit. Floats throughout; with latencies that are exact
binary fractions (integers, halves) the results are exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._plan import Matrix, Plan, check_latencies, check_process, check_rates, make_plan


def seto_steady_state(
    latencies: Sequence[Sequence[float]],
    sequencer: int,
    rates: Sequence[float] | None = None,
) -> Plan:
    """The delays SETO's adaptive rule converges to with constant latencies.

    The sequencer ``s`` delivers others' messages on arrival,
    ``D[s][j] = W[s][j]`` for ``j != s``, and its own after ``D[s][s] = K / 2``
    with ``K = max(0, max_{p != s, j != s} (W[s][j] + W[p][s] - W[p][j]))``:
    the fixed point of "the sequencer delays its own messages by the largest
    suggestion", since each suggestion is ``K_p - D[s][s]``. ``j = p`` gives the
    round trip, so ``K / 2 >= max_p (W[s][p] + W[p][s]) / 2``; when ``W`` is
    symmetric and obeys the triangle inequality (shortest-path latencies)
    ``K / 2 = max_k W[k][s]``, the notes' closed form. Every other receiver
    copies the sequencer's gaps with the smallest non-negative delays:
    ``D[i][j] = D[s][j] + c_i``, ``c_i = max_j (W[i][j] - D[s][j])``.
    ``rates`` (equal when ``None``) only weigh the average.
    """
    weights = check_latencies(latencies)
    n = len(weights)
    seq = check_process(sequencer, n, "sequencer")
    rate = check_rates(rates, n)
    base = [weights[seq][j] for j in range(n)]
    spread = [
        weights[seq][j] + weights[p][seq] - weights[p][j]
        for p in range(n)
        for j in range(n)
        if p != seq and j != seq
    ]
    base[seq] = max([0.0, *spread]) / 2
    rows = []
    for i in range(n):
        shift = 0.0 if i == seq else max(weights[i][j] - base[j] for j in range(n))
        rows.append(tuple(base[j] + shift for j in range(n)))
    return make_plan("seto", weights, tuple(rows), rate)


def insertion_order(weights: Matrix, rates: Sequence[float]) -> list[int]:
    """Fast SETO's ``selectNextMin`` order: processes by closeness
    ``cost[i] = sum_j W[i][j] / rate[i]`` (in-latencies, the row), ties by
    index; a zero-rate process costs infinity and comes last."""
    return sorted(range(len(weights)), key=lambda i: (_cost(weights, rates, i), i))


def _cost(weights: Matrix, rates: Sequence[float], i: int) -> float:
    return math.fsum(weights[i]) / rates[i] if rates[i] > 0 else math.inf


def first_delay_factor(weights: Matrix, rates: Sequence[float], order: Sequence[int]) -> float:
    """``firstDelay``'s factor ``(cost[second] - cost[first]) / (cost[last] -
    cost[first])`` over the processes with a positive rate (zero-rate senders
    weigh nothing): 0 with one of them, 1 with two, 0.5 when the costs are equal."""
    finite = [i for i in order if rates[i] > 0]
    if len(finite) <= 1:
        return 0.0
    if len(finite) == 2:
        return 1.0
    first, second, last = (_cost(weights, rates, i) for i in (finite[0], finite[1], finite[-1]))
    if last == first:
        return 0.5
    return (second - first) / (last - first)


def fast_seto(latencies: Sequence[Sequence[float]], rates: Sequence[float] | None = None) -> Plan:
    """The Fast SETO heuristic (the paper's Figure 4, rebuilt in the notes §1.3).

    Processes join in :func:`insertion_order`; the first delays its own
    messages by ``W[first][second] * factor`` (:func:`first_delay_factor`).
    Each newcomer's column is the reference column shifted by the least amount
    that keeps every existing receiver's delay non-negative, and its row copies
    the common gaps shifted by the least amount that keeps its own delays
    non-negative. O(N^2). ``rates`` are equal when ``None``.
    """
    weights = check_latencies(latencies)
    n = len(weights)
    rate = check_rates(rates, n)
    order = insertion_order(weights, rate)
    first = order[0]
    d: dict[tuple[int, int], float] = {}
    if n == 1:
        d[first, first] = 0.0
    else:
        d[first, first] = weights[first][order[1]] * first_delay_factor(weights, rate, order)
    joined = [first]
    ref = first
    for new in order[1:]:
        zmax = max(weights[i][new] - d[i, ref] for i in joined)
        for i in joined:
            d[i, new] = d[i, ref] + zmax
        joined.append(new)
        gap = {s: d[ref, s] - d[ref, ref] for s in joined}
        offset = max(weights[new][s] - gap[s] for s in joined)
        for s in joined:
            d[new, s] = gap[s] + offset
        if zmax < 0:
            ref = new
    rows = tuple(tuple(d[r, s] for s in range(n)) for r in range(n))
    return make_plan("fast-seto", weights, rows, rate)
