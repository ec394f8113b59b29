"""The messages of the sequencing-atoms engine and their frames (codes 40-43, 47).

* :class:`Publish`: a member hands a payload for one of its groups to the
  group's ingress in ``epoch`` (the node that assigns the group-local number).
* :class:`Sequenced`: the message on its route in ``epoch``'s graph: the
  group-local number, the stamps of the atoms it has passed (``(atom,
  number)`` in route order), and ``hop``, the index in the route of the atom
  that takes it next; ``hop == len(route)`` means it has passed every atom
  and goes to the members.
* :class:`Change`: the coordinator installs graph version ``epoch`` (the
  previous one's groups changed by ``ops``) at every node.
* :class:`EpochEnd`: a marker ending ``group``'s traffic of ``epoch`` on one
  link. ``stage`` 0: from a publisher to the group's ingress ("I publish no
  more in this epoch"); 1: along the route and then to the members, behind
  the group's last message of the epoch (``hop`` as in :class:`Sequenced`).
* :class:`Alive`: a node's heartbeat to the coordinator (only with a crash
  detector: ``suspect_after``), with the latest epoch the node installed.

Layouts (big-endian; docs/wire-format.md, "Sequencing atoms")::

    Publish:   group u32 · epoch u32 · origin_seq u64 · payload (u32 length, bytes)
               [· signature (u8 length, bytes)]
    Sequenced: group u32 · epoch u32 · local u64 · origin u64 · origin_seq u64 ·
               hop u16 · stamps (u16 count, then atom u32 · number u64 each) ·
               payload (u32 length, bytes) [· signature (u8 length, bytes)]

The signature (a signed group, docs/security.md) is the origin's, of the
publication :func:`publication` names; an unsigned message has no such
field, so its frame is the same with or without signing in the library.
    Change:    epoch u32 · ops (u16 count), each: kind u8 and
               1 add:     group u32 · members (u16 count, then u64 each)
               2 remove:  group u32
               3 replace: crashed u64 · replacement u64
    EpochEnd:  epoch u32 · group u32 · stage u8 · hop u16
    Alive:     epoch u32

A decoder raises only ``RemoteProtocolError``; an encoder raises
``LocalProtocolError`` for values out of range.
"""

from __future__ import annotations

import struct

import attrs

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Event
from ..wire._frames import FrameKind, FrameRegistry, Reader
from ..wire._limits import Limits

PUBLISH_CODE = 40
SEQUENCED_CODE = 41
CHANGE_CODE = 42
EPOCH_END_CODE = 43
ALIVE_CODE = 47

MAX_STAMPS = 4096
"""Most stamps one message carries (one per atom of its route)."""
MAX_OPS = 256
"""Most operations in one :class:`Change`."""
MAX_MEMBERS = 4096
"""Most members of a group added by one operation."""

_PUBLISH = struct.Struct(">IIQ")
_SEQUENCED = struct.Struct(">IIQQQH")
_STAMP = struct.Struct(">IQ")
_EPOCH_END = struct.Struct(">IIBH")
_REPLACE = struct.Struct(">QQ")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

Stamp = tuple[int, int]
"""``(atom id, number)``: the number an atom gave the message."""


@attrs.frozen(slots=True)
class Publish:
    """A payload for ``group``, from its origin (the frame's sender) to the
    ingress of ``group`` in ``epoch``."""

    group: int
    epoch: int
    origin_seq: int
    payload: bytes
    signature: bytes = b""
    """The origin's signature of :func:`publication` (empty: unsigned)."""


@attrs.frozen(slots=True)
class Sequenced:
    """A message of ``group`` on its route in ``epoch`` (see the module docstring)."""

    group: int
    epoch: int
    local: int
    origin: int
    origin_seq: int
    hop: int
    stamps: tuple[Stamp, ...]
    payload: bytes
    signature: bytes = b""
    """The origin's signature of :func:`publication` (empty: unsigned)."""


@attrs.frozen(slots=True)
class AddGroup:
    """A group created with ``members`` (live nodes of the deployment)."""

    group: int
    members: frozenset[int]


@attrs.frozen(slots=True)
class RemoveGroup:
    """A group that ends (its last epoch's messages are still delivered)."""

    group: int


@attrs.frozen(slots=True)
class ReplaceHost:
    """``crashed`` is down for good: every atom it hosts, now and later, is
    played by ``replacement``; nobody waits for it any more."""

    crashed: int
    replacement: int


ChangeOp = AddGroup | RemoveGroup | ReplaceHost


@attrs.frozen(slots=True)
class Change:
    """Graph version ``epoch``: the previous version changed by ``ops`` in order."""

    epoch: int
    ops: tuple[ChangeOp, ...]


PUBLISHER = 0
"""``EpochEnd.stage`` of a publisher's marker to an ingress."""
ROUTE = 1
"""``EpochEnd.stage`` of the marker that follows a group's route."""


@attrs.frozen(slots=True)
class EpochEnd:
    """No more messages of ``group`` in ``epoch`` on this link (module docstring)."""

    epoch: int
    group: int
    stage: int
    hop: int


@attrs.frozen(slots=True)
class Alive:
    """A heartbeat to the coordinator; ``epoch`` is the sender's latest."""

    epoch: int


def _payload(payload: bytes, limits: Limits) -> bytes:
    if len(payload) > limits.max_payload_size:
        raise LocalProtocolError(f"payload of {len(payload)} bytes exceeds limits.max_payload_size")
    return _U32.pack(len(payload)) + payload


MAX_SIGNATURE = 64
"""Longest signature field (Ed25519's)."""


def publication(
    origin: int, origin_seq: int, group: int, payload: bytes, signature: bytes
) -> Event:
    """What the origin of a publication signs, as an event: its id
    ``(origin, origin_seq)``, the group as the timestamp (a signature binds
    the publication to its group), the payload."""
    return Event(source=origin, seq=origin_seq, ts=group, payload=payload, signature=signature)


def _signature(signature: bytes) -> bytes:
    if not signature:
        return b""
    if len(signature) > MAX_SIGNATURE:
        raise LocalProtocolError(f"a signature of {len(signature)} bytes exceeds {MAX_SIGNATURE}")
    return _U8.pack(len(signature)) + signature


def _read_signature(r: Reader) -> bytes:
    if not r.remaining:
        return b""
    return r.blob(r.u8(), MAX_SIGNATURE, "signature")


def _encode_publish(m: Publish, limits: Limits) -> bytes:
    try:
        head = _PUBLISH.pack(m.group, m.epoch, m.origin_seq)
    except struct.error:
        raise LocalProtocolError("Publish: a value is out of range") from None
    return head + _payload(m.payload, limits) + _signature(m.signature)


def _decode_publish(r: Reader, limits: Limits) -> Publish:
    group, epoch, origin_seq = r.unpack(_PUBLISH)
    payload = r.blob(r.u32(), limits.max_payload_size, "payload")
    return Publish(group, epoch, origin_seq, payload, _read_signature(r))


def _encode_sequenced(m: Sequenced, limits: Limits) -> bytes:
    if len(m.stamps) > MAX_STAMPS:
        raise LocalProtocolError(f"{len(m.stamps)} stamps exceed {MAX_STAMPS}")
    try:
        parts = [_SEQUENCED.pack(m.group, m.epoch, m.local, m.origin, m.origin_seq, m.hop)]
        parts.append(_U16.pack(len(m.stamps)))
        parts.extend(_STAMP.pack(atom, number) for atom, number in m.stamps)
    except struct.error:
        raise LocalProtocolError("Sequenced: a value is out of range") from None
    parts.append(_payload(m.payload, limits))
    parts.append(_signature(m.signature))
    return b"".join(parts)


def _decode_sequenced(r: Reader, limits: Limits) -> Sequenced:
    group, epoch, local, origin, origin_seq, hop = r.unpack(_SEQUENCED)
    n = r.count(2, MAX_STAMPS, _STAMP.size, "stamps")
    stamps = tuple(r.unpack(_STAMP) for _ in range(n))
    payload = r.blob(r.u32(), limits.max_payload_size, "payload")
    signature = _read_signature(r)
    return Sequenced(group, epoch, local, origin, origin_seq, hop, stamps, payload, signature)


def _encode_change(m: Change, limits: Limits) -> bytes:
    if len(m.ops) > MAX_OPS:
        raise LocalProtocolError(f"{len(m.ops)} operations exceed {MAX_OPS}")
    try:
        parts = [_U32.pack(m.epoch), _U16.pack(len(m.ops))]
        for op in m.ops:
            if type(op) is AddGroup:
                if len(op.members) > MAX_MEMBERS:
                    raise LocalProtocolError(f"{len(op.members)} members exceed {MAX_MEMBERS}")
                parts.append(_U8.pack(1) + _U32.pack(op.group) + _U16.pack(len(op.members)))
                parts.extend(_U64.pack(p) for p in sorted(op.members))
            elif type(op) is RemoveGroup:
                parts.append(_U8.pack(2) + _U32.pack(op.group))
            elif type(op) is ReplaceHost:
                parts.append(_U8.pack(3) + _REPLACE.pack(op.crashed, op.replacement))
            else:
                raise LocalProtocolError(f"not a change operation: {op!r}")
    except struct.error:
        raise LocalProtocolError("Change: a value is out of range") from None
    return b"".join(parts)


def _decode_change(r: Reader, limits: Limits) -> Change:
    epoch = r.u32()
    n = r.count(2, MAX_OPS, 5, "operations")
    ops: list[ChangeOp] = []
    for _ in range(n):
        kind = r.u8()
        if kind == 1:
            group = r.u32()
            k = r.count(2, MAX_MEMBERS, 8, "members")
            members = frozenset(r.u64() for _ in range(k))
            if len(members) != k:
                raise RemoteProtocolError("a member named twice", fault="duplicate")
            ops.append(AddGroup(group, members))
        elif kind == 2:
            ops.append(RemoveGroup(r.u32()))
        elif kind == 3:
            crashed, replacement = r.unpack(_REPLACE)
            ops.append(ReplaceHost(crashed, replacement))
        else:
            raise RemoteProtocolError(f"unknown change operation {kind}")
    return Change(epoch, tuple(ops))


def _encode_epoch_end(m: EpochEnd, limits: Limits) -> bytes:
    try:
        return _EPOCH_END.pack(m.epoch, m.group, m.stage, m.hop)
    except struct.error:
        raise LocalProtocolError("EpochEnd: a value is out of range") from None


def _decode_epoch_end(r: Reader, limits: Limits) -> EpochEnd:
    epoch, group, stage, hop = r.unpack(_EPOCH_END)
    if stage not in (PUBLISHER, ROUTE):
        raise RemoteProtocolError(f"unknown marker stage {stage}")
    return EpochEnd(epoch, group, stage, hop)


def _encode_alive(m: Alive, limits: Limits) -> bytes:
    try:
        return _U32.pack(m.epoch)
    except struct.error:
        raise LocalProtocolError("Alive: a value is out of range") from None


def _decode_alive(r: Reader, limits: Limits) -> Alive:
    return Alive(r.u32())


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
CHANGE_KIND = FrameKind(
    code=CHANGE_CODE,
    name="atoms-change",
    type=Change,
    encode=_encode_change,
    decode=_decode_change,
)
EPOCH_END_KIND = FrameKind(
    code=EPOCH_END_CODE,
    name="atoms-epoch-end",
    type=EpochEnd,
    encode=_encode_epoch_end,
    decode=_decode_epoch_end,
)


ALIVE_KIND = FrameKind(
    code=ALIVE_CODE,
    name="atoms-alive",
    type=Alive,
    encode=_encode_alive,
    decode=_decode_alive,
)


def atoms_registry() -> FrameRegistry:
    """A registry with the engine's five kinds (and nothing of EpTO's)."""
    registry = FrameRegistry()
    for kind in (PUBLISH_KIND, SEQUENCED_KIND, CHANGE_KIND, EPOCH_END_KIND, ALIVE_KIND):
        registry.register(kind)
    return registry
