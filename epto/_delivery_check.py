"""Integrity, total order and agreement of delivery sequences: the checker
behind :func:`epto.check.check` (see :mod:`epto.check`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import TypeVar

import attrs

from ._event import EventId, ProcessId

E = TypeVar("E", bound=Hashable)


@attrs.frozen(kw_only=True, slots=True)
class OrderViolation:
    """A cycle in the delivered-before relation.

    ``cycle`` lists events ``e0, e1, ..., ek`` such that ``e(i)`` was delivered
    right before ``e(i+1)`` at ``witnesses[i]``, and ``ek`` right before ``e0``
    at ``witnesses[k]``.
    """

    cycle: tuple[EventId, ...]
    witnesses: tuple[ProcessId, ...]

    def describe(self, limit: int = 6) -> str:
        """The cycle in words, at most ``limit`` steps of it (a cycle through
        thousands of events would otherwise be one line of thousands of
        steps; :attr:`cycle` and :attr:`witnesses` hold all of them)."""
        n = len(self.cycle)
        steps = []
        for i, event in enumerate(self.cycle[:limit]):
            nxt = self.cycle[(i + 1) % n]
            steps.append(f"{event} before {nxt} at process {self.witnesses[i]}")
        text = "; ".join(steps)
        if n > limit:
            text += f"; ... ({n} events in the cycle)"
        return text


@attrs.frozen(kw_only=True, slots=True)
class IntegrityViolation:
    """An event delivered twice by one process, or delivered but never broadcast."""

    process: ProcessId
    event: EventId
    kind: str
    """``"duplicate"`` or ``"never-broadcast"``."""


@attrs.frozen(kw_only=True, slots=True)
class CheckReport:
    """The verdicts on a set of delivery sequences."""

    processes: int
    deliveries: int
    events: int
    """Distinct events delivered by at least one process."""
    order_violations: tuple[OrderViolation, ...]
    integrity_violations: tuple[IntegrityViolation, ...]
    holes: Mapping[ProcessId, int]
    """Per process: events it was expected to deliver and did not."""
    missing_sample: Mapping[ProcessId, tuple[EventId, ...]]
    """Per process with holes: up to ten of the missing events."""
    validity_checked: bool = False
    """Whether validity was judged (``check`` was given ``broadcast`` and ``staying``)."""
    validity_violations: tuple[EventId, ...] = ()
    """Events broadcast by a process that stayed and not delivered by every
    process that stayed (and was expected to deliver them), sorted; events
    nobody delivered included, which the holes cannot count."""
    undelivered: Mapping[ProcessId, int] = attrs.field(factory=dict)
    """Per staying process: events of staying sources it owed and did not deliver."""
    undelivered_sample: Mapping[ProcessId, tuple[EventId, ...]] = attrs.field(factory=dict)
    """Per staying process that owes some: up to ten of those events."""

    @property
    def total_holes(self) -> int:
        return sum(self.holes.values())

    @property
    def total_undelivered(self) -> int:
        """Deliveries owed to staying processes and missing (see :attr:`undelivered`)."""
        return sum(self.undelivered.values())

    @property
    def valid(self) -> bool:
        """Validity holds (or was not judged): every event of a staying process
        was delivered by every staying process expected to deliver it."""
        return not self.validity_violations

    @property
    def ok(self) -> bool:
        """Safety holds: no order and no integrity violation (holes are allowed)."""
        return not self.order_violations and not self.integrity_violations

    def summary(self) -> str:
        lines = [
            f"{self.processes} processes, {self.deliveries} deliveries of {self.events} events",
            f"order violations: {len(self.order_violations)}",
            f"integrity violations: {len(self.integrity_violations)}",
            f"holes: {self.total_holes} at {sum(1 for h in self.holes.values() if h)} processes",
        ]
        if self.validity_checked:
            lines.append(
                f"validity violations: {len(self.validity_violations)} events of staying "
                f"processes not delivered by every staying process ({self.total_undelivered} "
                f"missing deliveries at {sum(1 for u in self.undelivered.values() if u)} processes)"
            )
        lines += [f"  order: {v.describe()}" for v in self.order_violations[:10]]
        lines += [
            f"  integrity: {v.kind} {v.event} at process {v.process}"
            for v in self.integrity_violations[:10]
        ]
        lines += [
            f"  undelivered at process {p}: {', '.join(map(str, events))}"
            + (" ..." if self.undelivered[p] > len(events) else "")
            for p, events in sorted(self.undelivered_sample.items())[:10]
        ]
        return "\n".join(lines)


def check(
    sequences: Mapping[ProcessId, Iterable[EventId]],
    *,
    broadcast: Collection[EventId] | None = None,
    expected: Callable[[ProcessId, EventId], bool] | None = None,
    staying: Collection[ProcessId] | None = None,
) -> CheckReport:
    """Check delivery sequences (process -> event ids in delivery order).

    ``broadcast``: the events that were really broadcast; when given, any other
    delivered event is an integrity violation. ``expected(p, e)``: whether
    process ``p`` should have delivered event ``e`` (for example, it was in the
    group when ``e`` was broadcast); by default every process is expected to
    deliver every event delivered anywhere.

    Holes count only events delivered *somewhere*: an event nobody delivered
    is no hole. ``staying`` (with ``broadcast``) judges validity too: the
    processes that stayed in the group for the whole run (never crashed, left
    or were excluded; a staying process missing from ``sequences`` delivered
    nothing). Every broadcast event whose source (``event[0]``) stayed must be
    delivered by every staying process ``p`` with ``expected(p, e)``; the
    events that are not are :attr:`CheckReport.validity_violations`.
    """
    edges: dict[tuple[EventId, EventId], ProcessId] = {}
    integrity: list[IntegrityViolation] = []
    delivered_by: dict[ProcessId, set[EventId]] = {}
    all_events: set[EventId] = set()
    deliveries = 0
    for pid, seq in sequences.items():
        seen: set[EventId] = set()
        prev: EventId | None = None
        for event in seq:
            deliveries += 1
            if event in seen:
                integrity.append(IntegrityViolation(process=pid, event=event, kind="duplicate"))
            else:
                seen.add(event)
                if broadcast is not None and event not in broadcast:
                    integrity.append(
                        IntegrityViolation(process=pid, event=event, kind="never-broadcast")
                    )
            if prev is not None and prev != event:
                edges.setdefault((prev, event), pid)
            prev = event
        delivered_by[pid] = seen
        all_events |= seen

    order = tuple(find_cycles(edges))

    holes: dict[ProcessId, int] = {}
    missing: dict[ProcessId, tuple[EventId, ...]] = {}
    for pid, seen in delivered_by.items():
        lacking = [
            e for e in all_events if e not in seen and (expected is None or expected(pid, e))
        ]
        holes[pid] = len(lacking)
        if lacking:
            missing[pid] = tuple(sorted(lacking)[:10])
    checked = staying is not None and broadcast is not None
    owed: dict[ProcessId, list[EventId]] = {}
    if staying is not None and broadcast is not None:
        owed = _owed(delivered_by, broadcast, expected, staying)
    return CheckReport(
        processes=len(delivered_by),
        deliveries=deliveries,
        events=len(all_events),
        order_violations=order,
        integrity_violations=tuple(integrity),
        holes=holes,
        missing_sample=missing,
        validity_checked=checked,
        validity_violations=tuple(sorted({e for events in owed.values() for e in events})),
        undelivered={p: len(events) for p, events in owed.items()},
        undelivered_sample={p: tuple(sorted(e)[:10]) for p, e in owed.items() if e},
    )


def _owed(
    delivered_by: Mapping[ProcessId, set[EventId]],
    broadcast: Collection[EventId],
    expected: Callable[[ProcessId, EventId], bool] | None,
    staying: Collection[ProcessId],
) -> dict[ProcessId, list[EventId]]:
    """Per staying process: the events of staying sources it should have
    delivered and did not."""
    stay = sorted(set(staying))
    members = set(stay)
    empty: set[EventId] = set()
    owed: dict[ProcessId, list[EventId]] = {p: [] for p in stay}
    for event in broadcast:
        if event[0] not in members:
            continue
        for pid in stay:
            if event not in delivered_by.get(pid, empty) and (
                expected is None or expected(pid, event)
            ):
                owed[pid].append(event)
    return owed


def find_cycles(edges: Mapping[tuple[E, E], ProcessId]) -> list[OrderViolation]:
    """One witnessed cycle per strongly connected component of more than one node.

    ``edges`` maps ``(a, b)`` to a process that delivered ``a`` right before
    ``b``. Iterative Tarjan, so long sequences do not hit the recursion limit.
    """
    succ: dict[E, list[E]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    components = _strongly_connected(succ)
    out = []
    for comp in components:
        if len(comp) < 2:
            continue
        cycle = _cycle_in(comp, succ)
        witnesses = tuple(edges[(cycle[i], cycle[(i + 1) % len(cycle)])] for i in range(len(cycle)))
        out.append(OrderViolation(cycle=tuple(cycle), witnesses=witnesses))  # type: ignore[arg-type]
    out.sort(key=lambda v: v.cycle)
    return out


def _strongly_connected(succ: Mapping[E, list[E]]) -> list[list[E]]:
    index: dict[E, int] = {}
    low: dict[E, int] = {}
    on_stack: set[E] = set()
    stack: list[E] = []
    result: list[list[E]] = []
    counter = 0
    for root in succ:
        if root in index:
            continue
        work: list[tuple[E, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = succ[node]
            recurse = False
            while i < len(children):
                child = children[i]
                i += 1
                if child not in index:
                    work.append((node, i))
                    work.append((child, 0))
                    recurse = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if recurse:
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                result.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return result


def _cycle_in(component: list[E], succ: Mapping[E, list[E]]) -> list[E]:
    """A shortest cycle through the smallest node of a strongly connected component."""
    members = set(component)
    start = min(component)  # type: ignore[type-var]
    parent: dict[E, E] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in succ[node]:
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    path.reverse()
                    return path
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError("a strongly connected component always has a cycle")
