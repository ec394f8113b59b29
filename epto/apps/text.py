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
* **An operation fits a payload**: with ``max_part_size`` (the bytes of
  an operation's edits as compact JSON that one event of the total order
  carries), an operation larger than that travels as up to
  :data:`MAX_PARTS` parts, broadcast together, each a command ``edit(author,
  seq, ref, edits, part, parts)`` holding a slice of the operation's edits
  (an insert too long for one part is cut into inserts one after the other).
  Every replica keeps the parts received of each author's operation (in the
  replicated state, hence in snapshots) and applies the operation at the
  place of its last part in the order. A part that does not follow its
  predecessor drops what was kept (``"lost part"``) at every replica alike.
* **A local edit is checked** against the local view (every position within
  the text it applies to, the result within ``max_length``) before it is
  taken: what an author sends is then what every replica's delivery takes
  (:func:`epto.apps._ot.checked`), so no author waits for ever for an
  operation the others refuse.
* **Carets are anchored in the confirmed text**: :meth:`TextDocument.anchor`
  gives a caret of the local view as ``(version, position)`` in the
  confirmed text at ``version``, the same at every replica;
  :meth:`TextDocument.locate` brings such an anchor into this replica's view
  through what was applied since (an author's own operations carry its caret
  to their right, the others' leave it on their left) and the local pending
  edits. A caret sent before its author's edits reach the others is then
  moved by those edits exactly once.
* **A refused operation does not stop its author**: its edits are still
  pending, rebased over everything applied since; when its own operation
  comes back ``"stale"`` (an author silent for the horizon, or a first
  operation that the others outran) it sends them again against the present
  version. One refused as ``"too long"`` (the text would exceed
  ``max_length``) would be refused again: its author drops what is pending
  and its view becomes the group's text (a change with an empty ``op``, as
  after a restore).

Size: one state machine whose parts share every field and invariant: the
local view (pending edits, the operation in flight, its parts), the
replicated command that ends an operation in flight, the carets anchored in
the history, and the state transfer that must hold all of it.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import attrs

from ..rsm import StateMachine, replicated
from ._ot import Delete, Edit, Insert, Operation, apply, checked, transform

MAX_EDITS = 1024
"""Most edits one operation carries (what is pending beyond waits its turn)."""

MAX_INSERT = 65_536
"""Most code points one insert edit carries (a longer one is cut)."""

MAX_PARTS = 64
"""Most parts (events of the order) one operation travels in."""

MAX_PARTIAL = 1024
"""Most operations kept half received (one per author; the oldest is dropped)."""

MIN_PART_SIZE = 64
"""Smallest ``max_part_size`` (an edit of a few characters must fit)."""


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def _char_cost(char: str) -> int:
    """Bytes of one code point in a JSON string (``ensure_ascii``, as the
    command codec writes it)."""
    code = ord(char)
    if char in '"\\\b\f\n\r\t':
        return 2
    if code < 0x20:
        return 6
    if code < 0x80:
        return 1
    return 6 if code < 0x10000 else 12


def _cut(edit: Insert, room: int) -> list[Insert]:
    """``edit`` as inserts one after the other, each of at most
    :data:`MAX_INSERT` code points and, with ``room``, at most ``room``
    bytes as a JSON edit."""
    text, pos = edit.text, edit.pos
    # ["i",POS,"TEXT"]: 9 bytes, the position's digits and the text's; 3
    # more for the part's brackets and a comma.
    budget = None if room <= 0 else room - 12 - len(str(pos + len(text)))
    if len(text) <= MAX_INSERT and (budget is None or _json_size(text) - 2 <= budget):
        return [edit]
    out: list[Insert] = []
    plain = _json_size(text) - 2 == len(text)  # every code point one byte
    start = 0
    while start < len(text):
        limit = MAX_INSERT if budget is None else min(MAX_INSERT, budget)
        if plain:
            stop = min(len(text), start + limit)
        else:
            stop, used = start, 0
            limit_bytes = budget if budget is not None else 1 << 62
            while stop < len(text) and stop - start < MAX_INSERT:
                cost = _char_cost(text[stop])
                if used + cost > limit_bytes:
                    break
                used += cost
                stop += 1
        out.append(Insert(pos, text[start:stop]))
        pos += stop - start
        start = stop
    return out


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

    def __init__(
        self,
        author: int,
        *,
        horizon: int = 10_000,
        max_length: int = 10_000_000,
        max_part_size: int | None = None,
    ) -> None:
        if max_part_size is not None and max_part_size < MIN_PART_SIZE:
            raise ValueError(f"max_part_size must be at least {MIN_PART_SIZE}, not {max_part_size}")
        self.author = author
        self._horizon = horizon
        self._max_length = max_length
        self.max_part_size = max_part_size
        """Bytes of one part's edits as compact JSON (None: one part per operation)."""
        # Replicated state.
        self.text = ""
        self.version = 0
        self.floor = 0
        self._history: deque[Operation] = deque()
        self._authors: deque[int] = deque()
        """The author of each operation in the history."""
        self._refs: dict[int, tuple[int, int]] = {}
        """author -> (latest ref, version when heard)."""
        self._partial: dict[int, tuple[int, int, int, list[Any]]] = {}
        """author -> (seq, ref, parts, edits received) of an operation whose
        last part is still to come."""
        # Local state.
        self._pending: deque[Operation] = deque()
        self._view = ""
        """The confirmed text with the pending edits applied (kept, not
        recomputed: it is read for every page message and every caret)."""
        self._in_flight: tuple[int, int] | None = None
        """(seq, ref) of this author's operation in the total order."""
        self._seq = 0
        self._outbox: list[tuple[Any, ...]] = []
        self.changes: list[Change] = []
        """Changes of the local view since the caller last took them."""
        self.refused = 0

    # -- the local view ---------------------------------------------------------------

    @property
    def view(self) -> str:
        """What the local user sees: the confirmed text plus pending edits."""
        return self._view

    def local_edit(self, op: Operation) -> None:
        """An edit of the local view: shown at once, replicated in order.
        :class:`ValueError` (nothing changes) unless every edit lies within
        the text it applies to and the view stays within ``max_length``."""
        op = tuple(op)
        checked(len(self._view), op, self._max_length)
        self._view = apply(self._view, op)
        self._pending.append(op)
        self.changes.append(Change(op=op, remote=False))
        self._send_next()

    def _send_next(self) -> None:
        """Send what is pending as one operation (in parts that fit
        ``max_part_size``), unless one is in the order."""
        if self._in_flight is not None or not self._pending:
            return
        room = self.max_part_size or 0
        edits: list[Edit] = []
        for op in self._pending:
            for edit in op:
                edits.extend(_cut(edit, room) if isinstance(edit, Insert) else [edit])
        parts: list[list[list[Any]]] = [[]]
        size = 2  # the part's brackets
        taken = 0
        for edit in edits[:MAX_EDITS]:
            encoded = _encode((edit,))[0]
            cost = _json_size(encoded) + 1
            if room and parts[-1] and size + cost > room:
                if len(parts) == MAX_PARTS:
                    break
                parts.append([])
                size = 2
            parts[-1].append(encoded)
            size += cost
            taken += 1
        batch, rest = tuple(edits[:taken]), tuple(edits[taken:])
        self._pending = deque([batch, rest] if rest else [batch])
        self._seq += 1
        self._in_flight = (self._seq, self.version)
        if len(parts) == 1:
            self._outbox.append((self.author, self._seq, self.version, parts[0]))
        else:
            for index, part in enumerate(parts):
                self._outbox.append((self.author, self._seq, self.version, part, index, len(parts)))

    def anchor(self, pos: int) -> tuple[int, int]:
        """A caret ``pos`` of the local view as ``(version, position in the
        confirmed text at version)``: brought back through the pending edits
        (a caret inside pending text goes to where that text is inserted)."""
        pos = min(max(pos, 0), len(self.view))
        for op in reversed(self._pending):
            for edit in reversed(op):
                if isinstance(edit, Insert):
                    end = edit.pos + len(edit.text)
                    if pos >= end:
                        pos -= len(edit.text)
                    elif pos > edit.pos:
                        pos = edit.pos
                elif pos > edit.pos:
                    pos += edit.length
        return self.version, min(pos, len(self.text))

    def locate(self, version: int, pos: int, author: int) -> int:
        """Where the caret ``author`` anchored at ``(version, pos)``
        (:meth:`anchor`) is in the local view: moved through the operations
        applied since ``version`` (``author``'s own carry it to their right,
        the others' leave it on their left) and the pending edits (left).
        An anchor ahead of this replica, or older than the history, is only
        clamped to the view."""
        view = len(self.view)
        if not self.floor <= version <= self.version:
            return min(max(pos, 0), view)
        for index in range(version - self.floor, len(self._history)):
            own = self._authors[index] == author
            pos = transform_position(pos, self._history[index], stick_left=not own)
        for op in self._pending:
            pos = transform_position(pos, op, stick_left=True)
        return min(max(pos, 0), view)

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

    @property
    def max_length(self) -> int:
        """Longest text (code points): an operation that would exceed it is refused."""
        return self._max_length

    def take_outgoing(self) -> list[tuple[Any, ...]]:
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
    def edit(self, author: int, seq: int, ref: int, raw: Any, part: int = 0, parts: int = 1) -> str:
        """Apply one author's operation at its place in the total order (an
        operation in parts: at the place of its last part)."""
        for value in (author, seq, ref, part, parts):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError("author, seq, ref, part and parts are integers")
        if not 0 <= part < parts <= MAX_PARTS:
            raise ValueError(f"part {part} of {parts} (at most {MAX_PARTS} parts)")
        own = author == self.author and self._in_flight == (seq, ref)
        try:
            piece = _decode(raw, self._max_length)
        except ValueError:
            self._partial.pop(author, None)
            if own:
                self._drop_pending()  # refused alike everywhere: never answered otherwise
            raise
        if parts > 1:
            kept = self._partial.pop(author, None)
            if part == 0:
                kept = (seq, ref, parts, [])
            if kept is None or kept[:3] != (seq, ref, parts) or len(kept[3]) != part:
                self.refused += 1
                if own:
                    self._drop_pending()
                return "lost part"
            edits = kept[3] + list(raw)
            if len(edits) > MAX_EDITS:
                self.refused += 1
                if own:
                    self._drop_pending()
                return "too many edits"
            if part + 1 < parts:
                self._partial[author] = (seq, ref, parts, edits)
                while len(self._partial) > MAX_PARTIAL:
                    del self._partial[next(iter(self._partial))]
                return "part"
            op = _decode(edits, self._max_length)
        else:
            op = piece
            # An operation of its author's left unfinished (its start died
            # between parts) is never finished now.
            self._partial.pop(author, None)
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
                self._drop_pending()
            return "too long"
        self.text = text
        self.version += 1
        self._history.append(final)
        self._authors.append(author)
        self._refs[author] = (ref, self.version)
        self._collect()
        if own:
            # The local view already holds it in this form (the view is
            # rebuilt from the text all the same: it is what the group
            # agrees on, should the two ever differ).
            self._pending.popleft()
            self._in_flight = None
            view = self.text
            for pending in self._pending:
                view = apply(view, pending)
            self._view = view
            self._send_next()
        else:
            self._rebase_pending(final)
        return "ok"

    def _drop_pending(self) -> None:
        """This author's operation is refused everywhere and would be again:
        drop what is pending and show the group's text."""
        self._pending.clear()
        self._in_flight = None
        self._view = self.text
        self.changes.append(Change(op=(), remote=True))

    def _rebase_pending(self, remote: Operation) -> None:
        """Rebase the pending operations over ``remote`` (ordered before them),
        and report what the local view becomes."""
        incoming = remote
        rebased: deque[Operation] = deque()
        for op in self._pending:
            op2, incoming = transform(op, incoming, a_first=False)
            rebased.append(op2)
        self._pending = rebased
        # The same text as the confirmed one with the rebased edits (TP1).
        self._view = apply(self._view, incoming)
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
            self._authors.popleft()
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
                "authors": list(self._authors),
                "partial": {str(a): list(p) for a, p in self._partial.items()},
            }
        ).encode()

    def restore(self, state: bytes) -> None:
        """Replace the replicated state by a :meth:`snapshot`'s; a state
        that is not one raises :class:`ValueError` and changes nothing."""
        try:
            data = json.loads(state)
            text = data["text"]
            if not isinstance(text, str):
                raise TypeError("text is not a string")
            version, floor = int(data["version"]), int(data["floor"])
            history = deque(_decode(op, self._max_length) for op in data["history"])
            refs = {int(a): (int(r[0]), int(r[1])) for a, r in data["refs"].items()}
            authors = deque(int(a) for a in data.get("authors", [-1] * len(history)))
            partial = {}
            for a, (seq, ref, parts, edits) in data.get("partial", {}).items():
                _decode(edits, self._max_length)
                partial[int(a)] = (int(seq), int(ref), int(parts), list(edits))
        except (KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
            raise ValueError(f"not a text document's state: {exc!r}") from None
        if len(authors) != len(history) or not 0 <= floor <= version:
            raise ValueError("not a text document's state: inconsistent history")
        self.text, self.version, self.floor = text, version, floor
        self._history, self._refs, self._authors, self._partial = history, refs, authors, partial
        self._pending.clear()
        self._in_flight = None
        self._view = text
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
