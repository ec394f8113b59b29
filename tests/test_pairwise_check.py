"""check_pairwise: pairwise total order, integrity and liveness for many
overlapping groups (sequencing atoms, seed 003)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from epto.check import PairwiseViolation, check, check_pairwise

Event = tuple[int, int]

X, Y, Z = 1, 2, 3
A, B, C = (10, 0), (11, 0), (12, 0)


def test_triangle_of_single_overlaps_is_pairwise_ok_but_a_global_cycle() -> None:
    # Ga = {x, y}, Gb = {y, z}, Gc = {z, x}: a < b at y, b < c at z, c < a at x.
    groups = {A: frozenset({X, Y}), B: frozenset({Y, Z}), C: frozenset({Z, X})}
    sequences = {X: [C, A], Y: [A, B], Z: [B, C]}
    report = check_pairwise(sequences, groups=groups, broadcast={A, B, C})
    assert report.ok, report.summary()
    assert report.pairs_checked == 0  # no two processes share two messages
    assert (report.processes, report.deliveries, report.messages) == (3, 6, 3)
    # The global checker, right for EpTO, rejects it: a < b < c < a.
    global_report = check(sequences, expected=lambda p, e: p in groups[e])
    assert [set(v.cycle) for v in global_report.order_violations] == [{A, B, C}]


def test_inversion_is_caught_with_its_pair_named() -> None:
    m1, m2, m3 = (1, 0), (1, 1), (2, 0)
    groups = {m: frozenset({X, Y, Z}) for m in (m1, m2, m3)}
    report = check_pairwise({X: [m1, m2, m3], Y: [m1, m2, m3], Z: [m1, m3, m2]}, groups=groups)
    assert not report.ok
    assert report.pairs_checked == 3
    assert report.violating_pairs == 2 and report.inversions == 2
    assert report.order_violations == (
        PairwiseViolation(X, Z, m2, m3),
        PairwiseViolation(Y, Z, m2, m3),
    )
    p, q, first, second = report.order_violations[0]  # a plain 4-tuple too
    assert (p, q, first, second) == (X, Z, m2, m3)
    assert report.order_violations[0].describe() == (
        "(1, 1) before (2, 0) at process 1, after it at process 3"
    )
    assert "2 violating pairs (2 inversions)" in report.summary()


def test_interleaved_messages_only_common_ones_count() -> None:
    # a, x, b against b, y, a: restricted to {a, b} they disagree.
    a, x, b, y = (1, 0), (2, 0), (3, 0), (4, 0)
    report = check_pairwise({1: [a, x, b], 2: [b, y, a]})
    assert report.order_violations == (PairwiseViolation(1, 2, a, b),)
    # Messages the other process lacks are skipped, not compared.
    assert check_pairwise({1: [a, x, b], 2: [a, y, b]}, expected=lambda p, e: False).ok


def test_witness_is_oriented_from_the_smaller_process() -> None:
    a, b, c = (1, 0), (2, 0), (3, 0)
    # Process 9 is walked (shorter); the witness still names 2 first.
    report = check_pairwise({2: [a, b, c], 9: [b, a]}, expected=lambda p, e: False)
    assert report.order_violations == (PairwiseViolation(2, 9, a, b),)


def test_inversions_count_reversed_message_pairs() -> None:
    seq = [(i, 0) for i in range(10)]
    report = check_pairwise({1: seq, 2: list(reversed(seq)), 3: seq})
    assert report.violating_pairs == 2
    assert report.inversions == 2 * 45
    assert report.pairs_checked == 3


def test_duplicates_never_sent_and_outside_group() -> None:
    a, b, c = (1, 0), (2, 0), (3, 0)
    groups = {a: frozenset({X, Y}), b: frozenset({X, Y}), c: frozenset({X})}
    sequences = {X: [a, b, a, c], Y: [a, b, c], Z: [b]}
    report = check_pairwise(sequences, groups=groups, broadcast={a, b})
    kinds = sorted((v.process, v.kind, v.event) for v in report.integrity_violations)
    assert kinds == [
        (X, "duplicate", a),
        (X, "never-broadcast", c),
        (Y, "never-broadcast", c),
        (Y, "outside-group", c),
        (Z, "outside-group", b),
    ]
    assert report.violating_pairs == 0  # the duplicate is judged at its first delivery
    assert not report.ok
    assert report.deliveries == 8 and report.messages == 3


def test_expected_and_not_delivered_is_stuck() -> None:
    a, b, c = (1, 0), (2, 0), (3, 0)
    groups = {a: frozenset({X, Y}), b: frozenset({X, Y, Z}), c: frozenset({Y, Z})}
    # Y never delivered a; nobody delivered c; process 4, a member of no
    # group, delivered nothing and owes nothing.
    report = check_pairwise({X: [a, b], Y: [b], Z: [b], 4: []}, groups=groups)
    assert report.violating_pairs == 0 and not report.integrity_violations
    assert report.stuck == {Y: (a, c), Z: (c,)}
    assert report.total_stuck == 3 and not report.ok
    assert "stuck: 3 at 2 processes" in report.summary()
    # A member absent from the sequences delivered nothing.
    absent = check_pairwise({X: [a, b]}, groups={a: frozenset({X, Y}), b: frozenset({X})})
    assert absent.stuck == {Y: (a,)}
    # expected() overrides the groups: here, Y was not yet a member when a was sent.
    later = check_pairwise(
        {X: [a, b], Y: [b], Z: [b, c], 4: []},
        groups=groups,
        expected=lambda p, e: p in groups[e] and (p, e) != (Y, a),
    )
    assert later.stuck == {Y: (c,)}


def test_without_groups_everybody_owes_everything_known() -> None:
    a, b = (1, 0), (2, 0)
    report = check_pairwise({X: [a], Y: []}, broadcast={a, b})
    assert report.stuck == {X: (b,), Y: (a, b)}


def test_empty_input() -> None:
    report = check_pairwise({})
    assert report.ok
    assert (report.processes, report.deliveries, report.messages, report.pairs_checked) == (
        0,
        0,
        0,
        0,
    )
    assert report.order_violations == () and report.stuck == {}
    assert check_pairwise({X: [], Y: []}, groups={}, broadcast=()).ok


def test_sample_is_bounded_and_counts_are_not() -> None:
    seq = [(i, 0) for i in range(3)]
    sequences = {p: (seq if p % 2 else list(reversed(seq))) for p in range(30)}
    report = check_pairwise(sequences, limit=7)
    assert report.violating_pairs == 15 * 15
    assert report.inversions == 15 * 15 * 3
    assert len(report.order_violations) == 7
    assert check_pairwise(sequences, limit=0).order_violations == ()
    assert len(check_pairwise(sequences).order_violations) == 100


def _restricted_run(
    seed: int, processes: int, messages: int, groups: int
) -> tuple[dict[int, list[Event]], dict[Event, frozenset[int]]]:
    """Each message goes to one random group; every member delivers the
    messages of its groups in the order of one global permutation."""
    rng = random.Random(seed)
    members = [
        frozenset(rng.sample(range(processes), rng.randint(1, processes))) for _ in range(groups)
    ]
    group_of = {(m % 7, m): members[rng.randrange(groups)] for m in range(messages)}
    order = list(group_of)
    rng.shuffle(order)
    sequences: dict[int, list[Event]] = {p: [] for p in range(processes)}
    for event in order:
        for p in group_of[event]:
            sequences[p].append(event)
    return sequences, group_of


runs = st.builds(
    _restricted_run,
    st.integers(0, 2**32),
    st.integers(1, 8),
    st.integers(0, 30),
    st.integers(1, 6),
)

# For the swap: at least two processes and two messages, so more runs share a pair.
shared_runs = st.builds(
    _restricted_run,
    st.integers(0, 2**32),
    st.integers(2, 8),
    st.integers(2, 30),
    st.integers(1, 4),
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(runs)
def test_restrictions_of_one_global_order_are_ok(
    run: tuple[dict[int, list[Event]], dict[Event, frozenset[int]]],
) -> None:
    sequences, groups = run
    report = check_pairwise(sequences, groups=groups, broadcast=set(groups))
    assert report.ok, report.summary()
    assert report.deliveries == sum(len(g) for g in groups.values())


@settings(derandomize=True, max_examples=200, deadline=None)
@given(shared_runs, st.randoms(use_true_random=False))
def test_swapping_two_adjacent_common_messages_fails(
    run: tuple[dict[int, list[Event]], dict[Event, frozenset[int]]],
    rng: random.Random,
) -> None:
    sequences, groups = run
    # Pairs (p, i): messages i and i + 1 at p are both delivered by another process.
    candidates = [
        (p, i, q)
        for p, seq in sequences.items()
        for i in range(len(seq) - 1)
        for q in sequences
        if q != p and {seq[i], seq[i + 1]} <= set(sequences[q])
    ]
    if not candidates:
        return
    p, i, q = rng.choice(candidates)
    seq = sequences[p]
    first, second = seq[i], seq[i + 1]
    seq[i], seq[i + 1] = second, first
    report = check_pairwise(sequences, groups=groups, broadcast=set(groups))
    assert not report.ok
    assert not report.integrity_violations and not report.stuck
    holders = [r for r in sequences if r != p and {first, second} <= set(sequences[r])]
    assert q in holders
    assert report.violating_pairs == len(holders)
    assert report.inversions == len(holders)
    named = {(v.process, v.other) for v in report.order_violations}
    assert named == {(min(p, r), max(p, r)) for r in holders}
    for v in report.order_violations:
        assert {v.first, v.second} == {first, second}


def test_fifty_processes_two_thousand_messages() -> None:
    # Shape, not speed: the run is large enough that a quadratic walk per
    # pair of processes would be felt; the verdicts are what is asserted.
    sequences, groups = _restricted_run(7, processes=50, messages=2000, groups=12)
    report = check_pairwise(sequences, groups=groups, broadcast=set(groups))
    assert report.ok, report.summary()
    assert report.messages == 2000
    share = sum(
        1
        for p in range(50)
        for q in range(p + 1, 50)
        if len(set(sequences[p]) & set(sequences[q])) >= 2
    )
    assert report.pairs_checked == share > 0
    # One process delivering its messages backwards disagrees with every
    # process sharing two of them.
    reverse = {**sequences, 0: list(reversed(sequences[0]))}
    broken = check_pairwise(reverse, groups=groups, broadcast=set(groups))
    others = [q for q in range(1, 50) if len(set(sequences[0]) & set(sequences[q])) >= 2]
    assert broken.violating_pairs == len(others)
    assert {(v.process, v.other) for v in broken.order_violations} == {(0, q) for q in others}
