from __future__ import annotations

from epto.check import check


def test_interleaved_violation_is_reported_with_its_events() -> None:
    a, x, b, y = (1, 0), (2, 0), (3, 0), (4, 0)
    report = check({10: [a, x, b], 11: [b, y, a]})
    assert not report.ok
    assert len(report.order_violations) == 1
    cycle = set(report.order_violations[0].cycle)
    assert {a, b} <= cycle
    assert set(report.order_violations[0].witnesses) == {10, 11}


def test_three_way_cycle_that_pairwise_checks_miss() -> None:
    a, b, c = (1, 0), (2, 0), (3, 0)
    report = check({1: [a, b], 2: [b, c], 3: [c, a]})
    assert [set(v.cycle) for v in report.order_violations] == [{a, b, c}]


def test_agreeing_sequences_with_holes() -> None:
    a, b, c = (1, 0), (2, 0), (3, 0)
    report = check({1: [a, b, c], 2: [a, c], 3: [b]})
    assert report.ok
    assert report.holes == {1: 0, 2: 1, 3: 2}
    assert report.missing_sample[2] == (b,)


def test_duplicates_and_unknown_events_are_integrity_violations() -> None:
    a, b = (1, 0), (2, 0)
    report = check({1: [a, b, a], 2: [a, b]}, broadcast={a})
    kinds = sorted((v.process, v.kind, v.event) for v in report.integrity_violations)
    assert kinds == [(1, "duplicate", a), (1, "never-broadcast", b), (2, "never-broadcast", b)]
    assert report.order_violations  # a, b, a at process 1 is also a cycle


def test_expected_limits_holes() -> None:
    a, b = (1, 0), (2, 0)
    report = check({1: [a, b], 2: [b]}, expected=lambda p, e: not (p == 2 and e == a))
    assert report.total_holes == 0


def test_long_sequences_do_not_recurse() -> None:
    seq = [(i, 0) for i in range(50_000)]
    assert check({1: seq, 2: seq}).ok
    report = check({1: seq, 2: list(reversed(seq))})
    assert len(report.order_violations) == 1
