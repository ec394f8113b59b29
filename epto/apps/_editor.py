"""The sans-IO part of the replicated editor's server (docs/editor.md): what
each browser page has seen, how its edits are rebased, and where the other
replicas' cursors are.

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
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from typing import Any

import attrs

from ._ot import Delete, Insert, Operation, apply, transform
from .text import transform_position

KEEP = 10_000
"""Changes kept per page for rebasing (a page further behind is reset)."""


def encode(op: Operation) -> list[list[Any]]:
    """An operation as the page's JSON: ``["i", pos, text]``, ``["d", pos, n]``."""
    return [["i", e.pos, e.text] if isinstance(e, Insert) else ["d", e.pos, e.length] for e in op]


def decode(raw: Any, limit: int = 100) -> Operation:
    """A page's edits (a list of at most ``limit``), checked."""
    if not isinstance(raw, list) or len(raw) > limit:
        raise ValueError("edits is a list")
    out: list[Insert | Delete] = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 3 or item[0] not in ("i", "d"):
            raise ValueError("an edit is ['i', pos, text] or ['d', pos, length]")
        kind, pos, arg = item
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise ValueError("position")
        if kind == "i" and isinstance(arg, str):
            out.append(Insert(pos, arg))
        elif kind == "d" and isinstance(arg, int) and not isinstance(arg, bool) and arg >= 0:
            out.append(Delete(pos, arg))
        else:
            raise ValueError("edit argument")
    return tuple(out)


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
        and its acknowledgement. Raises :class:`StalePage`."""
        self._check(base)
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
        if not isinstance(base, int) or not self._floor <= base <= self.rev:
            raise StalePage(f"revision {base} is not in [{self._floor}, {self.rev}]")


@attrs.define
class Cursor:
    """Another replica's caret (``pos``) and selection end, in this replica's view."""

    name: str
    color: str
    pos: int
    end: int
    seen: float


class Presence:
    """The other replicas' cursors, moved along with the changes applied here.

    Only ``authors`` (the replicas this one exchanges presence with) are
    heard: a datagram from anyone else, or one that is not a presence
    message, is counted in ``refused`` and changes nothing, so what the
    network sends keeps at most one cursor per known replica.
    """

    def __init__(self, own: int, authors: Iterable[int], ttl: float = 5.0) -> None:
        self.own = own
        self.authors = frozenset(authors) - {own}
        self.ttl = ttl
        self.cursors: dict[int, Cursor] = {}
        self.refused = 0

    def heard(self, data: bytes, now: float, length: int) -> bool:
        """A presence datagram; whether it moved a cursor (a refused one does not)."""
        try:
            message = json.loads(data)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self.refused += 1
            return False
        author, pos, end = message.get("author"), message.get("pos"), message.get("end")
        name, color = message.get("name"), message.get("color")
        if (
            not all(type(v) is int for v in (author, pos, end))
            or author not in self.authors
            or not isinstance(name, str)
            or not isinstance(color, str)
        ):
            self.refused += 1
            return False
        assert isinstance(author, int) and isinstance(pos, int) and isinstance(end, int)
        self.cursors[author] = Cursor(
            name[:40], color[:20], min(max(pos, 0), length), min(max(end, 0), length), now
        )
        return True

    def moved(self, op: Operation) -> None:
        """The local view changed by ``op``: the cursors follow the text."""
        for cursor in self.cursors.values():
            cursor.pos = transform_position(cursor.pos, op, stick_left=True)
            cursor.end = transform_position(cursor.end, op, stick_left=True)

    def expire(self, now: float) -> bool:
        """Forget the cursors not heard for ``ttl`` seconds; whether any was."""
        gone = [a for a, c in self.cursors.items() if now - c.seen > self.ttl]
        for author in gone:
            del self.cursors[author]
        return bool(gone)

    def message(self) -> dict[str, Any]:
        return {
            "type": "presence",
            "cursors": [
                {"author": a, "name": c.name, "color": c.color, "pos": c.pos, "end": c.end}
                for a, c in sorted(self.cursors.items())
            ],
        }


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
        if kind == "reset":
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
        return self.inflight is None and not self.buffer
