"""A minimal binary ball codec used by the socket drivers until the library's
frame format (header, kinds, sealing) is available; the drivers only see the
:class:`~epto.transports._common.Codec` protocol, so replacing it touches no
driver.

Layout (network byte order)::

    header  magic "EPTi" | version u8 | kind u8 | sender u64 | count u32
    entry   source u64 | seq u64 | ts i64 | ttl u16 | payload u32 | sig u16
            | payload bytes | signature bytes

Every length and count is checked against the datagram and the limits before
anything is allocated; any refusal is an :class:`epto.RemoteProtocolError`
whose ``fault`` names the reason.
"""

from __future__ import annotations

import struct

from epto import Ball, BallEntry, Event, EventId, ProcessId, RemoteProtocolError

MAGIC = b"EPTi"
VERSION = 1
KIND_BALL = 1
_HEADER = struct.Struct("!4sBBQI")
_ENTRY = struct.Struct("!QQqHIH")
HEADER_SIZE = _HEADER.size
ENTRY_OVERHEAD = _ENTRY.size


class InterimCodec:
    """Encodes balls into datagrams of at most ``max_datagram`` bytes."""

    def __init__(
        self,
        *,
        max_datagram: int = 60_000,
        max_entries: int = 4096,
        max_payload: int = 65_535,
    ) -> None:
        self.max_datagram = max_datagram
        self.max_entries = max_entries
        self.max_payload = max_payload

    def encode(self, sender: ProcessId, ball: Ball) -> list[bytes]:
        datagrams: list[bytes] = []
        parts: list[bytes] = []
        size = HEADER_SIZE
        count = 0
        limit = self.max_datagram
        pack = _ENTRY.pack
        for (source, seq), (event, ttl) in ball.items():
            payload, signature = event.payload, event.signature
            entry = pack(source, seq, event.ts, ttl, len(payload), len(signature))
            entry_size = len(entry) + len(payload) + len(signature)
            if count and (size + entry_size > limit or count >= self.max_entries):
                datagrams.append(
                    _HEADER.pack(MAGIC, VERSION, KIND_BALL, sender, count) + b"".join(parts)
                )
                parts, size, count = [], HEADER_SIZE, 0
            parts += (entry, payload, signature)
            size += entry_size
            count += 1
        if count:
            datagrams.append(
                _HEADER.pack(MAGIC, VERSION, KIND_BALL, sender, count) + b"".join(parts)
            )
        return datagrams

    def decode(self, data: bytes) -> tuple[ProcessId, Ball]:
        if len(data) > self.max_datagram:
            raise RemoteProtocolError(f"datagram of {len(data)} bytes", fault="oversized")
        if len(data) < HEADER_SIZE:
            raise RemoteProtocolError("shorter than a header", fault="truncated")
        magic, version, kind, sender, count = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise RemoteProtocolError("not an epto frame", fault="bad-magic")
        if version != VERSION:
            raise RemoteProtocolError(f"version {version}", fault="bad-version")
        if kind != KIND_BALL:
            raise RemoteProtocolError(f"kind {kind}", fault="bad-kind")
        if count > self.max_entries or count * ENTRY_OVERHEAD > len(data) - HEADER_SIZE:
            raise RemoteProtocolError(f"{count} entries announced", fault="bad-count")
        ball: dict[EventId, BallEntry] = {}
        offset = HEADER_SIZE
        end = len(data)
        unpack = _ENTRY.unpack_from
        view = memoryview(data)
        for _ in range(count):
            if offset + ENTRY_OVERHEAD > end:
                raise RemoteProtocolError("entry header cut", fault="truncated")
            source, seq, ts, ttl, plen, slen = unpack(data, offset)
            offset += ENTRY_OVERHEAD
            if plen > self.max_payload:
                raise RemoteProtocolError(f"payload of {plen} bytes", fault="oversized")
            if offset + plen + slen > end:
                raise RemoteProtocolError("entry body cut", fault="truncated")
            payload = bytes(view[offset : offset + plen])
            offset += plen
            signature = bytes(view[offset : offset + slen])
            offset += slen
            event = Event(source=source, seq=seq, ts=ts, payload=payload, signature=signature)
            eid = (source, seq)
            current = ball.get(eid)
            if current is None or current[1] < ttl:
                ball[eid] = (event, ttl)
        if offset != end:
            raise RemoteProtocolError(f"{end - offset} trailing bytes", fault="trailing")
        return sender, ball
