"""The pairwise checker of :mod:`epto.check`, for many overlapping groups.

Sequencing atoms (seed 003) promise *pairwise* total order, not one global
order: two processes that both deliver ``m`` and ``m'`` deliver them in the
same relative order. :func:`epto.check.check` looks for cycles in the union of
every process's before-edges, which is stronger: with single overlaps
``Ga = {x, y}``, ``Gb = {y, z}``, ``Gc = {z, x}`` the cycle a < b (at y),
b < c (at z), c < a (at x) is allowed, as no process sees two of the three.

Work, with ``D`` deliveries, ``P`` processes of which ``U`` delivered
distinct sequences (processes with equal sequences are compared once, as a
class: the members of a group that is in no double overlap, for example)
and ``L`` the length of the shorter sequence of a pair:

- position maps and integrity: O(D);
- order: O(L) dictionary look-ups per pair of distinct sequences, so
  O(U**2 * L) in all, plus O(k log L) to count the inversions of a pair that
  disagrees on its ``k`` common messages (pairs that agree cost no more);
- liveness: O(sum of the group sizes) with the default expectation, one
  ``expected`` call per (process, message) when ``expected`` is given.

Memory is O(D) and the sample of violations is bounded. Fifty processes of
two thousand messages each take a few million look-ups; a thousand processes
with ten thousand distinct messages each would take billions: check a sample
of the processes then.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

import attrs

from ._delivery_check import IntegrityViolation
from ._event import EventId, ProcessId

SAMPLE_LIMIT = 100
"""Default bound on the order violations a report lists (all are counted)."""


class PairwiseViolation(NamedTuple):
    """Two processes that deliver two messages in opposite orders.

    ``process`` delivers ``first`` before ``second``; ``other`` delivers
    ``second`` before ``first``. ``process < other``, and ``first, second`` is
    the first disagreement in ``process``'s sequence restricted to the
    messages both delivered (they are adjacent there).
    """

    process: ProcessId
    other: ProcessId
    first: EventId
    second: EventId

    def describe(self) -> str:
        return (
            f"{self.first} before {self.second} at process {self.process}, "
            f"after it at process {self.other}"
        )


@attrs.frozen(kw_only=True, slots=True)
class PairwiseReport:
    """The verdicts of :func:`check_pairwise` on a set of delivery sequences."""

    processes: int
    """Processes in the sequences given."""
    deliveries: int
    """Entries in all sequences, duplicates included."""
    messages: int
    """Distinct messages delivered by at least one process."""
    pairs_checked: int
    """Unordered pairs of processes with at least two messages in common: the
    pairs the order property constrains (others cannot disagree)."""
    violating_pairs: int
    """Unordered pairs of processes whose common messages are in different orders."""
    inversions: int
    """Over the violating pairs of processes: the unordered pairs of common
    messages they deliver in opposite orders (reversing ``k`` common
    messages counts ``k * (k - 1) / 2``)."""
    order_violations: tuple[PairwiseViolation, ...]
    """One witness per violating pair of processes, sorted, at most ``limit``
    of them (:attr:`violating_pairs` counts them all)."""
    integrity_violations: tuple[IntegrityViolation, ...]
    """Kinds ``"duplicate"`` (each extra delivery), ``"never-broadcast"`` and
    ``"outside-group"`` (once per process and message)."""
    stuck: Mapping[ProcessId, tuple[EventId, ...]]
    """Per process owing some: the messages it was expected to deliver and did
    not, sorted. After quiescence, those will never be delivered."""

    @property
    def total_stuck(self) -> int:
        return sum(len(events) for events in self.stuck.values())

    @property
    def ok(self) -> bool:
        """Pairwise order, integrity and liveness hold: no violation, nothing stuck."""
        return not self.violating_pairs and not self.integrity_violations and not self.stuck

    def summary(self) -> str:
        return (
            f"{self.processes} processes, {self.deliveries} deliveries of {self.messages} "
            f"messages, {self.pairs_checked} pairs checked; order: {self.violating_pairs} "
            f"violating pairs ({self.inversions} inversions); integrity: "
            f"{len(self.integrity_violations)}; stuck: {self.total_stuck} at "
            f"{len(self.stuck)} processes"
        )


def check_pairwise(
    sequences: Mapping[ProcessId, Sequence[EventId]],
    *,
    groups: Mapping[EventId, frozenset[ProcessId]] | None = None,
    broadcast: Collection[EventId] | None = None,
    expected: Callable[[ProcessId, EventId], bool] | None = None,
    limit: int = SAMPLE_LIMIT,
) -> PairwiseReport:
    """Check delivery sequences (process -> message ids in delivery order)
    for pairwise total order, integrity and liveness.

    ``groups[m]``: the members message ``m`` was addressed to. A process
    delivering ``m`` outside them is an integrity violation; a message
    missing from ``groups`` is judged by nobody's membership (and expected by
    nobody, unless ``expected`` says otherwise). ``broadcast``: every message
    sent; any other delivered message is an integrity violation.

    Liveness: call after quiescence. Every message delivered anywhere, in
    ``broadcast`` or in ``groups`` that a process ``p`` is expected to deliver
    and did not is stuck at ``p``. ``expected(p, m)`` decides; by default,
    with ``groups``, the members of ``m``'s group; without either, every
    process of ``sequences`` every message. The processes judged are those
    of ``sequences`` and the members named in ``groups`` (a member absent
    from ``sequences`` delivered nothing).

    A duplicate is judged at its first delivery for order. At most ``limit``
    order violations are listed; all are counted.
    """
    deliveries = 0
    integrity: list[IntegrityViolation] = []
    unique: dict[ProcessId, list[EventId]] = {}
    for pid in sorted(sequences):
        seen: set[EventId] = set()
        order: list[EventId] = []
        for event in sequences[pid]:
            deliveries += 1
            if event in seen:
                integrity.append(IntegrityViolation(process=pid, event=event, kind="duplicate"))
                continue
            seen.add(event)
            order.append(event)
            if broadcast is not None and event not in broadcast:
                integrity.append(
                    IntegrityViolation(process=pid, event=event, kind="never-broadcast")
                )
            if groups is not None and event in groups and pid not in groups[event]:
                integrity.append(IntegrityViolation(process=pid, event=event, kind="outside-group"))
        unique[pid] = order

    delivered_anywhere: set[EventId] = set()
    for order in unique.values():
        delivered_anywhere.update(order)

    order_report = _pairwise_order(unique, limit)
    return PairwiseReport(
        processes=len(unique),
        deliveries=deliveries,
        messages=len(delivered_anywhere),
        pairs_checked=order_report.pairs_checked,
        violating_pairs=order_report.violating_pairs,
        inversions=order_report.inversions,
        order_violations=tuple(order_report.sample),
        integrity_violations=tuple(integrity),
        stuck=_stuck(unique, delivered_anywhere, groups, broadcast, expected),
    )


@attrs.define
class _OrderTally:
    pairs_checked: int = 0
    violating_pairs: int = 0
    inversions: int = 0
    sample: list[PairwiseViolation] = attrs.field(factory=list)


def _pairwise_order(unique: Mapping[ProcessId, list[EventId]], limit: int) -> _OrderTally:
    """Compare every pair of distinct sequences on their common messages."""
    # Processes with equal sequences form one class, compared once.
    classes: dict[tuple[EventId, ...], list[ProcessId]] = {}
    for pid, order in unique.items():  # sorted by process: members come sorted
        classes.setdefault(tuple(order), []).append(pid)
    members = list(classes.values())
    orders = [list(key) for key in classes]
    positions = [{event: i for i, event in enumerate(order)} for order in orders]

    tally = _OrderTally()
    for i in range(len(orders)):
        n = len(members[i])
        if len(orders[i]) >= 2:
            tally.pairs_checked += n * (n - 1) // 2
        for j in range(i + 1, len(orders)):
            # Walk the shorter sequence, look up in the other's position map.
            a, b = (i, j) if len(orders[i]) <= len(orders[j]) else (j, i)
            other = positions[b]
            common = [event for event in orders[a] if event in other]
            if len(common) < 2:
                continue
            weight = len(members[a]) * len(members[b])
            tally.pairs_checked += weight
            ranks = [other[event] for event in common]
            descent = _first_descent(ranks)
            if descent is None:
                continue
            tally.violating_pairs += weight
            tally.inversions += weight * _count_inversions(ranks, len(orders[b]))
            first, second = common[descent - 1], common[descent]
            room = limit - len(tally.sample)
            witnesses = ((p, q) for p in members[a] for q in members[b])
            for p, q in itertools.islice(witnesses, max(room, 0)):
                tally.sample.append(
                    PairwiseViolation(p, q, first, second)
                    if p < q
                    else PairwiseViolation(q, p, second, first)
                )
    tally.sample.sort()
    return tally


def _first_descent(ranks: Sequence[int]) -> int | None:
    """The first index ``i`` with ``ranks[i] < ranks[i - 1]``, if any."""
    for i in range(1, len(ranks)):
        if ranks[i] < ranks[i - 1]:
            return i
    return None


def _count_inversions(ranks: Sequence[int], size: int) -> int:
    """Pairs ``i < j`` with ``ranks[i] > ranks[j]`` (distinct ranks in
    ``range(size)``), with a Fenwick tree: O(len(ranks) * log(size))."""
    tree = [0] * (size + 1)
    inversions = 0
    for seen, rank in enumerate(ranks):
        at_most = 0
        k = rank + 1
        while k > 0:
            at_most += tree[k]
            k -= k & -k
        inversions += seen - at_most
        k = rank + 1
        while k <= size:
            tree[k] += 1
            k += k & -k
    return inversions


def _stuck(
    unique: Mapping[ProcessId, list[EventId]],
    delivered_anywhere: set[EventId],
    groups: Mapping[EventId, frozenset[ProcessId]] | None,
    broadcast: Collection[EventId] | None,
    expected: Callable[[ProcessId, EventId], bool] | None,
) -> dict[ProcessId, tuple[EventId, ...]]:
    """Per process owing some: the expected messages it did not deliver."""
    universe = set(delivered_anywhere)
    if broadcast is not None:
        universe.update(broadcast)
    processes = set(unique)
    if groups is not None:
        universe.update(groups)
        for group in groups.values():
            processes.update(group)
    delivered = {pid: set(order) for pid, order in unique.items()}
    empty: set[EventId] = set()
    owed: dict[ProcessId, list[EventId]] = {}

    def owe(pid: ProcessId, events: Iterable[EventId]) -> None:
        got = delivered.get(pid, empty)
        lacking = [event for event in events if event not in got]
        if lacking:
            owed.setdefault(pid, []).extend(lacking)

    if expected is not None:
        for pid in processes:
            owe(pid, (event for event in universe if expected(pid, event)))
    elif groups is not None:
        for event in universe:
            for pid in groups.get(event, ()):
                owe(pid, (event,))
    else:
        for pid in processes:
            owe(pid, universe)
    return {pid: tuple(sorted(owed[pid])) for pid in sorted(owed)}
