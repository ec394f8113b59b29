"""Operational transformation of plain-text edits, the pure part of the
replicated text document (:mod:`epto.apps.text`).

An *edit* is ``Insert(pos, text)`` or ``Delete(pos, length)`` in code points;
an *operation* is a sequence of edits applied one after the other.
``transform(a, b, a_first)`` rewrites edit ``a`` so that it applies after
``b`` (both written against the same text) with the effect ``a`` meant:

* two inserts at one position: the one ordered first (``a_first``) stays
  first;
* an insert inside a range deleted concurrently survives, at the start of
  the range;
* overlapping deletes delete the overlap once.

The document only ever transforms an operation against operations ordered
before it (the total order decides ``a_first``), so these rules are all the
convergence it needs: every replica runs the same function on the same
history.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs


@attrs.frozen(slots=True)
class Insert:
    pos: int
    text: str


@attrs.frozen(slots=True)
class Delete:
    pos: int
    length: int


Edit = Insert | Delete
Operation = tuple[Edit, ...]


def apply(text: str, op: Sequence[Edit]) -> str:
    """``text`` after ``op`` (positions are clamped to the text)."""
    for edit in op:
        if isinstance(edit, Insert):
            pos = min(max(edit.pos, 0), len(text))
            text = text[:pos] + edit.text + text[pos:]
        else:
            pos = min(max(edit.pos, 0), len(text))
            text = text[:pos] + text[pos + max(edit.length, 0) :]
    return text


def transform_edit(a: Edit, b: Edit, a_first: bool) -> list[Edit]:
    """``a`` rewritten to apply after ``b`` (a delete may split in two)."""
    if isinstance(b, Insert):
        n = len(b.text)
        if isinstance(a, Insert):
            if a.pos < b.pos or (a.pos == b.pos and a_first):
                return [a]
            return [Insert(a.pos + n, a.text)]
        # a deletes [a.pos, a.pos + a.length); b inserts at b.pos
        if b.pos <= a.pos:
            return [Delete(a.pos + n, a.length)]
        if b.pos >= a.pos + a.length:
            return [a]
        # the insert lands inside the deleted range: it survives, the range splits
        before = b.pos - a.pos
        return [Delete(a.pos, before), Delete(a.pos + n, a.length - before)]
    # b deletes [b.pos, b.end)
    b_end = b.pos + b.length
    if isinstance(a, Insert):
        if a.pos <= b.pos:
            return [a]
        if a.pos >= b_end:
            return [Insert(a.pos - b.length, a.text)]
        return [Insert(b.pos, a.text)]
    a_end = a.pos + a.length
    if a_end <= b.pos:
        return [a]
    if a.pos >= b_end:
        return [Delete(a.pos - b.length, a.length)]
    # overlap: keep what b did not delete
    keep = max(0, b.pos - a.pos) + max(0, a_end - b_end)
    return [Delete(min(a.pos, b.pos), keep)] if keep else []


def transform(a: Sequence[Edit], b: Sequence[Edit], a_first: bool) -> tuple[Operation, Operation]:
    """``(a', b')``: operation ``a`` rewritten to apply after ``b``, and ``b``
    after ``a`` (both written against the same text), so that
    ``apply(apply(t, b), a') == apply(apply(t, a), b')``."""
    if not a or not b:
        return tuple(a), tuple(b)
    if len(a) == 1 and len(b) == 1:
        return tuple(transform_edit(a[0], b[0], a_first)), tuple(
            transform_edit(b[0], a[0], not a_first)
        )
    if len(a) > 1:
        head, b1 = transform(a[:1], b, a_first)
        rest, b2 = transform(a[1:], b1, a_first)
        return head + rest, b2
    a1, head = transform(a, b[:1], a_first)
    a2, rest = transform(a1, b[1:], a_first)
    return a2, head + rest
