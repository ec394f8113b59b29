"""The optimistic-delivery planner (seed 001): the worked example of Figures 3,
5 and 6 exactly (notes-seed-001 §1.5), feasibility and ordering of the three
planners on random matrices, the optimum against brute force, and SETO's
adaptive rule converging to its steady state in a small event simulation."""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from epto import ConfigurationError
from epto.optimistic import Plan, SetoDelays, fast_seto, optimal, seto_steady_state

W3 = [[0, 5, 7], [5, 0, 9], [7, 9, 0]]


# -- the worked example ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequencer", "latencies", "total"),
    [
        (2, ((5, 7, 7), (7, 9, 9), (7, 9, 9)), 69),
        (1, ((3, 7, 7), (5, 9, 9), (7, 11, 11)), 69),
        (0, ((7, 5, 7), (9, 7, 9), (11, 9, 11)), 75),
    ],
)
def test_example_seto(sequencer: int, latencies: tuple[tuple[float, ...], ...], total: int) -> None:
    plan = seto_steady_state(W3, sequencer)
    assert plan.method == "seto"
    assert plan.latencies == latencies
    assert plan.average == total / 9
    if sequencer == 2:
        assert plan.delays == ((5.0, 2.0, 0.0), (2.0, 9.0, 0.0), (0.0, 0.0, 9.0))


def test_example_fast_seto() -> None:
    plan = fast_seto(W3)
    assert plan.method == "fast-seto"
    assert plan.latencies == ((2.5, 5.0, 7.0), (5.0, 7.5, 9.5), (7.0, 9.5, 11.5))
    assert plan.delays == ((2.5, 0.0, 0.0), (0.0, 7.5, 0.5), (0.0, 0.5, 11.5))
    assert plan.average == 64.5 / 9
    assert plan.a == (0.0, 2.5, 4.5)
    assert plan.b == (2.5, 5.0, 7.0)


def test_example_optimal() -> None:
    plan = optimal(W3)
    assert plan.method == "optimal"
    assert plan.latencies == ((3.0, 5.0, 7.0), (5.0, 7.0, 9.0), (7.0, 9.0, 11.0))
    assert plan.delays == ((3.0, 0.0, 0.0), (0.0, 7.0, 0.0), (0.0, 0.0, 11.0))
    assert plan.average == 7.0
    assert plan.a == (0.0, 2.0, 4.0)
    assert plan.b == (3.0, 5.0, 7.0)
    assert plan.size == 3


def test_example_rates_scale_free() -> None:
    # Equal rates of any size are equal rates.
    assert optimal(W3, [300, 300, 300]) == optimal(W3)
    assert fast_seto(W3, [2.0, 2.0, 2.0]) == fast_seto(W3)


# -- small cases and rules of the notes §1.7 ---------------------------------------------


def test_one_process() -> None:
    for plan in (seto_steady_state([[0]], 0), fast_seto([[0]]), optimal([[0]])):
        assert plan.latencies == ((0.0,),)
        assert plan.delays == ((0.0,),)
        assert plan.average == 0.0


def test_two_processes() -> None:
    w = [[0, 4], [4, 0]]
    # Factor 1 for N = 2: the first delays its own messages by W.
    assert fast_seto(w).latencies == ((4, 4), (4, 4))
    # Degenerate optimum (any self-delay in [0, 8] costs 16): row 0 is smallest.
    assert optimal(w).latencies == ((0, 4), (4, 8))
    assert optimal(w).average == fast_seto(w).average == 4.0


def test_zero_rate_sender_is_inserted_last_and_weighs_nothing() -> None:
    rates = [0, 1, 1]
    plan = fast_seto(W3, rates)
    # p1 (rate 0) joins last; without it, p2 and p3 are an N = 2 problem.
    assert plan.average == pytest.approx(
        sum(plan.latencies[r][s] for r in range(3) for s in (1, 2)) / 6
    )
    best = optimal(W3, rates)
    # A zero-rate column gets the smallest delays: one receiver adds nothing.
    assert min(row[0] for row in best.delays) == 0


@pytest.mark.parametrize(
    ("latencies", "message"),
    [
        ([], "at least one row"),
        ([[0, 1]], "square"),
        ([[0, 1], [1]], "square"),
        ([[0, -1], [1, 0]], ">= 0"),
        ([[0, math.inf], [1, 0]], "finite"),
        ([[0, math.nan], [1, 0]], "finite"),
        ([[1, 1], [1, 0]], "must be 0"),
        ([[0, "1"], [1, 0]], "number"),
        ([[0, True], [1, 0]], "number"),
        (5, "square matrix"),
    ],
)
def test_bad_latencies(latencies: Any, message: str) -> None:
    for planner in (optimal, fast_seto, lambda w: seto_steady_state(w, 0)):
        with pytest.raises(ConfigurationError, match=message):
            planner(latencies)


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ([1, 1], "one entry per process"),
        ([0, 0, 0], "all be zero"),
        ([1, -1, 1], ">= 0"),
        ([1, math.nan, 1], "finite"),
        ([1, None, 1], "number"),
    ],
)
def test_bad_rates(rates: Any, message: str) -> None:
    for planner in (optimal, fast_seto, lambda w, r: seto_steady_state(w, 0, r)):
        with pytest.raises(ConfigurationError, match=message):
            planner(W3, rates)


def test_bad_sequencer_and_alpha() -> None:
    for sequencer in (-1, 3, True, 1.0):
        with pytest.raises(ConfigurationError, match="sequencer"):
            seto_steady_state(W3, sequencer)  # type: ignore[arg-type]
    for alpha in (0, 1, -0.5, 1.5, math.nan):
        with pytest.raises(ConfigurationError, match="alpha"):
            SetoDelays(3, 0, 2, alpha=alpha)
    with pytest.raises(ConfigurationError, match="only the sequencer"):
        SetoDelays(3, 0, 2).sequenced(1, 2.0)


# -- properties on random matrices ---------------------------------------------------


@st.composite
def problems(draw: st.DrawFn, max_size: int = 6) -> tuple[list[list[float]], list[float] | None]:
    n = draw(st.integers(1, max_size))
    value = st.one_of(
        st.integers(0, 100).map(float),
        st.floats(0, 1000, allow_nan=False, allow_infinity=False),
    )
    w = [[0.0 if r == s else draw(value) for s in range(n)] for r in range(n)]
    if draw(st.booleans()):
        w = [[w[min(r, s)][max(r, s)] for s in range(n)] for r in range(n)]
    kind = draw(st.sampled_from(["equal", "varied", "zeros"]))
    if kind == "equal":
        return w, None
    rate = st.floats(0.01, 100) if kind == "varied" else st.sampled_from([0.0, 1.0, 7.5, 60.0])
    rates = [draw(rate) for _ in range(n)]
    assume(sum(rates) > 0)
    return w, rates


def tolerance(w: Sequence[Sequence[float]]) -> float:
    return 1e-9 * (1 + max(max(row) for row in w))


def assert_feasible(plan: Plan, w: Sequence[Sequence[float]]) -> None:
    n = len(w)
    eps = tolerance(w)
    d = plan.latencies
    for r, s in itertools.product(range(n), repeat=2):
        assert d[r][s] >= w[r][s] - eps, (r, s)
        assert plan.delays[r][s] >= 0
        assert abs(plan.delays[r][s] - (d[r][s] - w[r][s])) <= eps
        assert abs(d[r][s] - (plan.a[r] + plan.b[s])) <= eps
    for i, j in itertools.combinations(range(n), 2):
        for k, m in itertools.combinations(range(n), 2):
            assert abs((d[i][k] - d[i][m]) - (d[j][k] - d[j][m])) <= 4 * eps
    assert min(plan.a) == 0


def weighted(d: Sequence[Sequence[float]], rates: Sequence[float] | None) -> float:
    n = len(d)
    rate = [1.0] * n if rates is None else list(rates)
    return math.fsum(rate[s] * d[r][s] for r in range(n) for s in range(n)) / (n * sum(rate))


@settings(max_examples=300, deadline=None)
@given(problems())
def test_every_plan_is_feasible_and_the_optimum_is_lowest(
    problem: tuple[list[list[float]], list[float] | None],
) -> None:
    w, rates = problem
    best = optimal(w, rates)
    heuristic = fast_seto(w, rates)
    setos = [seto_steady_state(w, s, rates) for s in range(len(w))]
    eps = tolerance(w)
    for plan in (best, heuristic, *setos):
        assert_feasible(plan, w)
        assert plan.average == pytest.approx(weighted(plan.latencies, rates), abs=eps)
        assert best.average <= plan.average + eps
    # The optimum leaves no slack: every row and column of X has a zero.
    for r in range(len(w)):
        assert min(best.delays[r]) <= eps
        assert min(row[r] for row in best.delays) <= eps


@settings(max_examples=200, deadline=None)
@given(problems())
def test_planners_are_deterministic(problem: tuple[list[list[float]], list[float] | None]) -> None:
    w, rates = problem
    as_tuples = tuple(tuple(row) for row in w)
    assert optimal(w, rates) == optimal(as_tuples, rates)
    assert fast_seto(w, rates) == fast_seto(as_tuples, rates)
    assert seto_steady_state(w, 0, rates) == seto_steady_state(as_tuples, 0, rates)


@settings(max_examples=200, deadline=None)
@given(problems())
def test_equal_rates_optimum_is_the_max_weight_assignment(
    problem: tuple[list[list[float]], list[float] | None],
) -> None:
    w, _ = problem
    n = len(w)
    best = max(math.fsum(w[r][p[r]] for r in range(n)) for p in itertools.permutations(range(n)))
    assert optimal(w).average == pytest.approx(best / n, abs=tolerance(w))


def transport_optimum(w: Sequence[Sequence[int]], rates: Sequence[int]) -> Fraction:
    """The LP optimum through its dual, by enumerating every integral
    transportation plan (its vertices are integral)."""
    n = len(w)
    total = sum(rates)
    best = -1

    def rows(r: int, left: list[int], value: int) -> None:
        nonlocal best
        if r == n:
            best = max(best, value)
            return
        for row in compositions(total, left):
            rows(
                r + 1,
                [c - x for c, x in zip(left, row, strict=True)],
                value + sum(w[r][s] * row[s] for s in range(n)),
            )

    rows(0, [n * rate for rate in rates], 0)
    return Fraction(best, n * total)


def compositions(amount: int, caps: Sequence[int]) -> list[list[int]]:
    if not caps:
        return [[]] if amount == 0 else []
    out: list[list[int]] = []
    for first in range(min(amount, caps[0]) + 1):
        out.extend([first, *rest] for rest in compositions(amount - first, caps[1:]))
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 3).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(0, 30), min_size=n, max_size=n), min_size=n, max_size=n),
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
        )
    )
)
def test_optimum_matches_the_transportation_dual(
    problem: tuple[list[list[int]], list[int]],
) -> None:
    w, rates = problem
    assume(sum(rates) > 0)
    for r in range(len(w)):
        w[r][r] = 0
    assert optimal(w, rates).average == float(transport_optimum(w, rates))


def test_scipy_agrees_when_available() -> None:
    linprog = pytest.importorskip("scipy.optimize").linprog
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(2, 8)
        w = [[0.0 if r == s else rng.uniform(0, 50) for s in range(n)] for r in range(n)]
        rates = [rng.choice([0.0, rng.uniform(0, 100)]) for _ in range(n)]
        rates[0] = 1.0
        total = sum(rates)
        cost = [total] * n + [n * rate for rate in rates]
        rows, bounds = [], []
        for r, s in itertools.product(range(n), repeat=2):
            row = [0.0] * (2 * n)
            row[r] = row[n + s] = -1.0
            rows.append(row)
            bounds.append(-w[r][s])
        result = linprog(cost, A_ub=rows, b_ub=bounds, bounds=[(None, None)] * (2 * n))
        assert optimal(w, rates).average == pytest.approx(result.fun / (n * total), rel=1e-7)


# -- SETO's adaptive rule -------------------------------------------------------------


def simulate_seto(
    w: Sequence[Sequence[float]],
    sequencer: int,
    *,
    alpha: float,
    rng: random.Random,
    gap: float = 20.0,
    horizon: float = 20_000.0,
) -> list[tuple[float, ...]]:
    """Rules 1-6 of the notes §1.2 in virtual time: Poisson sends (mean
    ``gap`` per process), constant latencies, reliable links. Returns every
    process's delays at quiescence."""
    n = len(w)
    states = [SetoDelays(n, r, sequencer, alpha=alpha) for r in range(n)]
    queue: list[tuple[float, int, str, int, int, int]] = []
    tick = itertools.count()

    def push(at: float, kind: str, r: int = 0, m: int = 0, number: int = 0) -> None:
        heapq.heappush(queue, (at, next(tick), kind, r, m, number))

    sender: dict[int, int] = {}
    suggestion: dict[int, float] = {}
    scheduled: list[dict[int, float]] = [{} for _ in range(n)]
    sequenced: list[dict[int, tuple[int, float]]] = [{} for _ in range(n)]
    last = [0] * n
    previous: list[tuple[int, float, float] | None] = [None] * n
    ids = itertools.count()
    numbers = itertools.count(1)

    def deliver_final(r: int) -> None:
        while last[r] + 1 in sequenced[r] and sequenced[r][last[r] + 1][0] in scheduled[r]:
            m, t = sequenced[r][last[r] + 1]
            o = scheduled[r][m]
            before = previous[r]
            if before is not None:
                states[r].final(
                    previous_sender=before[0],
                    previous_scheduled=before[1],
                    previous_seq_arrival=before[2],
                    sender=sender[m],
                    scheduled=o,
                    seq_arrival=t,
                )
            previous[r] = (sender[m], o, t)
            last[r] += 1

    for p in range(n):
        push(rng.expovariate(1 / gap), "send", p)
    while queue:
        now, _, kind, r, m, number = heapq.heappop(queue)
        if kind == "send":  # r is the sender
            if now > horizon:
                continue
            m = next(ids)
            sender[m] = r
            suggestion[m] = states[r].suggestion()
            for dest in range(n):
                push(now + w[dest][r], "data", dest, m)
            push(now + rng.expovariate(1 / gap), "send", r)
        elif kind == "data":
            scheduled[r][m] = states[r].scheduled(sender[m], now)
            if r == sequencer:
                push(scheduled[r][m], "optimistic", r, m)
            deliver_final(r)
        elif kind == "optimistic":
            number = next(numbers)
            states[sequencer].sequenced(sender[m], suggestion[m])
            for dest in range(n):
                push(now + w[dest][sequencer], "seq", dest, m, number)
        else:
            sequenced[r][number] = (m, now)
            deliver_final(r)
    return [state.delays for state in states]


@pytest.mark.parametrize("alpha", [0.5, 0.95])
@pytest.mark.parametrize("sequencer", [0, 1, 2])
def test_seto_rule_converges_to_the_steady_state_on_the_example(
    alpha: float, sequencer: int
) -> None:
    got = simulate_seto(W3, sequencer, alpha=alpha, rng=random.Random(sequencer))
    want = seto_steady_state(W3, sequencer).delays
    for row, expected in zip(got, want, strict=True):
        assert row == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_seto_rule_converges_on_random_matrices(seed: int) -> None:
    # Asymmetric and non-metric matrices too: the sequencer's self-delay is
    # then half the largest "round trip" K (see seto_steady_state), not max_k W[k][s].
    rng = random.Random(seed)
    n = 4 + seed % 2
    w = [[0.0 if r == s else float(rng.randint(1, 40)) for s in range(n)] for r in range(n)]
    if seed % 3 == 0:
        w = [[w[min(r, s)][max(r, s)] for s in range(n)] for r in range(n)]
    sequencer = seed % n
    got = simulate_seto(w, sequencer, alpha=0.95, rng=rng, horizon=40_000.0)
    want = seto_steady_state(w, sequencer).delays
    for row, expected in zip(got, want, strict=True):
        assert row == pytest.approx(expected, abs=1e-6)


def test_seto_rule_steps() -> None:
    state = SetoDelays(3, 0, 2, alpha=0.5)
    assert state.delays == (0.0, 0.0, 0.0)
    assert state.suggestion() == 0
    assert state.scheduled(1, 10.0) == 10.0
    # p1's message arrived 4 ms too early relative to p2's: p1 is delayed.
    state.final(
        previous_sender=2,
        previous_scheduled=0.0,
        previous_seq_arrival=0.0,
        sender=1,
        scheduled=1.0,
        seq_arrival=5.0,
    )
    # delta = 5 - 1 = 4 > 0: adjust(2, 1, 4): v = 0 - 4 * 0.5 = -2 -> delay[1] += 2.
    assert state.delays == (0.0, 2.0, 0.0)
    assert state.suggestion() == 2
    state.adjust(1, 2, 1.0)  # v = 2 * 0.5 + 1 * 0.5 = 1.5
    assert state.delays == (0.0, 1.5, 0.0)
    # Same sender twice: nothing to learn.
    state.final(
        previous_sender=1,
        previous_scheduled=0.0,
        previous_seq_arrival=0.0,
        sender=1,
        scheduled=0.0,
        seq_arrival=9.0,
    )
    assert state.delays == (0.0, 1.5, 0.0)
    sequencer = SetoDelays(3, 2, 2)
    sequencer.sequenced(0, 4.0)
    sequencer.sequenced(1, 3.0)
    assert sequencer.delays == (0.0, 0.0, 4.0)
