"""The sans-IO part of the replicated editor's server (docs/editor.md): what
each browser page has seen, how its edits are rebased, and where the other
replicas' cursors are.

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
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Iterable
from typing import Any

import attrs

from .._codec import FrameCodec
from .._errors import LocalProtocolError, RemoteProtocolError
from .._frames import FrameKind, FrameRegistry, Reader
from .._limits import Limits
from .._seal import GroupKey, GroupSealer
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


PRESENCE_CODE = 48
"""Frame kind of a presence datagram (docs/wire-format.md)."""

MAX_NAME = 160
"""Longest name a presence datagram carries (bytes of UTF-8: 40 characters)."""

MAX_COLOR = 20
"""Longest color (bytes of ASCII)."""

_CARET = struct.Struct(">QQ")


@attrs.frozen
class PresenceNote:
    """What a presence datagram says: its sender's name and color, and its
    caret (``pos``) and selection end in the sender's view. The author is
    the frame's sender (authenticated under a group key)."""

    name: str
    color: str
    pos: int
    end: int


def _encode_note(note: PresenceNote, limits: Limits) -> bytes:
    name = note.name[:40].encode("utf-8")
    color = note.color.encode("ascii", "replace")[:MAX_COLOR]
    try:
        caret = _CARET.pack(note.pos, note.end)
    except struct.error:
        raise LocalProtocolError(f"caret {note.pos}, {note.end} out of range") from None
    return caret + bytes((len(name),)) + name + bytes((len(color),)) + color


def _decode_note(reader: Reader, limits: Limits) -> PresenceNote:
    pos, end = reader.u64(), reader.u64()
    name = reader.blob(reader.u8(), MAX_NAME, "name")
    color = reader.blob(reader.u8(), MAX_COLOR, "color")
    try:
        return PresenceNote(name.decode("utf-8"), color.decode("ascii"), pos, end)
    except UnicodeDecodeError:
        raise RemoteProtocolError("a name or color that is not text", fault="bad-value") from None


PRESENCE_KIND = FrameKind(
    code=PRESENCE_CODE,
    name="editor-presence",
    type=PresenceNote,
    encode=_encode_note,
    decode=_decode_note,
)


def presence_key(group_key: GroupKey) -> GroupKey:
    """The key presence datagrams are sealed with: derived from the group
    key (HKDF-SHA256, info ``"epto-editor-presence-v1"``), so that their
    nonces, counted apart from the group's frames, never meet those frames'
    under one key; same id and cipher."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"epto-editor-presence-v1")
    return GroupKey(
        key_id=group_key.key_id, secret=hkdf.derive(group_key.secret), cipher=group_key.cipher
    )


def presence_codec(group: int, sealer: GroupSealer | None = None) -> FrameCodec:
    """The codec of presence datagrams: frames of kind ``editor-presence``
    of ``group``; sealed (and only sealed ones accepted) with a ``sealer``
    built on :func:`presence_key`."""
    return FrameCodec(group=group, registry=FrameRegistry((PRESENCE_KIND,)), sealer=sealer)


class Presence:
    """The other replicas' cursors, moved along with the changes applied here.

    Datagrams are frames of the group (:func:`presence_codec`), sealed under
    :func:`presence_key` when the group has a key. Only ``authors`` (the
    replicas this one exchanges presence with) are heard: a datagram that
    does not decode (not a presence frame, another group, unsealed or forged
    in a sealed group, replayed), or from anyone else, is counted in
    ``refused`` and changes nothing, so what the network sends keeps at most
    one cursor per known replica.
    """

    def __init__(
        self,
        own: int,
        authors: Iterable[int],
        ttl: float = 5.0,
        *,
        codec: FrameCodec | None = None,
    ) -> None:
        self.own = own
        self.authors = frozenset(authors) - {own}
        self.ttl = ttl
        self.codec = codec if codec is not None else presence_codec(0)
        self.cursors: dict[int, Cursor] = {}
        self.refused = 0

    def datagram(self, name: str, color: str, pos: int, end: int) -> bytes:
        """This replica's presence datagram (its caret and selection end)."""
        return self.codec.encode(self.own, PresenceNote(name, color, pos, end))[0]

    def heard(self, data: bytes, now: float, length: int) -> bool:
        """A presence datagram; whether it moved a cursor (a refused one does not)."""
        frame = self.codec.receive(data, now)  # counts its fault in codec.rejected
        if frame is None or frame.sender not in self.authors:
            self.refused += 1
            return False
        author, note = frame.sender, frame.message
        self.cursors[author] = Cursor(
            note.name[:40],
            note.color,
            min(note.pos, length),
            min(note.end, length),
            now,
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
