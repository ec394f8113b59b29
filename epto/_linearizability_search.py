"""The search of the linearizability checker: Wing and Gong's, with Lowe's
just-in-time linearization and memoisation, over one key's operations.

:func:`check_key` takes what :func:`epto._linearizability_models.abstract`
made of the key's operations; the reductions for indeterminate operations
(listed in :mod:`epto._linearizability`) are conditions inside its one loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ._linearizability_models import NO, Abstract, HistoryOp, Step

STATE_SAMPLE: Final = 8
"""How many distinct states a failure report lists."""


def describe(op: HistoryOp, index: int) -> str:
    if op.op == "read":
        what = f"read -> {op.result!r}"
    elif op.op == "cas":
        what = f"cas{op.arg!r} -> {op.result!r}"
    else:
        what = f"{op.op}({op.arg!r})"
    when = f"invoked {op.invoked!r}"
    when += f", completed {op.completed!r}" if op.status == "ok" else ", indeterminate"
    return f"operation #{index} (client {op.client}: {what}, {when})"


class Outcome:
    """The result of searching one key."""

    __slots__ = ("failure", "ok", "states")

    def __init__(self, ok: bool | None, states: int, failure: str) -> None:
        self.ok = ok
        self.states = states
        self.failure = failure


def check_key(
    ops: list[Abstract],
    show: Callable[[Any], str],
    step: Step,
    initial: Any,
    overwrites: frozenset[str],
    lazy_adds: bool,
    max_states: int,
) -> Outcome:
    """Lowe's just-in-time search with memoisation over one key's operations.

    ``lazy_adds`` (the grow-only set): indeterminate adds are linearized only
    together with a read that shows them, and an add is not linearized while
    a read that lacks its element is still to come (see below).
    """
    n = len(ops)
    if n == 0:
        return Outcome(True, 0, "")
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
            return Outcome(True, states, "")
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
                if new is NO and lazy_adds and kinds[i] == "read" and not state & ~results[i]:
                    used = supply(results[i] & ~state)
                    if used:
                        new = results[i]
                if new is not NO:
                    if second_pass:
                        key, mark = (done, new), extra | bit[i] | runs
                    else:
                        key, mark = (done | bit[i], new), extra & ~1
                        for u in used:
                            mark |= bit[u]
                    known = seen.get(key)
                    if known is None or not any(old & ~mark == 0 for old in known):
                        if states >= max_states:
                            return Outcome(None, states, "")
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
    return Outcome(
        False,
        states,
        f"{describe(op, index)} cannot be linearized; "
        f"states reachable just before it: {shown}{more}",
    )
