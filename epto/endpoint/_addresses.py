"""Where token-ring members listen: the address book frame and the directory.

The sans-IO token ring names members by process id only; its endpoint
(:class:`epto.endpoint.TokenRingEndpoint`) maps ids to ``"host:port"``. A node learns addresses from
one frame kind of its own, ``tcp-addresses`` (code 32), a list of
``(pid, address)`` pairs:

* every outgoing stream starts with two (the *hello*): the first carries
  only the sender's own listening address, so that it is small (at most 318
  bytes sealed; the receiver accepts at most ``first_frame_limit`` bytes
  before a frame of the stream authenticated), the second the addresses it
  knows of the current members;
* a node that installs a configuration with members it did not have before
  sends its book to every member.

A joining process only knows its contacts: their hellos and books tell it
where everyone else is, and its hello tells every member where it listens.
Frames go through the group's :class:`epto.FrameCodec`, so under a group key
the book is sealed and bound to its receiver like every other frame.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterable

import attrs

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import ProcessId
from ..wire._frames import FrameKind, FrameRegistry, Reader
from ..wire._limits import Limits
from ._config import parse_host_port

ADDRESSES_CODE = 32
"""Frame kind of the address book (16..31 are the token ring's own kinds)."""

MAX_ADDRESS = 255
"""Longest address (bytes of ASCII ``host:port``)."""

MAX_ENTRIES = 1024
"""Most entries one book frame carries."""

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


@attrs.frozen(kw_only=True, slots=True)
class AddressBook:
    """``(pid, "host:port")`` pairs; the sender's own entry says where it listens."""

    entries: tuple[tuple[ProcessId, str], ...]


def _encode(message: AddressBook, limits: Limits) -> bytes:
    entries = message.entries
    if len(entries) > MAX_ENTRIES:
        raise LocalProtocolError(f"{len(entries)} addresses exceed {MAX_ENTRIES}")
    parts = [_U16.pack(len(entries))]
    for pid, address in entries:
        raw = address.encode("ascii", "strict") if address.isascii() else b""
        if not raw or len(raw) > MAX_ADDRESS:
            raise LocalProtocolError(f"address {address!r} must be 1-{MAX_ADDRESS} ASCII bytes")
        try:
            parts.append(_U64.pack(pid))
        except struct.error:
            raise LocalProtocolError(f"process id {pid!r} out of range") from None
        parts.append(bytes((len(raw),)) + raw)
    return b"".join(parts)


def _decode(reader: Reader, limits: Limits) -> AddressBook:
    n = reader.count(2, MAX_ENTRIES, 10, "addresses")
    entries = []
    for _ in range(n):
        pid = reader.u64()
        raw = reader.blob(reader.u8(), MAX_ADDRESS, "address")
        if not raw or not raw.isascii():
            raise RemoteProtocolError("an address must be ASCII", fault="bad-address")
        entries.append((pid, raw.decode("ascii")))
    return AddressBook(entries=tuple(entries))


ADDRESSES_KIND = FrameKind(
    code=ADDRESSES_CODE, name="tcp-addresses", type=AddressBook, encode=_encode, decode=_decode
)


def with_addresses(registry: FrameRegistry) -> FrameRegistry:
    """``registry`` with the address book kind added."""
    registry.register(ADDRESSES_KIND)
    return registry


class Directory:
    """Where this node reaches each process, and when to tell the others.

    Sans-IO: the TCP node feeds it what it learns (its configuration, books
    received, :meth:`set`) and sends what it says. Rules: a sender's entry
    about itself replaces what was known (the sender knows where it listens);
    entries about third parties only fill gaps; this node's own entry is never
    taken from others.
    """

    def __init__(self, me: ProcessId, addresses: dict[ProcessId, str]) -> None:
        self.me = me
        self.addresses = addresses
        self.advertised = ""
        """This node's own address, as announced in its books."""
        self.rejected = 0
        """Entries refused (not ``host:port``)."""
        self._instance = -2
        self._stale = True
        self._known: frozenset[ProcessId] = frozenset()

    def set(self, pid: ProcessId, address: str) -> None:
        self._stale |= pid not in self.addresses
        self.addresses[pid] = address

    def learn(self, sender: ProcessId, book: AddressBook, peer_host: Callable[[], str]) -> None:
        """Take in ``sender``'s book; ``peer_host()`` is the host the
        connection comes from, which replaces an unspecified host (``0.0.0.0``)
        in the sender's own entry."""
        for pid, address in book.entries:
            if pid == self.me or (pid != sender and pid in self.addresses):
                continue
            try:
                host, port = parse_host_port(address)
            except LocalProtocolError:
                self.rejected += 1
                continue
            if pid == sender and host in ("0.0.0.0", "::", ""):
                with contextlib.suppress(OSError, IndexError):
                    address = join_host_port(peer_host(), port)
            self.set(pid, address)

    def book_for(self, dest: ProcessId, members: Iterable[ProcessId]) -> AddressBook:
        """This node's book for ``dest``: its own address first, then those
        it knows of ``members``."""
        entries = [(self.me, self.advertised)]
        entries += [
            (p, self.addresses[p])
            for p in members
            if p != dest and p != self.me and p in self.addresses
        ]
        return AddressBook(entries=tuple(entries))

    def to_tell(self, instance: int, members: Iterable[ProcessId]) -> list[ProcessId]:
        """The members to send this node's book to now: all those it can
        reach, when it can reach members of the view it could not reach
        before (a configuration with new members, or new addresses); none
        otherwise. The exchange ends once every member knows every address."""
        if instance == self._instance and not self._stale:
            return []
        self._instance = instance
        self._stale = False
        known = frozenset(p for p in members if p in self.addresses and p != self.me)
        gained = not known <= self._known
        self._known = known
        return sorted(known) if gained else []


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
