"""The messages of the sequencing-atoms engine and their frames (codes 40, 41).

* :class:`Publish`: a member hands a payload for one of its groups to the
  group's ingress (the node that assigns the group-local number).
* :class:`Sequenced`: the message on its route: the group-local number, the
  stamps of the atoms it has passed (``(atom, number)`` in route order), and
  ``hop``, the index in the route of the atom that takes it next; ``hop ==
  len(route)`` means it has passed every atom and goes to the members.

Layouts (big-endian; docs/wire-format.md, "Sequencing atoms")::

    Publish:   group u32 · origin_seq u64 · payload (u32 length, bytes)
    Sequenced: group u32 · local u64 · origin u64 · origin_seq u64 · hop u16 ·
               stamps (u16 count, then atom u32 · number u64 each) ·
               payload (u32 length, bytes)

A decoder raises only ``RemoteProtocolError``; an encoder raises
``LocalProtocolError`` for values out of range.
"""

from __future__ import annotations

import struct

import attrs

from .._errors import LocalProtocolError
from .._frames import FrameKind, FrameRegistry, Reader
from .._limits import Limits

PUBLISH_CODE = 40
SEQUENCED_CODE = 41

MAX_STAMPS = 4096
"""Most stamps one message carries (one per atom of its route)."""

_PUBLISH = struct.Struct(">IQ")
_SEQUENCED = struct.Struct(">IQQQH")
_STAMP = struct.Struct(">IQ")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

Stamp = tuple[int, int]
"""``(atom id, number)``: the number an atom gave the message."""


@attrs.frozen(slots=True)
class Publish:
    """A payload for ``group``, from its origin (the frame's sender) to the ingress."""

    group: int
    origin_seq: int
    payload: bytes


@attrs.frozen(slots=True)
class Sequenced:
    """A message of ``group`` on its route (see the module docstring)."""

    group: int
    local: int
    origin: int
    origin_seq: int
    hop: int
    stamps: tuple[Stamp, ...]
    payload: bytes


def _payload(payload: bytes, limits: Limits) -> bytes:
    if len(payload) > limits.max_payload_size:
        raise LocalProtocolError(f"payload of {len(payload)} bytes exceeds limits.max_payload_size")
    return _U32.pack(len(payload)) + payload


def _encode_publish(m: Publish, limits: Limits) -> bytes:
    try:
        head = _PUBLISH.pack(m.group, m.origin_seq)
    except struct.error:
        raise LocalProtocolError("Publish: a value is out of range") from None
    return head + _payload(m.payload, limits)


def _decode_publish(r: Reader, limits: Limits) -> Publish:
    group, origin_seq = r.unpack(_PUBLISH)
    payload = r.blob(r.u32(), limits.max_payload_size, "payload")
    return Publish(group, origin_seq, payload)


def _encode_sequenced(m: Sequenced, limits: Limits) -> bytes:
    if len(m.stamps) > MAX_STAMPS:
        raise LocalProtocolError(f"{len(m.stamps)} stamps exceed {MAX_STAMPS}")
    try:
        parts = [_SEQUENCED.pack(m.group, m.local, m.origin, m.origin_seq, m.hop)]
        parts.append(_U16.pack(len(m.stamps)))
        parts.extend(_STAMP.pack(atom, number) for atom, number in m.stamps)
    except struct.error:
        raise LocalProtocolError("Sequenced: a value is out of range") from None
    parts.append(_payload(m.payload, limits))
    return b"".join(parts)


def _decode_sequenced(r: Reader, limits: Limits) -> Sequenced:
    group, local, origin, origin_seq, hop = r.unpack(_SEQUENCED)
    n = r.count(2, MAX_STAMPS, _STAMP.size, "stamps")
    stamps = tuple(r.unpack(_STAMP) for _ in range(n))
    payload = r.blob(r.u32(), limits.max_payload_size, "payload")
    return Sequenced(group, local, origin, origin_seq, hop, stamps, payload)


PUBLISH_KIND = FrameKind(
    code=PUBLISH_CODE,
    name="atoms-publish",
    type=Publish,
    encode=_encode_publish,
    decode=_decode_publish,
)
SEQUENCED_KIND = FrameKind(
    code=SEQUENCED_CODE,
    name="atoms-sequenced",
    type=Sequenced,
    encode=_encode_sequenced,
    decode=_decode_sequenced,
)


def atoms_registry() -> FrameRegistry:
    """A registry with the engine's two kinds (and nothing of EpTO's)."""
    registry = FrameRegistry()
    registry.register(PUBLISH_KIND)
    registry.register(SEQUENCED_KIND)
    return registry
