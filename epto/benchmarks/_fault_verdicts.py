"""What the fault suite concludes from one run (``epto bench faults``,
docs/faults.md): the history's records, lost acknowledged writes,
unavailability windows, divergent final states. Pure functions over values,
so that they are tested on hand-made histories.

Definitions (stated again in docs/faults.md):

* **Operation status**: ``ok`` (the replica answered with a result), ``fail``
  (certainly not executed: refused before it was broadcast, or the replica's
  port refused the connection, so nothing was sent), ``info``
  (indeterminate: timed out, the connection broke, or the replica answered
  with an error that does not exclude execution; it may take effect at any
  time after its invocation, or never).
* **Acknowledged write**: an ``ok`` ``write(k, v)``, an ``ok`` ``cas(k, e,
  v)`` that returned True, an ``ok`` ``add(v)``. Every value written in a run
  is unique, so the final state says which write it came from.
* **Lost** (register): an acknowledged write of ``v`` to ``k`` is lost at a
  replica whose final ``k`` is not ``v`` when no other operation could have
  overwritten it: no ``write`` or ``cas`` on ``k`` that is ``info`` (it may
  have taken effect at any time) or ``ok`` (a cas: ok and True) and did not
  complete before the acknowledged write was invoked. (Set) an acknowledged
  ``add(v)`` is lost at a replica whose final set lacks ``v``. A run's count
  is the number of acknowledged writes lost at one live, ready replica at
  least.
* **Unavailability window** of a fault: from its start to the start of the
  next fault (or the end of the load), the longest interval with no ``ok``
  operation completing, the fault's start counting as the first point; and
  the time from the fault's heal to the first ``ok`` completion after it.
  The run's **longest outage**: the longest interval of the load with no
  ``ok`` completion, whatever faults it spans.
* **Divergence**: live, ready replicas whose final (cut, digest) or state
  differ once the group is quiet. A live replica that is not ready at the
  end is reported apart (stuck), not as divergent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "FaultRecord",
    "Op",
    "divergence",
    "longest_outage",
    "lost_acknowledged",
    "unavailability",
]

STATUSES = ("ok", "fail", "info")


@attrs.frozen(kw_only=True)
class Op:
    """One client operation, as the history file stores it (one JSON line).

    ``invoked`` and ``completed`` are seconds since the run's start;
    ``completed`` of an ``info`` operation is when the client gave up."""

    client: int
    key: str
    op: str
    arg: Any = None
    result: Any = None
    status: str
    invoked: float
    completed: float
    replica: int = 0
    error: str = ""

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Op:
        fields = json.loads(line)
        if not isinstance(fields, dict):
            raise ValueError("a history line is a JSON object")
        if fields.get("status") not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}")
        return cls(**{k: v for k, v in fields.items() if k in attrs.fields_dict(cls)})


@attrs.frozen(kw_only=True)
class FaultRecord:
    """One fault the nemesis applied: when it started and when it was healed
    (the processes restarted, the links healed, the process continued)."""

    kind: str
    start: float
    healed: float
    targets: tuple[int, ...] = ()
    note: str = ""


def _acknowledged(op: Op) -> Any:
    """The value ``op`` is known to have written, or None."""
    if op.status != "ok":
        return None
    if op.op == "write":
        return op.arg
    if op.op == "cas" and op.result is True:
        return op.arg[1]
    if op.op == "add":
        return op.arg
    return None


def _may_write(op: Op) -> bool:
    """Whether ``op`` may have changed its register."""
    if op.op == "write":
        return op.status in ("ok", "info")
    if op.op == "cas":
        return op.status == "info" or (op.status == "ok" and op.result is True)
    return False


def lost_acknowledged(
    history: Sequence[Op], finals: Mapping[int, Any], *, model: str
) -> list[tuple[Op, tuple[int, ...]]]:
    """Acknowledged writes lost at one replica of ``finals`` at least (replica
    id to final state: a dict of registers, or the set's list), each with
    the replicas that lost it."""
    lost: list[tuple[Op, tuple[int, ...]]] = []
    if model == "set":
        final_sets = {r: set(map(_hashable, state)) for r, state in finals.items()}
        for op in history:
            if op.op != "add":
                continue
            value = _acknowledged(op)
            if value is None:
                continue
            where = tuple(r for r, s in sorted(final_sets.items()) if _hashable(value) not in s)
            if where:
                lost.append((op, where))
        return lost
    by_key: dict[str, list[Op]] = {}
    for op in history:
        by_key.setdefault(op.key, []).append(op)
    for key, ops in by_key.items():
        writers = [o for o in ops if _may_write(o)]
        for op in ops:
            if op.op not in ("write", "cas"):
                continue
            value = _acknowledged(op)
            if value is None:
                continue
            overwritable = any(
                o is not op and not (o.status == "ok" and o.completed < op.invoked) for o in writers
            )
            if overwritable:
                continue
            where = tuple(
                r
                for r, state in sorted(finals.items())
                if not isinstance(state, dict) or state.get(key) != value
            )
            if where:
                lost.append((op, where))
    return lost


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


@attrs.frozen(kw_only=True)
class Window:
    """A fault's unavailability: the longest gap without an ok completion
    from its start to ``until``, and the time from its heal to the first ok
    completion after it (None: none before ``until``)."""

    fault: FaultRecord
    until: float
    gap: float
    recovery: float | None


def unavailability(
    history: Iterable[Op], faults: Sequence[FaultRecord], end: float
) -> list[Window]:
    """The unavailability window of each fault (see the module's definitions);
    ``end`` is when the load stopped."""
    done = sorted(op.completed for op in history if op.status == "ok")
    ordered = sorted(faults, key=lambda f: f.start)
    windows = []
    for i, fault in enumerate(ordered):
        until = ordered[i + 1].start if i + 1 < len(ordered) else end
        until = max(until, fault.start)
        points = [fault.start, *(t for t in done if fault.start < t <= until), until]
        gap = max(b - a for a, b in itertools.pairwise(points))
        after = [t for t in done if fault.healed <= t <= until]
        recovery = after[0] - fault.healed if after else None
        windows.append(Window(fault=fault, until=until, gap=gap, recovery=recovery))
    return windows


def longest_outage(history: Iterable[Op], start: float, end: float) -> tuple[float, float]:
    """The longest interval of ``[start, end]`` with no ``ok`` operation
    completing, as ``(from, to)``: an outage that spans several faults, which
    each fault's window (cut at the next fault) does not show whole."""
    points = [
        start,
        *sorted(
            op.completed for op in history if op.status == "ok" and start < op.completed <= end
        ),
        end,
    ]
    return max(itertools.pairwise(points), key=lambda ab: ab[1] - ab[0])


@attrs.frozen(kw_only=True)
class Divergence:
    """Final states grouped: ``groups`` lists, per distinct (cut, digest,
    state), the replicas that hold it; ``stuck`` the live replicas that were
    not ready."""

    groups: tuple[tuple[int, ...], ...]
    stuck: tuple[int, ...]

    @property
    def divergent(self) -> bool:
        return len(self.groups) > 1


def divergence(finals: Mapping[int, Mapping[str, Any]]) -> Divergence:
    """Group live replicas' final reports (``state``, ``cut``, ``digest``,
    ``ready``) by what they hold."""
    groups: dict[str, list[int]] = {}
    stuck = []
    for replica, report in sorted(finals.items()):
        if not report.get("ready", False):
            stuck.append(replica)
            continue
        key = json.dumps(
            [report.get("cut"), report.get("digest"), report.get("state")], sort_keys=True
        )
        groups.setdefault(key, []).append(replica)
    return Divergence(groups=tuple(tuple(g) for g in sorted(groups.values())), stuck=tuple(stuck))
