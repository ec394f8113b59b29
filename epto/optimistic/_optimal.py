"""The optimal delays: the linear program of seed 001 (eqs. 7-9), solved
exactly in pure Python.

The small form (notes-seed-001 §1.4): free ``a[r], b[s]``, minimise
``sum_{r,s} rate[s] * (a[r] + b[s])`` subject to ``a[r] + b[s] >= W[r][s]``.
Its dual is a transportation problem: maximise ``sum W[r][s] * y[r][s]`` with
row sums ``R = sum(rate)`` and column sums ``N * rate[s]``, ``y >= 0``.

Method. Every input is a float, hence a binary fraction: ``W`` and the rates
are scaled to integers by their common denominators, and the transportation
problem is solved as a min-cost flow (costs ``-W``) by successive shortest
paths with Johnson potentials (Dijkstra on reduced costs), all in exact integer
arithmetic. The final node potentials are optimal ``a, b`` (complementary
slackness with the flow ``y``).

Determinism rule. The optimum can be degenerate (several optimal ``D``). The
optimal set is exactly the feasible ``(a, b)`` with ``a[r] + b[s] == W[r][s]``
wherever ``y[r][s] > 0``: a system of difference constraints, whose solutions
form a lattice. The planner returns its greatest element with ``a[0]`` pinned
(one more Dijkstra): **the optimal plan whose row 0 (process 0's latencies) is
elementwise smallest**, which is unique; a zero-rate sender gets the smallest
feasible ``b[s]``. The exact rationals are rounded once, to the nearest float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from ._plan import Plan, check_latencies, check_rates

_INF = math.inf


def _scale(values: Sequence[float]) -> tuple[list[int], int]:
    """Integers ``k`` and a denominator ``L`` with ``values[i] == k[i] / L``."""
    fractions = [Fraction(value) for value in values]
    denominator = math.lcm(*(f.denominator for f in fractions)) if fractions else 1
    return [int(f * denominator) for f in fractions], denominator


def _transport(weights: list[list[int]], rates: list[int]) -> tuple[list[int], list[int], set[int]]:
    """Successive shortest paths on the transportation problem; returns the
    potentials of the rows and columns and the support (``r * n + s``)."""
    n = len(weights)
    total = sum(rates)
    supply = [total] * n
    demand = [n * rate for rate in rates]
    flow = [[0] * n for _ in range(n)]
    # Potentials: rows 0..n-1, columns n..2n-1; reduced cost of r -> s is
    # -W[r][s] + pi[r] - pi[n+s] >= 0, of s -> r (when flow > 0) its negative.
    pi = [0] * n + [-max(weights[r][s] for r in range(n)) for s in range(n)]
    pi_sink = min(pi[n:])
    remaining = n * total
    while remaining:
        dist: list[float] = [_INF] * (2 * n)
        parent = [-1] * (2 * n)
        done = [False] * (2 * n)
        for r in range(n):
            if supply[r]:
                dist[r] = -pi[r]
        sink = _INF
        sink_parent = -1
        while True:
            u = -1
            best = _INF
            for v in range(2 * n):
                if not done[v] and dist[v] < best:
                    best, u = dist[v], v
            if u < 0 or best >= sink:
                break
            done[u] = True
            if u < n:
                for s in range(n):
                    cand = best - weights[u][s] + pi[u] - pi[n + s]
                    if cand < dist[n + s]:
                        dist[n + s], parent[n + s] = cand, u
            else:
                s = u - n
                if demand[s]:
                    cand = best + pi[u] - pi_sink
                    if cand < sink:
                        sink, sink_parent = cand, u
                for r in range(n):
                    if flow[r][s]:
                        cand = best + weights[r][s] + pi[u] - pi[r]
                        if cand < dist[r]:
                            dist[r], parent[r] = cand, u
        if sink == _INF:  # pragma: no cover - a balanced transportation problem is feasible
            raise AssertionError("transportation problem without an augmenting path")
        cut = int(sink)
        for v in range(2 * n):
            pi[v] += int(dist[v]) if dist[v] < cut else cut
        pi_sink += cut
        # Walk back from the sink: column <- row (forward arc), row <- column
        # (backward arc, cancels flow), ... down to a row fed by the source.
        forward: list[tuple[int, int]] = []
        backward: list[tuple[int, int]] = []
        last = sink_parent - n
        s = last
        while True:
            r = parent[n + s]
            forward.append((r, s))
            if parent[r] < 0:
                break
            s = parent[r] - n
            backward.append((r, s))
        source = forward[-1][0]
        amount = min([supply[source], demand[last]] + [flow[r][s] for r, s in backward])
        for r, s in forward:
            flow[r][s] += amount
        for r, s in backward:
            flow[r][s] -= amount
        supply[source] -= amount
        demand[last] -= amount
        remaining -= amount
    support = {r * n + s for r in range(n) for s in range(n) if flow[r][s]}
    return pi[:n], pi[n:], support


def _greatest(
    weights: list[list[int]], rows: list[int], cols: list[int], support: set[int]
) -> tuple[list[int], list[int]]:
    """The greatest solution ``(p, q)`` (``a = p``, ``b = -q``) with ``p[0]``
    fixed of ``q[s] - p[r] <= -W[r][s]`` (all r, s) and ``p[r] - q[s] <= W[r][s]``
    (support): shortest distances from ``p[0]``, by Dijkstra on the weights
    reduced by the feasible solution ``(rows, cols)``."""
    n = len(weights)
    x = rows + cols
    dist: list[float] = [_INF] * (2 * n)
    done = [False] * (2 * n)
    dist[0] = 0
    while True:
        u = -1
        best = _INF
        for v in range(2 * n):
            if not done[v] and dist[v] < best:
                best, u = dist[v], v
        if u < 0:
            break
        done[u] = True
        if u < n:
            for s in range(n):
                cand = best - weights[u][s] + x[u] - x[n + s]
                if cand < dist[n + s]:
                    dist[n + s] = cand
        else:
            s = u - n
            for r in range(n):
                if r * n + s in support:
                    cand = best + weights[r][s] + x[u] - x[r]
                    if cand < dist[r]:
                        dist[r] = cand
    values = [int(dist[v]) - x[0] + x[v] for v in range(2 * n)]
    return values[:n], values[n:]


def optimal(latencies: Sequence[Sequence[float]], rates: Sequence[float] | None = None) -> Plan:
    """The delays that minimise the rate-weighted average latency (the LP
    optimum), exact, with the determinism rule of this module's docstring.

    ``rates`` are equal when ``None``; a zero-rate sender weighs nothing and
    gets the smallest delays that keep the gaps common.
    """
    weights = check_latencies(latencies)
    n = len(weights)
    rate = check_rates(rates, n)
    flat, scale = _scale([value for row in weights for value in row])
    w = [flat[r * n : (r + 1) * n] for r in range(n)]
    irates, rate_scale = _scale(list(rate))
    del rate_scale  # the optimum does not depend on the rates' unit
    rows, cols, support = _transport(w, irates)
    p, q = _greatest(w, rows, cols, support)
    low = min(p)
    a = [value - low for value in p]
    b = [low - value for value in q]
    exact = [[Fraction(a[r] + b[s], scale) for s in range(n)] for r in range(n)]
    latencies_out = tuple(tuple(float(value) for value in row) for row in exact)
    delays = tuple(
        tuple(float(exact[r][s] - Fraction(weights[r][s])) for s in range(n)) for r in range(n)
    )
    total = sum(irates)
    average = Fraction(
        sum(irates[s] * (a[r] + b[s]) for r in range(n) for s in range(n)), n * total * scale
    )
    return Plan(
        method="optimal",
        delays=delays,
        latencies=latencies_out,
        average=float(average),
        a=tuple(float(Fraction(value, scale)) for value in a),
        b=tuple(float(Fraction(value, scale)) for value in b),
    )
