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
  (:data:`UNREAD`), and indeterminate operations that could only make later
  reads fail are left out (:func:`_abstract`);
- grow-only set: adds commute, so an indeterminate add is only linearized
  together with a read that shows its element, and no add is linearized
  while a read that lacks its element is still to come.

Keys are independent objects: the history is partitioned by key and each key
is searched on its own, with its own budget of configurations.

Ties: an operation that completes at the instant another is invoked is
taken as concurrent with it (call entries sort before return entries at
equal times), so clock granularity never makes a correct history fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Final

import attrs

__all__ = ["HistoryOp", "LinearizabilityVerdict", "check_linearizable"]

MODELS: Final = {"register": frozenset({"write", "read", "cas"}), "set": frozenset({"add", "read"})}
"""The models and the operations each one knows."""

STATUSES: Final = frozenset({"ok", "fail", "info"})

STATE_SAMPLE: Final = 8
"""How many distinct states a failure report lists."""


@attrs.frozen(kw_only=True, slots=True)
class HistoryOp:
    """One client operation, as the client saw it.

    ``op`` is ``"write"``, ``"read"`` or ``"cas"`` for the register model,
    ``"add"`` or ``"read"`` for the grow-only set model. ``arg``: the value
    (write), ``(expected, new)`` (cas), the element (add), ``None`` (read).
    ``result``: the value read (register, ``None`` when never written) or the
    elements read (set: any iterable, compared as a frozenset); ``True`` or
    ``False`` for a cas; ignored for write and add.

    ``status``: ``"ok"`` (completed, result known), ``"fail"`` (definitely
    did not take effect: dropped), ``"info"`` (indeterminate: may take effect
    at any time after ``invoked``, or never; ``completed`` is ignored and may
    be ``None``). Values and elements must be hashable.
    """

    client: int
    key: str
    op: str
    arg: Any = None
    result: Any = None
    status: str
    invoked: float
    completed: float | None


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


# Per-model step: (state, kind, arg, result, info) -> new state, or _NO when the
# operation cannot be linearized in this state (or, for an indeterminate one,
# would not change it).
_NO: Final = object()
_Step = Callable[[Any, str, Any, Any, bool], Any]


def _register_step(state: Any, kind: str, arg: Any, result: Any, info: bool) -> Any:
    if kind == "read":
        return state if state == result else _NO
    if kind == "write":
        return _NO if info and state == arg else arg
    expected, new = arg  # cas
    if info:
        return new if state == expected and state != new else _NO
    if result:
        return new if state == expected else _NO
    return state if state != expected else _NO


def _set_step(state: Any, kind: str, arg: Any, result: Any, info: bool) -> Any:
    # The set is an int, one bit per element (see _abstract); so is a read's
    # result, and an add's argument is its element's bit.
    if kind == "read":
        return state if state == result else _NO
    if state & arg:  # add
        return _NO if info else state
    return state | arg


_STEPS: Final[dict[str, tuple[_Step, Any]]] = {
    "register": (_register_step, None),
    "set": (_set_step, 0),
}

_OVERWRITES: Final = {"register": frozenset({"write"}), "set": frozenset()}
"""Per model, the operations whose new state does not depend on the old one."""


class _Unread:
    """The register's value when it was last set to a value that no read
    returns and no cas expects: no operation tells such values apart, so they
    are one state to the search."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a value nothing reads>"


UNREAD: Final = _Unread()


_Abstract = tuple[int, HistoryOp, Any, Any]
"""An operation for the search: (index in the history, operation, argument
used, result used)."""


def _abstract(
    model: str, ops: list[tuple[int, HistoryOp]]
) -> tuple[list[_Abstract], Callable[[Any], str]]:
    """One key's operations for the search, and how to show a state.

    Register: a value written that no completed read returns and no cas
    expects becomes :data:`UNREAD` (one state instead of many). An
    indeterminate operation that can only write such a value is left out when
    no completed cas failed on this key: it could only make later reads fail,
    and a failed cas is the one thing a value nobody reads can explain.

    Set: the state is an int with one bit per element (a copy of a big
    frozenset per configuration would cost the square of the history in
    memory); an add's argument is its element's bit, a read's result the
    bits of its elements. An indeterminate add of an element that no
    completed read contains is left out (it could only make later reads
    fail).
    """
    if model == "set":
        return _abstract_set(ops)
    observed = set()
    failed_cas = False
    for _, op in ops:
        if op.op == "read":
            observed.add(op.result)
        elif op.op == "cas":
            observed.add(op.arg[0])
            failed_cas = failed_cas or (op.status == "ok" and not op.result)
    out: list[_Abstract] = []
    for i, op in ops:
        arg = op.arg
        if op.op == "write" and arg not in observed:
            arg = UNREAD
        elif op.op == "cas" and arg[1] not in observed:
            arg = (arg[0], UNREAD)
        writes_unread = arg is UNREAD or (op.op == "cas" and arg[1] is UNREAD)
        if op.status == "info" and writes_unread and not failed_cas:
            continue
        out.append((i, op, arg, op.result))
    return out, repr


def _abstract_set(
    ops: list[tuple[int, HistoryOp]],
) -> tuple[list[_Abstract], Callable[[Any], str]]:
    """The set's part of :func:`_abstract`.

    A growing set's reads make the history itself quadratic in size, so the
    reads are turned into bit masks one at a time, in invocation order, each
    from its difference with the one before (frozenset differences, at C
    speed): memory stays two sets and one int per read.
    """
    numbered: dict[Any, int] = {}  # element -> its bit's position
    for _, op in ops:
        if op.op == "add":
            numbered.setdefault(op.arg, len(numbered))
    masks: dict[int, int] = {}  # read's index in ops -> its mask
    seen: set[Any] = set()  # elements some completed read shows
    previous: frozenset[Any] = frozenset()
    mask = 0
    order = sorted(
        (j for j, (_, op) in enumerate(ops) if op.op == "read"), key=lambda j: ops[j][1].invoked
    )
    for j in order:
        index, op = ops[j]
        try:
            current = frozenset(op.result)
        except TypeError as exc:
            raise ValueError(
                f"history operation #{index} ({op!r}): a set read's result must be an "
                f"iterable of hashables: {exc}"
            ) from exc
        change = 0
        for element in current - previous:
            if element not in numbered:
                numbered[element] = len(numbered)
            change |= 1 << numbered[element]
        for element in previous - current:
            change |= 1 << numbered[element]
        mask ^= change
        masks[j] = mask
        if change:
            seen.update(current - previous)
        previous = current
    elements = list(numbered)

    def show(state: Any) -> str:
        inside = (repr(e) for b, e in enumerate(elements) if state >> b & 1)
        return "{" + ", ".join(sorted(inside)) + "}"

    reduced = [
        (i, op, 1 << numbered[op.arg], None) if op.op == "add" else (i, op, None, masks[j])
        for j, (i, op) in enumerate(ops)
        if op.status == "ok" or op.op != "add" or op.arg in seen
    ]
    return reduced, show


def _describe(op: HistoryOp, index: int) -> str:
    if op.op == "read":
        what = f"read -> {op.result!r}"
    elif op.op == "cas":
        what = f"cas{op.arg!r} -> {op.result!r}"
    else:
        what = f"{op.op}({op.arg!r})"
    when = f"invoked {op.invoked!r}"
    when += f", completed {op.completed!r}" if op.status == "ok" else ", indeterminate"
    return f"operation #{index} (client {op.client}: {what}, {when})"


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
        else:  # elements are checked when the read becomes a mask (_abstract_set)
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


class _Outcome:
    """The result of searching one key."""

    __slots__ = ("failure", "ok", "states")

    def __init__(self, ok: bool | None, states: int, failure: str) -> None:
        self.ok = ok
        self.states = states
        self.failure = failure


def _check_key(
    ops: list[_Abstract],
    show: Callable[[Any], str],
    step: _Step,
    initial: Any,
    overwrites: frozenset[str],
    lazy_adds: bool,
    max_states: int,
) -> _Outcome:
    """Lowe's just-in-time search with memoisation over one key's operations.

    ``lazy_adds`` (the grow-only set): indeterminate adds are linearized only
    together with a read that shows them, and an add is not linearized while
    a read that lacks its element is still to come (see below).
    """
    n = len(ops)
    if n == 0:
        return _Outcome(True, 0, "")
    kinds = [op.op for _, op, _, _ in ops]
    args = [arg for _, _, arg, _ in ops]
    results = [result for _, _, _, result in ops]
    info = [op.status == "info" for _, op, _, _ in ops]
    overwriting = [info[i] and kinds[i] in overwrites for i in range(n)]
    runs = any(overwriting)
    # Indeterminate operations alike (same operation, same argument) share a class.
    classes: dict[tuple[str, Any], int] = {}
    alike = [
        classes.setdefault((kinds[i], args[i]), len(classes)) if info[i] else 0 for i in range(n)
    ]
    # Separate bit positions for completed and indeterminate operations: the
    # memo is keyed by (completed ones linearized, state) and holds the sets of
    # indeterminate ones linearized with them, for the subsumption test; bit 0
    # of such a set says that the last operation linearized was indeterminate
    # (see "runs" below).
    bit = [0] * n
    ok_count = info_count = 0
    for i in range(n):
        if info[i]:
            bit[i] = 2 << info_count
            info_count += 1
        else:
            bit[i] = 1 << ok_count
            ok_count += 1

    # Grow-only set: once an element is in, it stays, so adding it while a
    # completed read that lacks it is still to be linearized leads nowhere.
    # blocker[i]: for an add, the latest-invoked completed read lacking its
    # element (its completion bit), or 0.
    blocker = [0] * n
    if lazy_adds:
        reads = sorted(
            (i for i in range(n) if kinds[i] == "read" and not info[i]),
            key=lambda i: ops[i][1].invoked,
            reverse=True,
        )
        adds: dict[int, list[int]] = {}  # element bit -> its adds
        for i in range(n):
            if kinds[i] == "add":
                adds.setdefault(args[i], []).append(i)
        unassigned = sum(adds)
        for r in reads:
            lacking = unassigned & ~results[r]
            unassigned ^= lacking
            while lacking:
                low = lacking & -lacking
                for i in adds[low]:
                    blocker[i] = bit[r]
                lacking ^= low

    # Entries: node 0 is the head sentinel; op i has its call node at 1 + 2i
    # and (when completed) its return node at 2 + 2i.
    timed: list[tuple[float, int, int]] = []
    for i, (_, op, _, _) in enumerate(ops):
        timed.append((op.invoked, 0, 1 + 2 * i))
        if not info[i]:
            assert op.completed is not None
            timed.append((op.completed, 1, 2 + 2 * i))
    timed.sort()
    size = 2 * n + 1
    nxt = [-1] * size
    prv = [-1] * size
    rank = [0] * size  # position in time order, for the failure report
    last = 0
    for position, (_, _, node) in enumerate(timed):
        nxt[last] = node
        prv[node] = last
        rank[node] = position
        last = node

    def lift(i: int) -> None:
        call = 1 + 2 * i
        nxt[prv[call]] = nxt[call]
        if nxt[call] != -1:
            prv[nxt[call]] = prv[call]
        if not info[i]:
            ret = call + 1
            nxt[prv[ret]] = nxt[ret]
            if nxt[ret] != -1:
                prv[nxt[ret]] = prv[ret]

    def unlift(i: int) -> None:
        call = 1 + 2 * i
        if not info[i]:
            ret = call + 1
            nxt[prv[ret]] = ret
            if nxt[ret] != -1:
                prv[nxt[ret]] = ret
        nxt[prv[call]] = call
        if nxt[call] != -1:
            prv[nxt[call]] = call

    seen: dict[tuple[int, Any], list[int]] = {(0, initial): [0]}
    states = 1
    state = initial
    done = 0  # completed operations linearized (bits)
    extra = 0  # indeterminate operations linearized (bits)
    remaining = ok_count
    # (operation, state and mark before it, tried as it was after it,
    # indeterminate adds linearized with it)
    stack: list[tuple[int, Any, int, int, tuple[int, ...]]] = []
    stuck_rank = -1  # the latest return entry the search could not get past
    stuck_states: dict[Any, None] = {}

    # The candidates at a configuration are the call entries before the first
    # return entry: completed operations first (pass 1), indeterminate ones
    # after (pass 2), so that leaving an indeterminate operation out is
    # explored before putting it in, and the subsumption test prunes the
    # configurations where putting it in changed nothing that matters.
    #
    # Runs: in a run of indeterminate operations linearized one after another
    # (no completed operation between them), one that overwrites the state
    # whatever it was (a register write) makes the ones before it in the run
    # useless: leaving those out reaches the same state with fewer
    # indeterminate operations used. So such an operation only starts a run.
    # Whether the configuration is inside a run changes what may follow, so it
    # is part of what the memo compares (bit 0 of the mark: outside a run, 0,
    # subsumes inside one).
    #
    # Alike indeterminate operations (the same operation with the same
    # argument, such as all writes of UNREAD) can stand for one another once
    # invoked: at a configuration only the first of a class in the walk is
    # tried ("tried" holds the classes met so far in the second pass).
    #
    # Lazy adds (grow-only set): adds commute, so an indeterminate add can be
    # moved later, up to the first read that shows its element, and dropped
    # if there is none. So there is no second pass: a read whose result is the
    # state plus elements that minimal indeterminate adds can supply is
    # linearized together with those adds (the first of each alike class), as
    # one step. Without this, the 2**k subsets of k pending adds would all be
    # states to explore before a failing read.
    def supply(missing: int) -> tuple[int, ...]:
        """Minimal indeterminate adds, one per missing element (bit), or ()
        if some element has none."""
        found: list[int] = []
        covered = 0
        node = nxt[0]
        while node & 1:  # the call entries before the first return entry
            j = node >> 1
            if info[j] and args[j] & missing & ~covered:
                found.append(j)
                covered |= args[j]
            node = nxt[node]
        return tuple(found) if covered == missing else ()

    info_left = info_count
    second_pass = False
    in_run = 0
    tried = 0
    entry = nxt[0]
    while True:
        # While completed operations remain, their return entries are in the
        # list, and the walk meets the first of them before the list's end.
        if remaining == 0:
            return _Outcome(True, states, "")
        if entry & 1:  # a call entry
            i = entry >> 1
            if (
                info[i] is second_pass
                and not (in_run and overwriting[i])
                and not (blocker[i] and not done & blocker[i])
            ):
                if second_pass:
                    if tried >> alike[i] & 1:
                        entry = nxt[entry]
                        continue
                    tried |= 1 << alike[i]
                new = step(state, kinds[i], args[i], results[i], second_pass)
                used: tuple[int, ...] = ()
                if new is _NO and lazy_adds and kinds[i] == "read" and not state & ~results[i]:
                    used = supply(results[i] & ~state)
                    if used:
                        new = results[i]
                if new is not _NO:
                    if second_pass:
                        key, mark = (done, new), extra | bit[i] | runs
                    else:
                        key, mark = (done | bit[i], new), extra & ~1
                        for u in used:
                            mark |= bit[u]
                    known = seen.get(key)
                    if known is None or not any(old & ~mark == 0 for old in known):
                        if states >= max_states:
                            return _Outcome(None, states, "")
                        states += 1
                        if known is None:
                            seen[key] = [mark]
                        else:
                            known.append(mark)
                        stack.append((i, state, extra, tried, used))
                        state = new
                        done, extra = key[0], mark
                        in_run = extra & 1
                        if second_pass:
                            info_left -= 1
                        else:
                            remaining -= 1
                        for u in used:
                            lift(u)
                        lift(i)
                        second_pass = False
                        entry = nxt[0]
                        continue
            entry = nxt[entry]
        elif not second_pass and info_left and not lazy_adds:
            second_pass = True
            tried = 0
            entry = nxt[0]
        else:  # a return entry: its operation had to be linearized by now
            if rank[entry] > stuck_rank:
                stuck_rank = rank[entry]
                stuck_states = {}
            if rank[entry] == stuck_rank and len(stuck_states) < STATE_SAMPLE:
                stuck_states[state] = None
            if not stack:
                break
            i, state, extra, tried, used = stack.pop()
            in_run = extra & 1
            unlift(i)
            for u in reversed(used):
                unlift(u)
            second_pass = info[i]
            if second_pass:
                info_left += 1
            else:
                done &= ~bit[i]
                remaining += 1
            entry = nxt[1 + 2 * i]

    index, op, _, _ = ops[timed[stuck_rank][2] // 2 - 1]  # return node 2 + 2i closes operation i
    shown = ", ".join(show(s) for s in stuck_states)
    more = " (and others)" if len(stuck_states) >= STATE_SAMPLE else ""
    return _Outcome(
        False,
        states,
        f"{_describe(op, index)} cannot be linearized; "
        f"states reachable just before it: {shown}{more}",
    )


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
    step, initial = _STEPS[model]
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
        reduced, show = _abstract(model, by_key[key])
        outcome = _check_key(
            reduced, show, step, initial, _OVERWRITES[model], model == "set", max_states
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
