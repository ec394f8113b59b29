"""Where token-ring members listen: the address book frame of the TCP driver.

The sans-IO token ring names members by process id only; the TCP driver
(:mod:`.trio_tcp`) maps ids to ``"host:port"``. A node learns addresses from
one frame kind of its own, ``tcp-addresses`` (code 32), a list of
``(pid, address)`` pairs:

* every outgoing stream starts with one: the sender's own listening address
  (the *hello*), then the addresses it knows of the current members;
* a node that installs a configuration with members it did not have before
  sends its book to every member.

A joining process only knows its contacts: their hellos and books tell it
where everyone else is, and its hello tells every member where it listens.
Frames go through the group's :class:`epto.FrameCodec`, so under a group key
the book is sealed and bound to its receiver like every other frame.
"""

from __future__ import annotations

import struct

import attrs

from epto import (
    FrameKind,
    FrameRegistry,
    Limits,
    LocalProtocolError,
    ProcessId,
    Reader,
    RemoteProtocolError,
)

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
