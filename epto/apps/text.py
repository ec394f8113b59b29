"""A replicated plain-text document over the total order (docs/editor.md).

Total order removes the hard part of collaborative editing: every replica
applies the same operations in the same order. What is left is that each
operation is written against the text as its author saw it; it is resolved,
at delivery, against what was ordered since (operational transformation,
:mod:`epto.apps._ot`), identically at every replica.

:class:`TextDocument` is a :class:`epto.rsm.StateMachine`, so snapshots, late
joiners and digests come from the state-machine layer. Its one command is
``edit(author, seq, ref, op)``.

Rules:

* **Replicated state**: the confirmed text, its ``version`` (operations
  applied), the operations applied since ``floor`` (history, in their final
  form) and each author's latest ``ref``. The same at every replica.
* **An operation** carries its author, the author's sequence number, ``ref``
  (the version its author had applied when it sent it) and its edits,
  written against that version. At delivery it is transformed against every
  operation applied after ``ref`` (the total order puts them first), applied,
  and kept in the history. One with ``ref`` below ``floor``, or above
  ``version``, is refused (``"stale"``) at every replica alike.
* **Local edits show at once**: the local view is the confirmed text plus the
  author's pending edits. An author has at most one operation in the total
  order at a time, carrying every edit pending when it was sent (up to
  :data:`MAX_EDITS`); the edits made meanwhile wait for it to be applied.
  Pending edits are rebased over each remote operation as it is applied (the
  same transformation the delivery applies), so the local view always equals
  what the group will agree on once they are delivered.
* **History collection**: the history keeps the operations at or above
  ``floor``, the least ``ref`` among the authors heard in the last
  ``horizon`` operations and the last quarter of the horizon (for an
  author's first operation, before the group heard of it), and never more
  than ``horizon`` operations.
* **An author's numbers are never reused**: a replica started again under
  its author id numbers its operations from above its earlier starts'
  (:meth:`TextDocument.number_from`), so an operation its earlier start sent
  and the group applies after the restart is a remote operation here, not
  taken for the new start's own.
* **A refused operation does not stop its author**: its edits are still
  pending, rebased over everything applied since; when its own operation
  comes back ``"stale"`` (an author silent for the horizon, or a first
  operation that the others outran) it sends them again against the present
  version. One refused as ``"too long"`` (the text would exceed
  ``max_length``) would be refused again: its author drops what is pending
  and its view becomes the group's text (a change with an empty ``op``, as
  after a restore).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import attrs

from ..rsm import StateMachine, replicated
from ._ot import Delete, Edit, Insert, Operation, apply, transform

MAX_EDITS = 1024
"""Most edits one operation carries (what is pending beyond waits its turn)."""


def _encode(op: Operation) -> list[list[Any]]:
    return [["i", e.pos, e.text] if isinstance(e, Insert) else ["d", e.pos, e.length] for e in op]


def _decode(raw: Any, limit: int) -> Operation:
    if not isinstance(raw, list) or len(raw) > MAX_EDITS:
        raise ValueError(f"an operation is a list of at most {MAX_EDITS} edits")
    out: list[Edit] = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 3 or item[0] not in ("i", "d"):
            raise ValueError("an edit is ['i', pos, text] or ['d', pos, length]")
        kind, pos, arg = item
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= limit:
            raise ValueError("edit position out of range")
        if kind == "i":
            if not isinstance(arg, str) or len(arg) > 65_536:
                raise ValueError("inserted text must be a string of at most 65536 code points")
            out.append(Insert(pos, arg))
        else:
            if not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg <= limit:
                raise ValueError("deleted length out of range")
            out.append(Delete(pos, arg))
    return tuple(out)


@attrs.frozen(slots=True)
class Change:
    """What the local view became: ``op`` applied to the previous view."""

    op: Operation
    remote: bool


class TextDocument(StateMachine):
    """One replica of a text; ``author`` is this replica's author id."""

    def __init__(self, author: int, *, horizon: int = 10_000, max_length: int = 10_000_000) -> None:
        self.author = author
        self._horizon = horizon
        self._max_length = max_length
        # Replicated state.
        self.text = ""
        self.version = 0
        self.floor = 0
        self._history: deque[Operation] = deque()
        self._refs: dict[int, tuple[int, int]] = {}
        """author -> (latest ref, version when heard)."""
        # Local state.
        self._pending: deque[Operation] = deque()
        self._in_flight: tuple[int, int] | None = None
        """(seq, ref) of this author's operation in the total order."""
        self._seq = 0
        self._outbox: list[tuple[int, int, int, list[list[Any]]]] = []
        self.changes: list[Change] = []
        """Changes of the local view since the caller last took them."""
        self.refused = 0

    # -- the local view ---------------------------------------------------------------

    @property
    def view(self) -> str:
        """What the local user sees: the confirmed text plus pending edits."""
        text = self.text
        for op in self._pending:
            text = apply(text, op)
        return text

    def local_edit(self, op: Operation) -> None:
        """An edit of the local view: shown at once, replicated in order."""
        self._pending.append(tuple(op))
        self.changes.append(Change(op=tuple(op), remote=False))
        self._send_next()

    def _send_next(self) -> None:
        """Send what is pending as one operation, unless one is in the order."""
        if self._in_flight is not None or not self._pending:
            return
        edits = [edit for op in self._pending for edit in op]
        batch, rest = tuple(edits[:MAX_EDITS]), tuple(edits[MAX_EDITS:])
        self._pending = deque([batch, rest] if rest else [batch])
        self._seq += 1
        self._in_flight = (self._seq, self.version)
        self._outbox.append((self.author, self._seq, self.version, _encode(batch)))

    def number_from(self, seq: int) -> None:
        """Number this author's next operations from ``seq + 1``.

        A replica started again under its author id restores the replicated
        state, not its local counter: its first operation would reuse the
        ``(seq, ref)`` of an operation its earlier start sent and that is
        still on its way in the order, which would then be taken for the new
        one (its edits dropped from the view, the new ones shown as applied).
        The server numbers each start from above every earlier start's
        numbers (its incarnation, :func:`epto._incarnation.first_seq`)."""
        if not isinstance(seq, int) or seq < self._seq:
            raise ValueError(f"sequence numbers only grow: {seq} < {self._seq}")
        self._seq = seq

    def take_outgoing(self) -> list[tuple[int, int, int, list[list[Any]]]]:
        """Commands to submit (``edit`` arguments), oldest first."""
        out, self._outbox = self._outbox, []
        return out

    def take_changes(self) -> list[Change]:
        out, self.changes = self.changes, []
        return out

    def pending(self) -> int:
        return len(self._pending)

    # -- the replicated command ---------------------------------------------------------

    @replicated
    def edit(self, author: int, seq: int, ref: int, raw: Any) -> str:
        """Apply one author's operation at its place in the total order."""
        if not (isinstance(author, int) and isinstance(seq, int) and isinstance(ref, int)):
            raise ValueError("author, seq and ref are integers")
        op = _decode(raw, self._max_length)
        # Our own operation in the order (its edits are pending here).
        own = author == self.author and self._in_flight == (seq, ref)
        if not self.floor <= ref <= self.version:
            self.refused += 1
            if own:
                # Refused alike everywhere; its edits are still pending here,
                # rebased over every operation applied since (the local
                # view), so they go again against the present version
                # instead of waiting forever for an answer.
                self._in_flight = None
                self._send_next()
            return "stale"
        final = op
        for index in range(ref - self.floor, len(self._history)):
            final, _ = transform(final, self._history[index], a_first=False)
        text = apply(self.text, final)
        if len(text) > self._max_length:
            self.refused += 1
            if own:
                # Refused alike everywhere, and it would be again: drop what
                # is pending (the edits after it were built on it) and show
                # the text as the group has it.
                self._pending.clear()
                self._in_flight = None
                self.changes.append(Change(op=(), remote=True))
            return "too long"
        self.text = text
        self.version += 1
        self._history.append(final)
        self._refs[author] = (ref, self.version)
        self._collect()
        if own:
            # The local view already holds it in this form.
            self._pending.popleft()
            self._in_flight = None
            self._send_next()
        else:
            self._rebase_pending(final)
        return "ok"

    def _rebase_pending(self, remote: Operation) -> None:
        """Rebase the pending operations over ``remote`` (ordered before them),
        and report what the local view becomes."""
        incoming = remote
        rebased: deque[Operation] = deque()
        for op in self._pending:
            op2, incoming = transform(op, incoming, a_first=False)
            rebased.append(op2)
        self._pending = rebased
        self.changes.append(Change(op=incoming, remote=True))

    def _collect(self) -> None:
        oldest = self.version - self._horizon
        recent = [ref for ref, heard in self._refs.values() if heard > oldest]
        # An author not heard yet has no ref here: keep the last quarter of
        # the horizon for its first operation, which may be in the order
        # while the others' operations move the floor.
        recent.append(self.version - max(1, self._horizon // 4))
        floor = max(min(recent), oldest)
        for author in [a for a, (_, heard) in self._refs.items() if heard <= oldest]:
            del self._refs[author]
        while self.floor < floor and self._history:
            self._history.popleft()
            self.floor += 1

    # -- state transfer -------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return json.dumps(
            {
                "text": self.text,
                "version": self.version,
                "floor": self.floor,
                "history": [_encode(op) for op in self._history],
                "refs": {str(a): list(r) for a, r in self._refs.items()},
            }
        ).encode()

    def restore(self, state: bytes) -> None:
        data = json.loads(state)
        self.text = data["text"]
        self.version = int(data["version"])
        self.floor = int(data["floor"])
        self._history = deque(_decode(op, self._max_length) for op in data["history"])
        self._refs = {int(a): (int(r[0]), int(r[1])) for a, r in data["refs"].items()}
        self._pending.clear()
        self._in_flight = None
        self.changes.append(Change(op=(), remote=True))

    def history_size(self) -> int:
        return len(self._history)


def transform_position(pos: int, op: Operation, *, stick_left: bool = False) -> int:
    """Where position ``pos`` (a cursor) is after ``op``."""
    for edit in op:
        if isinstance(edit, Insert):
            if edit.pos < pos or (edit.pos == pos and not stick_left):
                pos += len(edit.text)
        elif edit.pos < pos:
            pos -= min(edit.length, pos - edit.pos)
    return pos
