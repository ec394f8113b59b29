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


def test_events_nobody_delivered_are_no_holes_but_validity_violations() -> None:
    # Holes count against events delivered
    # *anywhere*, so a run where nobody delivered anything reports no hole.
    a, b, c = (0, 0), (1, 0), (2, 0)
    sequences: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    plain = check(sequences, broadcast={a, b, c})
    assert plain.total_holes == 0 and not plain.validity_checked and plain.valid
    report = check(sequences, broadcast={a, b, c}, staying=[0, 1, 2])
    assert report.ok and report.total_holes == 0  # safety holds, no hole...
    assert report.validity_checked
    assert report.validity_violations == (a, b, c)  # ...but nothing was delivered
    assert not report.valid
    assert report.undelivered == {0: 3, 1: 3, 2: 3} and report.total_undelivered == 9
    assert report.undelivered_sample[1] == (a, b, c)
    assert "validity violations: 3 events" in report.summary()
    assert "undelivered at process 0: (0, 0), (1, 0), (2, 0)" in report.summary()


def test_validity_counts_only_events_of_staying_sources_at_staying_processes() -> None:
    a, b, c, d = (0, 0), (1, 0), (3, 0), (0, 1)
    sequences = {0: [a, b, d], 1: [a, b], 3: [c]}  # 3 crashed after broadcasting c
    report = check(sequences, broadcast={a, b, c, d}, staying=[0, 1, 2])
    # c's source left: not owed. d was delivered by 0 only; 2 (which stayed but
    # is absent from the sequences) delivered nothing.
    assert report.validity_violations == (a, d, b)  # sorted
    assert report.undelivered == {0: 0, 1: 1, 2: 3}
    assert report.undelivered_sample == {1: (d,), 2: (a, d, b)}
    # expected() says who owed what: 2 joined after a and b were broadcast.
    later = check(
        sequences,
        broadcast={a, b, c, d},
        staying=[0, 1, 2],
        expected=lambda p, e: p != 2 or e == d,
    )
    assert later.validity_violations == (d,)
    assert later.undelivered == {0: 0, 1: 1, 2: 1}
    # Everyone staying delivered everything of staying sources: valid.
    whole = check({0: [a, b], 1: [a, b]}, broadcast={a, b, c}, staying=[0, 1])
    assert whole.valid and whole.validity_violations == () and whole.total_undelivered == 0


def test_a_long_cycle_is_described_in_a_bounded_line() -> None:
    from epto.check import OrderViolation

    n = 5000
    cycle = tuple((i, 0) for i in range(n))
    violation = OrderViolation(cycle=cycle, witnesses=tuple(range(n)))
    text = violation.describe()
    assert len(text) < 400 and f"({n} events in the cycle)" in text
    short = OrderViolation(cycle=((1, 0), (2, 0)), witnesses=(7, 8))
    assert (
        short.describe() == "(1, 0) before (2, 0) at process 7; (2, 0) before (1, 0) at process 8"
    )
