"""The sans-IO part of the replicated editor's server (docs/editor.md): what
each browser page has seen and sends, and how its edits are rebased (the
other replicas' cursors: :mod:`epto.apps._presence`).

The server also tells each page whether its replica is ready (holds the
group's text; a page of a replica that is not is read only, and an edit it
sends anyway is not taken) and whether the replica holds edits not yet in the
group's order (``{"type": "state", "ready": ..., "unsaved": ...}``).

A page applies its own edits at once and keeps at most one of them
unacknowledged (the page's script, ``editor_static/index.html``). The server
numbers what it sends each page: every change pushed (``{"type": "change",
"rev": N, "edits": ...}``) and every acknowledgement of the page's own edit
(``{"type": "ack", "rev": N}``) takes the next revision. A page edit says the
revision it was made on (``base``); the server transforms it over the changes
pushed after ``base`` (ordered before it: the page had not seen them), which
gives it against the server's view, then hands it to the document. The page
does the mirror image: a change it receives is transformed over its
unacknowledged edits before it touches the textarea.

**A page's message is hostile input** (:func:`parse_page_message`): its size
is bounded before it is parsed, the parse catches everything it can raise
(deep nesting included), and every field is checked (types, where ``bool``
is not an ``int``; ranges; revisions). A message that fails is a
:class:`PageFault`, whose ``reason`` the server counts before it closes that
page's connection. The edit the server then takes is checked again, after
rebasing, against the local view (:meth:`epto.apps.text.TextDocument.local_edit`),
so that it is one every replica takes at delivery.
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs

from ._ot import Delete, Insert, Operation, apply, transform
from .text import MAX_EDITS, transform_position

KEEP = 10_000
"""Changes kept per page for rebasing (a page further behind is reset)."""

MAX_PAGE_MESSAGE = 4 * 1024 * 1024
"""Most characters of one page message (the WebSocket's own bound)."""

MAX_PAGE_EDITS = MAX_EDITS
"""Most edits one page message carries (the page sends one replace per
input event and merges what it buffers)."""

MAX_REBASE_WORK = 250_000
"""Most edit-by-edit transformations one page edit may cost to rebase (its
edits times the edits of the changes pushed since its revision): a page so
far behind with so large an edit is refused instead of stalling the replica."""

MAX_APPLY_WORK = 1 << 26
"""Most characters applying one page edit may copy (its edits times the
text's length: each edit copies the text, at this replica and at every
other): a page edit of many edits on a long text is refused instead of
stalling the group. A page sends one replace per input event; it merges
what it buffered into few edits."""

MAX_POSITION = 1 << 53
"""Largest number a page message may carry (a JavaScript safe integer)."""


class PageFault(ValueError):
    """A page message that is not one: ``reason`` (a short, stable word for
    counting) says what was wrong. The server closes that page's connection."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@attrs.frozen
class PageEdit:
    """``{"type": "edit", "base": REV, "edits": [...]}``, checked."""

    base: int
    op: Operation


@attrs.frozen
class PageCursor:
    """``{"type": "cursor", "base": REV, "pos": P, "end": E}``, checked."""

    base: int
    pos: int
    end: int


def _number(message: Mapping[str, Any], key: str, limit: int = MAX_POSITION) -> int:
    value = message.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PageFault("bad-field", f"{key} is not an integer")
    if not 0 <= value <= limit:
        raise PageFault("out-of-range", f"{key} {value} is outside [0, {limit}]")
    return value


def parse_page_message(raw: object, *, max_length: int = 10_000_000) -> PageEdit | PageCursor:
    """One page message, checked whole; :class:`PageFault` otherwise.

    ``raw`` is bounded (:data:`MAX_PAGE_MESSAGE`) before it is parsed; JSON
    that does not parse, or nests deeper than the parser goes, is a fault,
    not an exception out of here. Positions and lengths are within
    ``max_length`` (the document's), an edit's inserted text too."""
    if not isinstance(raw, str):
        raise PageFault("not-text")
    if len(raw) > MAX_PAGE_MESSAGE:
        raise PageFault("too-large", f"{len(raw)} characters")
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise PageFault("not-json", type(exc).__name__) from None
    if not isinstance(message, dict):
        raise PageFault("not-an-object")
    kind = message.get("type")
    if kind == "edit":
        base = _number(message, "base")
        try:
            op = decode(message.get("edits"), limit=MAX_PAGE_EDITS, max_length=max_length)
        except ValueError as exc:
            raise PageFault("bad-edits", str(exc)) from None
        return PageEdit(base, op)
    if kind == "cursor":
        base = _number(message, "base")
        return PageCursor(
            base, _number(message, "pos", max_length), _number(message, "end", max_length)
        )
    raise PageFault("unknown-type")


def encode(op: Operation) -> list[list[Any]]:
    """An operation as the page's JSON: ``["i", pos, text]``, ``["d", pos, n]``."""
    return [["i", e.pos, e.text] if isinstance(e, Insert) else ["d", e.pos, e.length] for e in op]


def decode(raw: Any, limit: int = 100, *, max_length: int | None = None) -> Operation:
    """A list of at most ``limit`` edits, checked: positions and deleted
    lengths are non-negative integers (``bool`` is not one), inserted texts
    strings; with ``max_length``, positions, lengths and the inserted text in
    all are at most ``max_length``."""
    if not isinstance(raw, list) or len(raw) > limit:
        raise ValueError(f"edits is a list of at most {limit}")
    bound = max_length if max_length is not None else 1 << 62
    inserted = 0
    out: list[Insert | Delete] = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 3 or item[0] not in ("i", "d"):
            raise ValueError("an edit is ['i', pos, text] or ['d', pos, length]")
        kind, pos, arg = item
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= bound:
            raise ValueError("position")
        if kind == "i" and isinstance(arg, str):
            inserted += len(arg)
            if inserted > bound:
                raise ValueError("inserted text above the longest text")
            out.append(Insert(pos, arg))
        elif (
            kind == "d" and isinstance(arg, int) and not isinstance(arg, bool) and 0 <= arg <= bound
        ):
            out.append(Delete(pos, arg))
        else:
            raise ValueError("edit argument")
    return tuple(out)


def check_work(op: Operation, length: int) -> None:
    """:class:`PageFault` if applying ``op`` to a text of ``length`` would
    copy more than :data:`MAX_APPLY_WORK` characters."""
    if len(op) > 1 and len(op) * (length + 1) > MAX_APPLY_WORK:
        raise PageFault("too-much-work", f"{len(op)} edits on a text of {length}")


class StalePage(ValueError):
    """A page edit made on a revision the server no longer keeps: reset it."""


class PageSession:
    """What the server sent one page, to rebase the page's edits."""

    def __init__(self) -> None:
        self.rev = 0
        self._floor = 0
        """Page edits made on a revision below this are refused (a reset)."""
        self._sent: deque[tuple[int, Operation]] = deque()

    def reset(self, text: str) -> dict[str, Any]:
        """The whole text (on connection, or after a state transfer)."""
        self.rev += 1
        self._floor = self.rev
        self._sent.clear()
        return {"type": "reset", "rev": self.rev, "text": text}

    def push(self, op: Operation) -> dict[str, Any]:
        """A change of the server's view that the page did not make."""
        self.rev += 1
        self._sent.append((self.rev, op))
        return {"type": "change", "rev": self.rev, "edits": encode(op)}

    def behind(self) -> int:
        """Changes pushed the page has not built on yet (at :data:`KEEP`, reset it)."""
        return len(self._sent)

    def receive(self, base: int, op: Operation) -> tuple[Operation, dict[str, Any]]:
        """The page's edit made on ``base``, rebased on the server's view,
        and its acknowledgement. Raises :class:`StalePage` (made before a
        reset) or :class:`PageFault` (a revision never sent, or too much to
        rebase: :data:`MAX_REBASE_WORK`)."""
        self._check(base)
        work = len(op) * sum(len(change) for rev, change in self._sent if rev > base)
        if work > MAX_REBASE_WORK:
            raise PageFault("too-far-behind", f"{work} transformations to rebase")
        for rev, change in self._sent:
            if rev > base:
                op, _ = transform(op, change, a_first=False)
        while self._sent and self._sent[0][0] <= base:
            self._sent.popleft()
        self.rev += 1
        return op, {"type": "ack", "rev": self.rev}

    def position(self, base: int, pos: int) -> int:
        """A caret position the page reported at ``base``, in the server's view."""
        self._check(base)
        for rev, change in self._sent:
            if rev > base:
                pos = transform_position(pos, change)
        return pos

    def _check(self, base: int) -> None:
        if not isinstance(base, int) or isinstance(base, bool) or base > self.rev:
            raise PageFault("bad-revision", f"revision {base!r} was never sent (last {self.rev})")
        if base < self._floor:
            raise StalePage(f"revision {base} is not in [{self._floor}, {self.rev}]")


_WORDS = ("epto ", "total ", "order ", "text ", "hello ", "replica ", "a ", "\n")


def random_edit(rng: random.Random, text: str) -> Operation:
    """A word typed or a few characters deleted at a random place (the
    server's bot)."""
    if len(text) > 40 and rng.random() < 0.3:
        pos = rng.randrange(len(text) - 1)
        return (Delete(pos, rng.randint(1, min(6, len(text) - pos))),)
    return (Insert(rng.randint(0, len(text)), rng.choice(_WORDS)),)


def color_of(author: int) -> str:
    """A color per author, stable and well spread on the hue circle."""
    return f"hsl({(author * 137) % 360}, 70%, 45%)"


class PageModel:
    """The page's side of the protocol (what ``index.html`` does), for
    WebSocket clients that are not browsers: benchmarks, tests, bots."""

    def __init__(self) -> None:
        self.text = ""
        self.rev = 0
        self.inflight: Operation | None = None
        self.buffer: Operation = ()
        self.ready = False
        """The server's replica holds the group's text (``state`` messages)."""
        self.unsaved = False
        """The server's replica holds edits not yet in the group's order."""
        self.not_sent: list[str] = []
        """The page's text each time a reset dropped edits the server had not
        acknowledged (the page shows it as *not sent*)."""

    def local(self, op: Operation) -> dict[str, Any] | None:
        """A local edit: applied at once; the message to send, if any."""
        self.text = apply(self.text, op)
        if self.inflight is None:
            self.inflight = tuple(op)
            return {"type": "edit", "base": self.rev, "edits": encode(self.inflight)}
        self.buffer += tuple(op)
        return None

    def receive(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A message from the server; the message to send in return, if any."""
        kind = message.get("type")
        if kind == "state":
            self.ready, self.unsaved = bool(message["ready"]), bool(message["unsaved"])
        elif kind == "reset":
            if not self.synced and self.text != message["text"]:
                self.not_sent.append(self.text)
            self.rev, self.text = message["rev"], message["text"]
            self.inflight, self.buffer = None, ()
        elif kind == "ack":
            self.rev = message["rev"]
            self.inflight = None
            if self.buffer:
                self.inflight, self.buffer = self.buffer, ()
                return {"type": "edit", "base": self.rev, "edits": encode(self.inflight)}
        elif kind == "change":
            self.rev = message["rev"]
            change = decode(message["edits"], limit=1 << 20)
            if self.inflight is not None:
                self.inflight, change = transform(self.inflight, change, a_first=False)
            if self.buffer:
                self.buffer, change = transform(self.buffer, change, a_first=False)
            self.text = apply(self.text, change)
        return None

    @property
    def synced(self) -> bool:
        """Nothing of this page's edits waits for the server's acknowledgement."""
        return self.inflight is None and not self.buffer
