"""The history operations and sequential models of the linearizability
checker, and what the search sees of one key's operations.

A model is a step function ``(state, kind, arg, result, info) -> new state``
returning :data:`NO` when the operation cannot be linearized in that state
(or, for an indeterminate one, would not change it), and an initial state.
:func:`abstract` turns one key's operations into what the search uses: the
register's values that nothing reads become one state (:data:`UNREAD`), the
grow-only set becomes bit masks, and indeterminate operations that could
only make later reads fail are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

MODELS: Final = {"register": frozenset({"write", "read", "cas"}), "set": frozenset({"add", "read"})}
"""The models and the operations each one knows."""


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


# Per-model step: (state, kind, arg, result, info) -> new state, or NO when the
# operation cannot be linearized in this state (or, for an indeterminate one,
# would not change it).
NO: Final = object()
Step = Callable[[Any, str, Any, Any, bool], Any]


def _register_step(state: Any, kind: str, arg: Any, result: Any, info: bool) -> Any:
    if kind == "read":
        return state if state == result else NO
    if kind == "write":
        return NO if info and state == arg else arg
    expected, new = arg  # cas
    if info:
        return new if state == expected and state != new else NO
    if result:
        return new if state == expected else NO
    return state if state != expected else NO


def _set_step(state: Any, kind: str, arg: Any, result: Any, info: bool) -> Any:
    # The set is an int, one bit per element (see abstract); so is a read's
    # result, and an add's argument is its element's bit.
    if kind == "read":
        return state if state == result else NO
    if state & arg:  # add
        return NO if info else state
    return state | arg


STEPS: Final[dict[str, tuple[Step, Any]]] = {
    "register": (_register_step, None),
    "set": (_set_step, 0),
}

OVERWRITES: Final = {"register": frozenset({"write"}), "set": frozenset()}
"""Per model, the operations whose new state does not depend on the old one."""


class _Unread:
    """The register's value when it was last set to a value that no read
    returns and no cas expects: no operation tells such values apart, so they
    are one state to the search."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a value nothing reads>"


UNREAD: Final = _Unread()


Abstract = tuple[int, HistoryOp, Any, Any]
"""An operation for the search: (index in the history, operation, argument
used, result used)."""


def abstract(
    model: str, ops: list[tuple[int, HistoryOp]]
) -> tuple[list[Abstract], Callable[[Any], str]]:
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
        return abstract_set(ops)
    observed = set()
    failed_cas = False
    for _, op in ops:
        if op.op == "read":
            observed.add(op.result)
        elif op.op == "cas":
            observed.add(op.arg[0])
            failed_cas = failed_cas or (op.status == "ok" and not op.result)
    out: list[Abstract] = []
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


def abstract_set(
    ops: list[tuple[int, HistoryOp]],
) -> tuple[list[Abstract], Callable[[Any], str]]:
    """The set's part of :func:`abstract`.

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
