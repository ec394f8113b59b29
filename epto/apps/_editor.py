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

import ipaddress
import json
import random
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .._codec import FrameCodec
from .._errors import RemoteProtocolError
from .._frames import FrameKind, FrameRegistry, Reader
from .._limits import Limits
from .._seal import GroupKey, GroupSealer
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


@attrs.define
class Cursor:
    """Another replica's caret (``pos``) and selection end, anchored in the
    confirmed text at ``version`` (:meth:`epto.apps.text.TextDocument.anchor`)."""

    name: str
    color: str
    version: int
    pos: int
    end: int
    seen: float


PRESENCE_CODE = 48
"""Frame kind of a presence datagram (docs/wire-format.md)."""

MAX_NAME = 160
"""Longest name a presence datagram carries (bytes of UTF-8: 40 characters)."""

MAX_COLOR = 20
"""Longest color (bytes of ASCII)."""

MAX_GOSSIP = 8
"""Most presence addresses of others one datagram carries."""

MAX_ADDRESS = 21
"""Longest address a datagram carries (``255.255.255.255:65535``)."""

_CARET = struct.Struct(">QQQ")
_U64 = (1 << 64) - 1


@attrs.frozen
class PresenceNote:
    """What a presence datagram says: its sender's name and color, its caret
    (``pos``) and selection end in the confirmed text at ``version`` (an
    anchor, the same at every replica), and up to :data:`MAX_GOSSIP`
    presence addresses of others the sender heard from (``peers``: id and
    ``IPv4:port``). The author is the frame's sender (authenticated under a
    group key)."""

    name: str
    color: str
    version: int
    pos: int
    end: int
    peers: tuple[tuple[int, str], ...] = ()


def _clamp64(value: int) -> int:
    return min(max(int(value), 0), _U64)


def _encode_note(note: PresenceNote, limits: Limits) -> bytes:
    name = note.name[:40].encode("utf-8")
    color = note.color.encode("ascii", "replace")[:MAX_COLOR]
    out = [
        _CARET.pack(_clamp64(note.version), _clamp64(note.pos), _clamp64(note.end)),
        bytes((len(name),)),
        name,
        bytes((len(color),)),
        color,
    ]
    peers = [(p, a.encode("ascii")) for p, a in note.peers[:MAX_GOSSIP]]
    peers = [(p, a) for p, a in peers if len(a) <= MAX_ADDRESS and 0 <= p <= _U64]
    out.append(bytes((len(peers),)))
    for pid, address in peers:
        out += [pid.to_bytes(8, "big"), bytes((len(address),)), address]
    return b"".join(out)


def parse_address(text: str) -> tuple[str, int] | None:
    """``IPv4:port`` as ``(host, port)``; None for anything else (names are
    not resolved: an address from the network never costs a DNS lookup),
    and for addresses presence is never sent to (unspecified, multicast,
    broadcast, port 0)."""
    host, _, port = text.rpartition(":")
    try:
        ip = ipaddress.IPv4Address(host)
        number = int(port)
    except ValueError:
        return None
    if not 0 < number < 65536 or ip.is_unspecified or ip.is_multicast or ip == _BROADCAST:
        return None
    return str(ip), number


_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def _decode_note(reader: Reader, limits: Limits) -> PresenceNote:
    version, pos, end = reader.u64(), reader.u64(), reader.u64()
    name = reader.blob(reader.u8(), MAX_NAME, "name")
    color = reader.blob(reader.u8(), MAX_COLOR, "color")
    count = reader.u8()
    if count > MAX_GOSSIP:
        raise RemoteProtocolError(f"{count} addresses, above {MAX_GOSSIP}", fault="oversized")
    peers = []
    for _ in range(count):
        pid = reader.u64()
        address = reader.blob(reader.u8(), MAX_ADDRESS, "address")
        text = address.decode("ascii", "replace")
        if parse_address(text) is None:
            raise RemoteProtocolError("an address that is not IPv4:port", fault="bad-value")
        peers.append((pid, text))
    try:
        return PresenceNote(
            name.decode("utf-8"), color.decode("ascii"), version, pos, end, tuple(peers)
        )
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


Locate = Callable[[int, int, int], int]
"""``locate(version, pos, author)``: an anchor in the local view
(:meth:`epto.apps.text.TextDocument.locate`)."""


class Presence:
    """The other replicas' cursors, and where to send this one's.

    Datagrams are frames of the group (:func:`presence_codec`), sealed under
    :func:`presence_key` when the group has a key. Only ``authors`` (the
    replicas this one exchanges presence with, and the group's members, as
    the server updates them) are heard, and with ``sealed`` (a sealed group:
    the seal proves the sender holds the group's key) any sender, up to
    ``max_cursors`` cursors. A datagram that does not decode (not a presence
    frame, another group, unsealed or forged in a sealed group, replayed), or
    from anyone else, is counted in ``refused`` and changes nothing.

    **Addresses are learned**: ``peers`` (configured) are always sent to;
    the source address of a datagram heard is kept for its author (unless
    configured) while it keeps sending (``peer_ttl``); a datagram carries up
    to :data:`MAX_GOSSIP` addresses its sender heard directly, and an
    address so told is tried for ``peer_ttl`` (it is kept only if its author
    is then heard from it). At most ``max_peers`` learned addresses. So a
    replica that joins later and knows one presence address gets every
    cursor, and everyone gets its.
    """

    def __init__(
        self,
        own: int,
        authors: Iterable[int],
        ttl: float = 5.0,
        *,
        codec: FrameCodec | None = None,
        peers: Mapping[int, str] | None = None,
        sealed: bool = False,
        max_cursors: int = 64,
        max_peers: int = 64,
        peer_ttl: float = 30.0,
    ) -> None:
        self.own = own
        self.authors = frozenset(authors) - {own}
        self.ttl = ttl
        self.codec = codec if codec is not None else presence_codec(0)
        self.sealed = sealed
        self.max_cursors = max_cursors
        self.max_peers = max_peers
        self.peer_ttl = peer_ttl
        self.cursors: dict[int, Cursor] = {}
        self.refused = 0
        self.configured: dict[int, tuple[str, int]] = {}
        for pid, address in (peers or {}).items():
            parsed = parse_address(address)
            if pid != own and parsed is not None:
                self.configured[pid] = parsed
        self.learned: dict[int, tuple[tuple[str, int], float, bool]] = {}
        """author -> (address, when it expires, heard directly from it)."""
        self.locate: Locate | None = None
        """Brings an anchored caret into the local view (the server's
        document's :meth:`~epto.apps.text.TextDocument.locate`)."""

    def datagram(self, name: str, color: str, version: int, pos: int, end: int) -> bytes:
        """This replica's presence datagram: its caret and selection end
        anchored at ``version``, and addresses it heard from."""
        told = [(p, f"{h}:{port}") for p, (h, port) in self.configured.items()]
        told += [(p, f"{a[0]}:{a[1]}") for p, (a, _, direct) in self.learned.items() if direct]
        note = PresenceNote(name, color, version, pos, end, tuple(told[:MAX_GOSSIP]))
        return self.codec.encode(self.own, note)[0]

    def _accepts(self, author: int) -> bool:
        if author == self.own:
            return False
        if author in self.authors or author in self.cursors:
            return True
        return self.sealed and len(self.cursors) < self.max_cursors

    def heard(self, data: bytes, now: float, source: tuple[str, int] | None = None) -> bool:
        """A presence datagram (from ``source``); whether it moved a cursor
        (a refused one does not)."""
        frame = self.codec.receive(data, now)  # counts its fault in codec.rejected
        if frame is None or not self._accepts(frame.sender):
            self.refused += 1
            return False
        author, note = frame.sender, frame.message
        self.cursors[author] = Cursor(
            note.name[:40], note.color, note.version, note.pos, note.end, now
        )
        if source is not None and author not in self.configured:
            address = parse_address(f"{source[0]}:{source[1]}")
            if address is not None and (
                author in self.learned or len(self.learned) < self.max_peers
            ):
                self.learned[author] = (address, now + self.peer_ttl, True)
        for pid, text in note.peers:
            if pid == self.own or pid in self.configured or pid in self.learned:
                continue
            if not self._accepts(pid) or len(self.learned) >= self.max_peers:
                continue
            address = parse_address(text)
            if address is not None:
                self.learned[pid] = (address, now + self.peer_ttl, False)
        return True

    def addresses(self) -> list[tuple[str, int]]:
        """Where to send this replica's datagrams: configured and learned."""
        out = dict(self.configured)
        for pid, (address, _, _) in self.learned.items():
            out.setdefault(pid, address)
        return list(dict.fromkeys(out.values()))

    def expire(self, now: float) -> bool:
        """Forget the cursors not heard for ``ttl`` seconds and the learned
        addresses past ``peer_ttl``; whether a cursor was forgotten."""
        gone = [a for a, c in self.cursors.items() if now - c.seen > self.ttl]
        for author in gone:
            del self.cursors[author]
        for pid in [p for p, (_, until, _) in self.learned.items() if until < now]:
            del self.learned[pid]
        return bool(gone)

    def message(self) -> dict[str, Any]:
        """The cursors for the pages, each brought into the local view by
        :attr:`locate` (without it: the anchors' positions as they are)."""
        locate = self.locate
        cursors = []
        for author, c in sorted(self.cursors.items()):
            pos, end = c.pos, c.end
            if locate is not None:
                pos, end = locate(c.version, pos, author), locate(c.version, end, author)
            cursors.append(
                {"author": author, "name": c.name, "color": c.color, "pos": pos, "end": end}
            )
        return {"type": "presence", "cursors": cursors}


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
