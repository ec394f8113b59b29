"""Linearizability of client histories: the checker of :mod:`epto.check`.

A history is what clients saw: each operation with its invocation and
completion times and its result. It is linearizable when every operation can
be given one instant between its invocation and its completion such that,
executed one by one in the order of those instants, a sequential model (a
register, a grow-only set) gives every completed operation the result its
client saw ("Linearizability: a correctness condition for concurrent
objects", M. Herlihy and J. Wing).

The search is Wing and Gong's ("Testing and verifying concurrent objects",
J. Wing and C. Gong) with the two improvements of "Testing for
linearizability" (G. Lowe):

- *just-in-time linearization*: the history becomes a doubly linked list of
  call and return entries in time order. Walking it from the head, an
  operation whose call entry comes before the first return entry may be
  linearized next (it is "minimal"); meeting a return entry means the
  operation it closes had to be linearized by now and was not, so the search
  backtracks to its last choice;
- *memoisation*: a configuration is the set of operations linearized so far
  and the model's state; one already explored is not explored again.

Indeterminate operations (``status="info"``: a timeout, a crash) may take
effect at any time after their invocation or never. They have no return
entry, so nothing ever forces them; the search may linearize one wherever it
is minimal. Left at that, every subset of them would multiply the
configurations. Six reductions keep them cheap, all exact because an
indeterminate operation has no result to check and can always be left out:

- at a configuration, completed operations are tried before indeterminate
  ones, and a configuration is pruned when one with the same completed
  operations linearized and the same state, but a *subset* of its
  indeterminate operations, was already reached: that one can do everything
  this one can (subsumption, as in reachability checking with inclusion);
- an indeterminate operation is not linearized where it would not change the
  state (a write of the current value, a cas whose expected value is not the
  current one, an add of an element already present);
- in a run of indeterminate operations with no completed one between, a
  register write only comes first (it erases the effect of those before it);
- alike indeterminate operations (same operation, same argument) stand for
  one another once invoked: only the first is tried;
- register values that no read returns and no cas expects are one state
  (``UNREAD``), and indeterminate operations that could only make later
  reads fail are left out (both in :mod:`epto._linearizability_models`);
- grow-only set: adds commute, so an indeterminate add is only linearized
  together with a read that shows its element, and no add is linearized
  while a read that lacks its element is still to come.

Keys are independent objects: the history is partitioned by key and each key
is searched on its own, with its own budget of configurations.

Ties: an operation that completes at the instant another is invoked is
taken as concurrent with it (call entries sort before return entries at
equal times), so clock granularity never makes a correct history fail.

This module checks the input and puts the verdict together; the operations
and models are in :mod:`epto._linearizability_models`, the search in
:mod:`epto._linearizability_search`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

import attrs

from ._linearizability_models import MODELS, OVERWRITES, STEPS, HistoryOp, abstract
from ._linearizability_search import check_key

__all__ = ["HistoryOp", "LinearizabilityVerdict", "check_linearizable"]

STATUSES: Final = frozenset({"ok", "fail", "info"})


@attrs.frozen(kw_only=True, slots=True)
class LinearizabilityVerdict:
    """What :func:`check_linearizable` decided."""

    ok: bool | None
    """True: every key is linearizable. False: some key is not. None: no key
    failed, but the search budget ran out on some key before deciding."""
    model: str
    keys: int
    """Keys checked (every key of the history)."""
    operations: int
    """Operations considered: the history without ``"fail"`` operations and
    indeterminate reads (which have no effect)."""
    failing_key: str | None
    """The first key (in sorted order) that is not linearizable; when ``ok``
    is None, the first key left undecided; None when ``ok``."""
    failure: str
    """Which operation could not be linearized and the states reachable just
    before it; or which key ran out of budget; ``""`` when ``ok``."""
    states_explored: int
    """Configurations (linearized set, state) the search entered, over all keys."""


def _validate(op: HistoryOp, index: int, model: str) -> HistoryOp:
    """Check one operation; return it with a set read's result as a frozenset."""

    def bad(why: str) -> ValueError:
        return ValueError(f"history operation #{index} ({op!r}): {why}")

    if not isinstance(op, HistoryOp):
        raise bad("not a HistoryOp")
    if op.status not in STATUSES:
        raise bad(f"unknown status {op.status!r} (expected one of {sorted(STATUSES)})")
    if op.op not in MODELS[model]:
        raise bad(f"unknown operation {op.op!r} for the {model} model")
    if not isinstance(op.key, str):
        raise bad("key is not a str")
    if not isinstance(op.invoked, int | float) or not math.isfinite(op.invoked):
        raise bad("invoked is not a finite number")
    if op.completed is not None:
        if not isinstance(op.completed, int | float) or not math.isfinite(op.completed):
            raise bad("completed is not a finite number")
        if op.completed < op.invoked:
            raise bad("completed before it was invoked")
    elif op.status == "ok":
        raise bad("status ok without a completion time")
    if op.status == "fail":
        return op
    if op.op == "cas":
        if not (isinstance(op.arg, tuple) and len(op.arg) == 2):
            raise bad("a cas takes arg=(expected, new)")
        if op.status == "ok" and not isinstance(op.result, bool):
            raise bad("a completed cas has result True or False")
    values = [op.arg]
    if op.op == "read" and op.status == "ok":
        if model == "register":
            values.append(op.result)
        else:  # elements are checked when the read becomes a mask (abstract_set)
            try:
                elements = iter(op.result)
            except TypeError as exc:
                raise bad(f"a set read's result must be an iterable: {exc}") from exc
            if elements is op.result:  # a one-shot iterator: keep what it gives
                op = attrs.evolve(op, result=tuple(elements))
    for value in values:
        try:
            hash(value)
        except TypeError as exc:
            raise bad(f"values must be hashable: {exc}") from exc
    return op


def check_linearizable(
    history: Iterable[HistoryOp], *, model: str = "register", max_states: int = 1_000_000
) -> LinearizabilityVerdict:
    """Decide whether ``history`` is linearizable for ``model``, key by key.

    ``model`` is ``"register"`` (initial value None; write, read, cas) or
    ``"set"`` (a grow-only set, initially empty; add, read). ``max_states``
    bounds the configurations searched *per key*; a key that needs more is
    undecided and the verdict's ``ok`` is None unless another key failed.

    Raises ValueError, naming the operation (its position in ``history`` and
    its fields), for a malformed one: an unknown operation or status, a
    completion before the invocation, a completed operation without a
    completion time, a cas without ``(expected, new)`` or with a non-bool
    result, an unhashable value.
    """
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r} (expected one of {sorted(MODELS)})")
    if max_states < 1:
        raise ValueError(f"max_states must be at least 1, not {max_states}")
    step, initial = STEPS[model]
    by_key: dict[str, list[tuple[int, HistoryOp]]] = {}
    operations = 0
    for index, raw in enumerate(history):
        op = _validate(raw, index, model)
        by_key.setdefault(op.key, [])
        if op.status == "fail" or (op.status == "info" and op.op == "read"):
            continue
        by_key[op.key].append((index, op))
        operations += 1

    states = 0
    failed: list[tuple[str, str]] = []
    undecided: list[str] = []
    for key in sorted(by_key):
        reduced, show = abstract(model, by_key[key])
        outcome = check_key(
            reduced, show, step, initial, OVERWRITES[model], model == "set", max_states
        )
        states += outcome.states
        if outcome.ok is False:
            failed.append((key, outcome.failure))
        elif outcome.ok is None:
            undecided.append(key)

    ok: bool | None
    if failed:
        ok = False
        failing_key, failure = failed[0]
        failure = f"key {failing_key!r}: {failure}"
        if len(failed) > 1:
            failure += f" ({len(failed)} keys are not linearizable)"
    elif undecided:
        ok = None
        failing_key = undecided[0]
        failure = (
            f"key {failing_key!r}: undecided, the search budget of {max_states} states "
            f"ran out ({len(undecided)} keys undecided)"
        )
    else:
        ok, failing_key, failure = True, None, ""
    return LinearizabilityVerdict(
        ok=ok,
        model=model,
        keys=len(by_key),
        operations=operations,
        failing_key=failing_key,
        failure=failure,
        states_explored=states,
    )
