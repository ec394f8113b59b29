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
    ``apply(apply(t, b), a') == apply(apply(t, a), b')``.

    The grid of single-edit transformations, walked with loops (an
    operation of a thousand edits is not a thousand nested calls): each edit
    of ``a`` in turn against the whole of ``b``, which each step rewrites."""
    out: list[Edit] = []
    rest = tuple(b)
    for edit in a:
        done, rest = _one_against(edit, rest, a_first)
        out.extend(done)
    return tuple(out), rest


def _one_against(a: Edit, b: Operation, a_first: bool) -> tuple[Operation, Operation]:
    """One edit against an operation (the edit may split as it goes)."""
    mine: Operation = (a,)
    theirs: list[Edit] = []
    for edit in b:
        mine, done = _against_one(mine, edit, a_first)
        theirs.extend(done)
    return mine, tuple(theirs)


def _against_one(a: Operation, b: Edit, a_first: bool) -> tuple[Operation, Operation]:
    """An operation against one edit. A split edit has at most two pieces
    and pieces split no further than their edit did, so the nesting of
    these two functions stays shallow."""
    if len(a) == 1:
        return tuple(transform_edit(a[0], b, a_first)), tuple(transform_edit(b, a[0], not a_first))
    out: list[Edit] = []
    theirs: Operation = (b,)
    for edit in a:
        done, theirs = _one_against(edit, theirs, a_first)
        out.extend(done)
    return tuple(out), theirs


def checked(text_length: int, op: Sequence[Edit], max_length: int) -> int:
    """The length of a text of ``text_length`` after ``op``, if every edit of
    ``op`` lies within the text it applies to (no clamping) and the result
    is at most ``max_length``; :class:`ValueError` otherwise. What a replica
    takes from its user is then what every replica applies alike."""
    length = text_length
    for edit in op:
        if isinstance(edit, Insert):
            if not isinstance(edit.text, str) or not 0 <= edit.pos <= length:
                raise ValueError(f"insert at {edit.pos} outside a text of {length}")
            length += len(edit.text)
        elif isinstance(edit, Delete):
            if edit.pos < 0 or edit.length < 0 or edit.pos + edit.length > length:
                raise ValueError(
                    f"delete of {edit.length} at {edit.pos} outside a text of {length}"
                )
            length -= edit.length
        else:
            raise ValueError(f"not an edit: {edit!r}")
    if length > max_length:
        raise ValueError(f"the text would be {length} code points, above {max_length}")
    return length
