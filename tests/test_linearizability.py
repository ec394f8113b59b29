"""The linearizability checker of epto.check: unit cases, a brute-force
cross-check on small histories, and histories produced by executing a model
at random linearization points (always accepted) with one read made
impossible (always rejected)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epto.check import HistoryOp, LinearizabilityVerdict, check_linearizable


def op(
    kind: str,
    invoked: float,
    completed: float | None,
    arg: Any = None,
    result: Any = None,
    *,
    client: int = 0,
    key: str = "x",
    status: str = "ok",
) -> HistoryOp:
    return HistoryOp(
        client=client,
        key=key,
        op=kind,
        arg=arg,
        result=result,
        status=status,
        invoked=invoked,
        completed=completed,
    )


def w(value: Any, invoked: float, completed: float | None, **kw: Any) -> HistoryOp:
    return op("write", invoked, completed, arg=value, **kw)


def r(result: Any, invoked: float, completed: float | None, **kw: Any) -> HistoryOp:
    return op("read", invoked, completed, result=result, **kw)


def cas(
    expected: Any, new: Any, result: Any, invoked: float, completed: float | None, **kw: Any
) -> HistoryOp:
    return op("cas", invoked, completed, arg=(expected, new), result=result, **kw)


def add(element: Any, invoked: float, completed: float | None, **kw: Any) -> HistoryOp:
    return op("add", invoked, completed, arg=element, **kw)


def verdict(history: list[HistoryOp], **kw: Any) -> LinearizabilityVerdict:
    return check_linearizable(history, **kw)


def accepted(history: list[HistoryOp], **kw: Any) -> bool:
    v = verdict(history, **kw)
    assert v.ok is not None, v.failure
    if v.ok:
        assert v.failure == "" and v.failing_key is None
    else:
        assert v.failure and v.failing_key is not None
    return v.ok


# -- register ------------------------------------------------------------------


def test_empty_history_is_linearizable() -> None:
    v = verdict([])
    assert v.ok is True and v.keys == 0 and v.operations == 0 and v.failure == ""


def test_sequential_history_accepted() -> None:
    assert accepted([r(None, 0, 1), w(1, 2, 3), r(1, 4, 5), w(2, 6, 7), r(2, 8, 9)])


def test_stale_read_after_a_completed_write_rejected() -> None:
    assert not accepted([w(1, 0, 1), r(None, 2, 3, client=1)])
    assert not accepted([w(1, 0, 1), w(2, 2, 3), r(1, 4, 5, client=1)])


def test_read_of_a_value_never_written_rejected() -> None:
    assert not accepted([w(1, 0, 1), r(7, 2, 3, client=1)])
    assert not accepted([r(7, 0, 1)])


def test_concurrent_write_and_read_accepted_both_ways() -> None:
    for seen in (None, 1):
        assert accepted([w(1, 0, 10), r(seen, 1, 2, client=1)])
        assert accepted([r(seen, 0, 10, client=1), w(1, 1, 2)])


def test_touching_intervals_count_as_concurrent() -> None:
    # The read is invoked at the instant the write completes: either order fits.
    assert accepted([w(1, 0, 5), r(None, 5, 6, client=1)])
    assert not accepted([w(1, 0, 5), r(None, 5.5, 6, client=1)])


def test_a_value_once_seen_cannot_be_unseen() -> None:
    # Both reads overlap the write, but once one has seen 1 a later one cannot see None.
    assert not accepted([w(1, 0, 10), r(1, 1, 2, client=1), r(None, 3, 4, client=1)])
    assert accepted([w(1, 0, 10), r(None, 1, 2, client=1), r(1, 3, 4, client=1)])


def test_cas_success_and_failure() -> None:
    assert accepted([w(1, 0, 1), cas(1, 2, True, 2, 3), r(2, 4, 5)])
    assert accepted([w(1, 0, 1), cas(5, 6, False, 2, 3), r(1, 4, 5)])
    assert accepted([cas(None, 3, True, 0, 1), r(3, 2, 3)])
    # A cas that must have failed cannot report success, and the reverse.
    assert not accepted([w(1, 0, 1), cas(5, 6, True, 2, 3)])
    assert not accepted([w(1, 0, 1), cas(1, 2, False, 2, 3)])
    # A failed cas did not write.
    assert not accepted([w(1, 0, 1), cas(5, 6, False, 2, 3), r(6, 4, 5)])


def test_concurrent_cas_only_one_wins() -> None:
    both = [w(0, 0, 1), cas(0, 1, True, 2, 5, client=1), cas(0, 2, True, 2, 5, client=2)]
    assert not accepted(both)
    one = [w(0, 0, 1), cas(0, 1, True, 2, 5, client=1), cas(0, 2, False, 2, 5, client=2)]
    assert accepted([*one, r(1, 6, 7)])
    assert not accepted([*one, r(2, 6, 7)])


def test_info_write_may_or_may_not_have_happened() -> None:
    base = [w(1, 0, 1), w(2, 2, None, client=1, status="info")]
    assert accepted([*base, r(1, 5, 6)])
    assert accepted([*base, r(2, 5, 6)])
    assert not accepted([*base, r(3, 5, 6)])
    # It may take effect late, but only once.
    assert accepted([*base, r(1, 5, 6), r(2, 7, 8)])
    assert not accepted([*base, r(2, 5, 6), r(1, 7, 8)])
    # Never before its invocation.
    assert not accepted([w(1, 0, 1), r(2, 2, 3), w(2, 4, None, client=1, status="info")])


def test_info_cas_may_or_may_not_have_happened() -> None:
    base = [w(1, 0, 1), cas(1, 2, None, 2, None, client=1, status="info")]
    assert accepted([*base, r(1, 5, 6)])
    assert accepted([*base, r(2, 5, 6)])
    # Its expected value never held after its invocation: it cannot have written.
    base = [w(1, 0, 1), cas(7, 2, None, 2, None, client=1, status="info")]
    assert not accepted([*base, r(2, 5, 6)])


def test_info_write_nobody_reads_can_explain_a_failed_cas() -> None:
    base = [w(1, 0, 1), w(2, 2, None, client=1, status="info")]
    assert accepted([*base, cas(1, 3, False, 5, 6)])
    assert not accepted([w(1, 0, 1), cas(1, 3, False, 5, 6)])
    # ... but not a read of a value nobody wrote.
    assert not accepted([*base, cas(1, 3, False, 5, 6), r(7, 7, 8)])


def test_alike_info_writes_each_take_effect_once() -> None:
    one = [w(1, 0, 1), w(2, 2, None, client=1, status="info")]
    two = [*one, w(2, 2, None, client=2, status="info")]
    seen_twice = [r(2, 5, 6), w(1, 7, 8), r(2, 9, 10)]
    assert accepted([*two, *seen_twice])
    assert not accepted([*one, *seen_twice])
    # The second one invoked only after the first reappearance is needed: too late.
    late = [*one, r(2, 5, 6), w(1, 7, 8), r(2, 9, 10), w(2, 11, None, client=2, status="info")]
    assert not accepted(late)


def test_info_operations_chain() -> None:
    # An indeterminate write then an indeterminate cas that expects its value.
    chain = [w(1, 0, 1), w(2, 2, None, client=1, status="info")]
    chain.append(cas(2, 3, None, 2, None, client=2, status="info"))
    assert accepted([*chain, r(3, 5, 6)])
    assert accepted([*chain, r(2, 5, 6), r(3, 7, 8)])
    assert not accepted([*chain, r(3, 5, 6), r(2, 7, 8)])


def test_info_read_is_dropped_and_counts_nothing() -> None:
    v = verdict([w(1, 0, 1), r(99, 2, None, client=1, status="info"), r(1, 3, 4)])
    assert v.ok is True and v.operations == 2


def test_fail_operation_is_ignored() -> None:
    base = [w(1, 0, 1), w(2, 2, 3, client=1, status="fail")]
    assert accepted([*base, r(1, 5, 6)])
    assert not accepted([*base, r(2, 5, 6)])
    assert verdict([*base, r(1, 5, 6)]).operations == 2


def test_keys_are_independent_and_the_failing_key_is_named() -> None:
    history = [
        w(1, 0, 1, key="a"),
        w(2, 0, 1, key="b"),
        r(2, 2, 3, key="a", client=1),  # would be fine on key b
        r(2, 2, 3, key="b", client=1),
    ]
    v = verdict(history)
    assert v.ok is False and v.keys == 2 and v.operations == 4 and v.failing_key == "a"
    assert "'a'" in v.failure
    history[2] = r(1, 2, 3, key="a", client=1)
    assert verdict(history).ok is True


def test_failure_names_the_operation_and_the_states_before_it() -> None:
    # (The two reads at the end are after the failure; they make 1 and 2 values read.)
    history = [w(1, 0, 1), w(2, 0, 1, client=1), r(3, 2, 3, client=2), r(2, 4, 5), r(1, 4, 5)]
    v = verdict(history)
    assert v.ok is False
    assert "client 2" in v.failure and "read -> 3" in v.failure and "#2" in v.failure
    assert "1, 2" in v.failure or "2, 1" in v.failure  # both writes may have been last
    # Values nothing reads are one state to the search, and named as such.
    v = verdict(history[:3])
    assert v.ok is False and "states reachable just before it: <a value nothing reads>" in v.failure


# -- grow-only set -------------------------------------------------------------


def test_set_read_missing_a_completed_add_rejected() -> None:
    assert not accepted([add(1, 0, 1), r([], 2, 3, client=1)], model="set")
    assert accepted([add(1, 0, 1), r([1], 2, 3, client=1)], model="set")
    assert accepted([add(1, 0, 1), r({1}, 2, 3, client=1)], model="set")


def test_set_concurrent_adds() -> None:
    adds = [add(1, 0, 10), add(2, 0, 10, client=1)]
    for seen in ([], [1], [2], (2, 1)):
        assert accepted([*adds, r(seen, 1, 2, client=2)], model="set")
    assert not accepted([*adds, r([3], 1, 2, client=2)], model="set")
    # Grow-only: once 1 and 2 are seen, a later read cannot miss one.
    later = [r([1, 2], 1, 2, client=2), r([2], 3, 4, client=2)]
    assert not accepted([*adds, *later], model="set")


def test_set_info_add() -> None:
    base = [add(1, 0, 1), add(2, 2, None, client=1, status="info")]
    assert accepted([*base, r([1], 5, 6)], model="set")
    assert accepted([*base, r([1, 2], 5, 6)], model="set")
    assert not accepted([*base, r([2], 5, 6)], model="set")
    assert accepted([*base, r([1], 5, 6), r([1, 2], 7, 8)], model="set")
    assert not accepted([*base, r([1, 2], 5, 6), r([1], 7, 8)], model="set")
    # One that no read shows is simply left out.
    v = verdict([*base, add(3, 2, None, client=2, status="info"), r([1], 5, 6)], model="set")
    assert v.ok is True and v.operations == 4


def test_set_many_pending_info_adds_decided_within_a_small_budget() -> None:
    """Twenty indeterminate adds pending at once (a partition): the search
    does not enumerate their subsets, accepting or rejecting."""
    k = 20
    history = [add(0, 0, 1)]
    history += [add(j, 2, None, client=j, status="info") for j in range(1, k + 1)]
    history.append(r(range(k // 2 + 1), 10, 11, client=99))
    history.append(r(range(k + 1), 12, 13, client=99))
    assert verdict(history, model="set", max_states=1000).ok is True
    late = [*history, r([*range(k + 1), 999], 14, 15, client=99)]
    assert verdict(late, model="set", max_states=1000).ok is False
    # An add seen by the second read cannot have happened before the first.
    early = [*history[:-2], r([0, k], 10, 11, client=99), r(range(k // 2 + 1), 12, 13)]
    assert verdict(early, model="set", max_states=1000).ok is False


def test_register_many_pending_info_writes_decided_within_a_small_budget() -> None:
    k = 20
    history = [w(0, 0, 1)]
    history += [w(j, 2, None, client=j, status="info") for j in range(1, k + 1)]
    history += [r(j, 10 + 2 * j, 11 + 2 * j, client=99) for j in range(1, k + 1)]
    assert verdict(history, max_states=5000).ok is True
    late = [*history, r(1, 100, 101, client=99)]  # 1 was overwritten, and used up
    assert verdict(late, max_states=5000).ok is False


# -- budget and malformed input ------------------------------------------------


def test_budget_exhaustion_is_undecided() -> None:
    history = [w(i, 0, 10, client=i) for i in range(6)] + [r(99, 11, 12, client=9)]
    full = verdict(history)
    assert full.ok is False and full.states_explored > 20
    v = verdict(history, max_states=20)
    assert v.ok is None and v.failing_key == "x" and "budget" in v.failure
    assert v.states_explored <= 20
    # A failing key still fails when another key is undecided.
    other = [w(1, 0, 1, key="y"), r(2, 2, 3, key="y")]
    assert verdict(history + other, max_states=20).ok is False


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (op("delete", 0, 1), "unknown operation"),
        (op("add", 0, 1, arg=1), "unknown operation"),
        (op("read", 0, 1, status="timeout"), "unknown status"),
        (op("read", 2, 1), "before it was invoked"),
        (op("read", 0, None), "without a completion time"),
        (op("read", float("nan"), 1), "finite"),
        (op("cas", 0, 1, arg=5, result=True), "expected, new"),
        (op("cas", 0, 1, arg=(1, 2), result="yes"), "True or False"),
        (op("write", 0, 1, arg=[1]), "hashable"),
    ],
)
def test_malformed_operations_raise_naming_the_operation(bad: HistoryOp, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        check_linearizable([w(1, 0, 1), bad])
    assert "#1" in str(info.value)


def test_malformed_set_reads_raise_naming_the_operation() -> None:
    for bad in (r([[1]], 2, 3), r(5, 2, 3)):
        with pytest.raises(ValueError, match="#1"):
            check_linearizable([add(1, 0, 1), bad], model="set")
    # A one-shot iterator is read once and kept.
    assert accepted([add(1, 0, 1), r(iter([1]), 2, 3)], model="set")


def test_unknown_model_and_bad_budget_raise() -> None:
    with pytest.raises(ValueError, match="model"):
        check_linearizable([], model="queue")
    with pytest.raises(ValueError, match="max_states"):
        check_linearizable([], max_states=0)


# -- against brute force on small histories -------------------------------------


def brute_force(history: list[HistoryOp], model: str) -> bool:
    """Every order consistent with real time, every subset of info operations."""
    keys = {h.key for h in history}
    for key in keys:
        ops = [
            h
            for h in history
            if h.key == key and h.status != "fail" and not (h.status == "info" and h.op == "read")
        ]
        initial: Any = None if model == "register" else frozenset()
        if not _brute(ops, initial):
            return False
    return True


def _apply(h: HistoryOp, state: Any) -> tuple[bool, Any]:
    info = h.status == "info"
    if h.op == "write":
        return True, h.arg
    if h.op == "add":
        return True, state | {h.arg}
    if h.op == "read":
        expected = frozenset(h.result) if isinstance(state, frozenset) else h.result
        return state == expected, state
    old, new = h.arg
    if info:
        return True, new if state == old else state
    return (state == old) == h.result, new if h.result else state


def _brute(ops: list[HistoryOp], state: Any) -> bool:
    if all(h.status == "info" for h in ops):
        return True
    for i, h in enumerate(ops):
        rest = ops[:i] + ops[i + 1 :]
        if any(o.status == "ok" and o.completed < h.invoked for o in rest):  # type: ignore[operator]
            continue
        fits, after = _apply(h, state)
        if fits and _brute(rest, after):
            return True
    return False


@st.composite
def small_histories(draw: st.DrawFn) -> tuple[str, list[HistoryOp]]:
    """Arbitrary small histories (results not from an execution)."""
    model = draw(st.sampled_from(["register", "set"]))
    kinds = ["write", "read", "cas"] if model == "register" else ["add", "read"]
    values = st.sampled_from([None, 1, 2, 3]) if model == "register" else st.integers(1, 3)
    out = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(kinds))
        status = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
        invoked = draw(st.integers(0, 8))
        completed = None if status == "info" else invoked + draw(st.integers(0, 4))
        arg: Any = None
        result: Any = None
        if kind == "cas":
            arg = (draw(values), draw(values))
            result = draw(st.booleans()) if status == "ok" else None
        elif kind == "read":
            sets = st.frozensets(st.integers(1, 3))
            result = draw(values if model == "register" else sets)
        else:
            arg = draw(values)
        key = draw(st.sampled_from(["a", "b"]))
        out.append(op(kind, invoked, completed, arg, result, key=key, status=status))
    return model, out


@settings(derandomize=True, max_examples=600, deadline=None)
@given(small_histories())
def test_agrees_with_brute_force(case: tuple[str, list[HistoryOp]]) -> None:
    model, history = case
    assert check_linearizable(history, model=model).ok is brute_force(history, model)


# -- executed histories ---------------------------------------------------------


class Built:
    """A history built by executing operations at chosen linearization points."""

    def __init__(self, model: str, distinct: bool) -> None:
        self.model = model
        self.distinct = distinct
        self.ops: list[HistoryOp] = []


def execute(
    model: str, plan: list[tuple[int, str, str, int, int, int, str, bool]], distinct: bool = True
) -> Built:
    """Each client issues its operations one at a time; each one takes effect at
    a point inside its interval (an info one: any time after its invocation, or
    never), and the results are those of executing them in that order on the
    model. Every value written or added is distinct (1, 2, ...), or, with
    ``distinct=False``, one of 1, 2, 3."""
    clock: dict[int, int] = {}
    pending: list[tuple[int, int, int, str, str, str, bool, int, int | None]] = []
    for n, (client, key, kind, gap, duration, where, status, happens) in enumerate(plan):
        invoked = clock.get(client, 0) + gap
        completed = invoked + duration
        clock[client] = completed + 1
        if status == "ok":
            point: int | None = invoked + where * duration // 100
        elif status == "info" and happens:
            point = invoked + where  # any time after its invocation
        else:
            point = None  # a fail, or an info that never took effect
        pending.append((invoked, completed, client, key, kind, status, happens, n, point))
    executed: dict[int, tuple[Any, Any]] = {}
    state: dict[str, Any] = {}
    counter = 0
    timeline = sorted((p[8], p[7]) for p in pending if p[8] is not None)
    for _, n in timeline:
        _, _, _, key, kind, _, happens, _, _ = pending[n]
        current = state.get(key, None if model == "register" else frozenset())
        if kind == "read":
            executed[n] = (None, sorted(current) if model == "set" else current)
        elif kind in ("write", "add"):
            counter += 1
            value = counter if distinct else counter % 3 + 1
            state[key] = value if kind == "write" else current | {value}
            executed[n] = (value, None)
        else:  # cas: expected is the current value when ``happens``, else a value it is not
            counter += 1
            value = counter if distinct else counter % 3 + 1
            expected = current if happens else "never held"
            if current == expected:
                state[key] = value
            executed[n] = ((expected, value), current == expected)
    built = Built(model, distinct)
    for invoked, completed, client, key, kind, status, _, n, _ in pending:
        arg, result = executed.get(n, (None, None))
        if n not in executed:  # never took effect: arguments that no read can see
            counter += 1
            arg = ("never held", -counter) if kind == "cas" else -counter
            result = -1 if kind == "read" else None
        if kind == "cas" and status == "info":
            result = None
        built.ops.append(
            op(
                kind,
                invoked,
                None if status == "info" else completed,
                arg,
                result,
                client=client,
                key=key,
                status=status,
            )
        )
    return built


def plans(model: str) -> st.SearchStrategy[list[tuple[int, str, str, int, int, int, str, bool]]]:
    kinds = ["write", "read", "read", "cas"] if model == "register" else ["add", "read"]
    return st.lists(
        st.tuples(
            st.integers(0, 3),  # client
            st.sampled_from(["a", "b"]),  # key
            st.sampled_from(kinds),
            st.integers(0, 3),  # gap before the invocation
            st.integers(0, 8),  # duration
            st.integers(0, 100),  # where in the interval it takes effect
            st.sampled_from(["ok", "ok", "ok", "ok", "info", "fail"]),
            st.booleans(),  # info: takes effect; cas: succeeds
        ),
        min_size=4,
        max_size=40,
    )


def impossible(built: Built, choice: int) -> tuple[int, Any] | None:
    """A completed read and a result it certainly cannot have: a value never
    written (or an element never added), or one first written by an
    operation invoked after the read completed."""
    reads = [i for i, h in enumerate(built.ops) if h.op == "read" and h.status == "ok"]
    if not reads:
        return None
    i = reads[choice % len(reads)]
    read = built.ops[i]
    assert read.completed is not None
    future = [
        h.arg[1] if h.op == "cas" else h.arg
        for h in built.ops
        if h.key == read.key
        and h.op in ("write", "add", "cas")
        and h.status != "fail"
        and h.invoked > read.completed
    ]
    usable = future and choice % 2 and built.distinct
    value = future[choice % len(future)] if usable else -1_000_000
    if built.model == "set":
        return i, [*read.result, value]
    return i, value


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    st.sampled_from(["register", "set"]).flatmap(lambda m: st.tuples(st.just(m), plans(m))),
    st.integers(0, 1000),
    st.booleans(),
)
def test_executed_histories_accepted_and_an_impossible_read_rejected(
    case: tuple[str, list[tuple[int, str, str, int, int, int, str, bool]]],
    choice: int,
    distinct: bool,
) -> None:
    model, plan = case
    built = execute(model, plan, distinct)
    v = check_linearizable(built.ops, model=model)
    assert v.ok is True, v.failure
    # The order the history is given in does not matter; any iterable will do.
    shuffled = list(built.ops)
    random.Random(choice).shuffle(shuffled)
    assert check_linearizable(iter(shuffled), model=model).ok is True
    mutation = impossible(built, choice)
    if mutation is None:
        return
    i, result = mutation
    mutated = list(built.ops)
    mutated[i] = HistoryOp(
        client=mutated[i].client,
        key=mutated[i].key,
        op="read",
        result=result,
        status="ok",
        invoked=mutated[i].invoked,
        completed=mutated[i].completed,
    )
    bad = check_linearizable(mutated, model=model)
    assert bad.ok is False and bad.failing_key == mutated[i].key


def test_a_long_executed_history() -> None:
    """A few hundred operations, several clients and keys, some indeterminate."""
    rng = random.Random(7)
    plan = [
        (
            rng.randrange(5),
            rng.choice("abc"),
            rng.choice(["write", "read", "read", "cas"]),
            rng.randrange(3),
            rng.randrange(10),
            rng.randrange(101),
            rng.choice(["ok"] * 12 + ["info", "fail"]),
            rng.random() < 0.5,
        )
        for _ in range(600)
    ]
    built = execute("register", plan)
    v = check_linearizable(built.ops)
    assert v.ok is True, v.failure
    assert v.keys == 3
    mutation = impossible(built, 3)
    assert mutation is not None
    i, result = mutation
    mutated = list(built.ops)
    old = mutated[i]
    mutated[i] = HistoryOp(
        client=old.client,
        key=old.key,
        op="read",
        result=result,
        status="ok",
        invoked=old.invoked,
        completed=old.completed,
    )
    assert check_linearizable(mutated).ok is False
