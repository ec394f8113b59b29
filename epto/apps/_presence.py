"""Presence of the replicated editor (docs/editor.md, *Presence*): where the
other replicas' carets are, in datagrams outside the total order.

Rules:

* **A datagram is a frame of the group** (kind 48 ``editor-presence``,
  docs/wire-format.md), sealed under :func:`presence_key` when the group
  has a key. The author is the frame's sender.
* **A caret travels as an anchor**: a version and a position in the
  confirmed text at that version (:meth:`epto.apps.text.TextDocument.anchor`),
  the same text at every replica; each receiver brings it into its own view
  (:meth:`epto.apps.text.TextDocument.locate`) whenever it shows it, so a
  caret is moved by its author's edits exactly once.
* **Only known senders move cursors**: the configured replicas and the
  group's members, and in a sealed group any sender whose datagram opens;
  at most ``max_cursors``. Anything else is counted and changes nothing.
* **Addresses are learned**, bounded and expiring: a datagram's source
  address for its author, and up to :data:`MAX_GOSSIP` addresses each
  datagram carries (IPv4 literals only: never a DNS lookup).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .._errors import RemoteProtocolError
from ..wire._codec import FrameCodec
from ..wire._frames import FrameKind, FrameRegistry, Reader
from ..wire._limits import Limits
from ..wire._seal import GroupKey, GroupSealer


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
        """The addresses given (a host name too: the operator's, resolved
        when sent to; only IPv4 literals are told to others)."""
        for pid, address in (peers or {}).items():
            host, _, port = address.rpartition(":")
            if pid != own and host and port.isdigit() and 0 < int(port) < 65536:
                self.configured[pid] = (host.strip("[]"), int(port))
        self.learned: dict[int, tuple[tuple[str, int], float, bool]] = {}
        """author -> (address, when it expires, heard directly from it)."""
        self._told = 0
        """Where the next datagram's addresses start."""
        self.locate: Locate | None = None
        """Brings an anchored caret into the local view (the server's
        document's :meth:`~epto.apps.text.TextDocument.locate`)."""

    def datagram(self, name: str, color: str, version: int, pos: int, end: int) -> bytes:
        """This replica's presence datagram: its caret and selection end
        anchored at ``version``, and up to :data:`MAX_GOSSIP` of the
        addresses it was given or heard from, the next ones each time (so
        that every one of them is told, however many there are)."""
        told = [
            (p, f"{h}:{port}")
            for p, (h, port) in self.configured.items()
            if parse_address(f"{h}:{port}") is not None
        ]
        told += [(p, f"{a[0]}:{a[1]}") for p, (a, _, direct) in self.learned.items() if direct]
        if len(told) > MAX_GOSSIP:
            start = self._told % len(told)
            self._told += MAX_GOSSIP
            told = (told[start:] + told[:start])[:MAX_GOSSIP]
        note = PresenceNote(name, color, version, pos, end, tuple(told))
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
