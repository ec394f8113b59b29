"""``FrameCodec``: messages to frames and back, with rejection counters.

The codec is sans-IO: a driver hands it the bytes of one datagram (or one
length-delimited stream frame) and gets a :class:`Frame` back, or ``None``
when the input was rejected; the reason lands in :attr:`FrameCodec.rejected`,
keyed by the ``fault`` of the :class:`RemoteProtocolError`. Sealing (group
encryption) and signature checks plug in as objects given to the
constructor; without them the codec needs nothing beyond the standard library.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Event, EventId, ProcessId
from ._frame_bodies import (
    KIND_BALL,
    HeldLookup,
    decode_ball_held,
    default_registry,
    split_ball,
)
from ._frames import (
    FLAG_SEALED,
    Frame,
    FrameRegistry,
    Header,
    Reader,
    pack_header,
    unpack_header_fields,
)
from ._limits import HEADER_SIZE, SEAL_OVERHEAD, Limits


class Sealer(Protocol):
    """Group encryption as the codec uses it (implemented by ``epto.GroupSealer``)."""

    def seal(
        self, kind: int, sender: ProcessId, group: int, body: bytes, to: ProcessId | None
    ) -> bytes:
        """A whole sealed frame: header with the seal flag and key id, then the
        nonce, the ciphertext of ``body`` and the tag; bound to receiver ``to``
        unless it is ``None``."""
        ...

    def open(self, header: Header, frame: bytes, now: float, me: ProcessId | None) -> bytes:
        """The plaintext body of a sealed ``frame`` received by ``me``; raises
        ``RemoteProtocolError`` (wrong key, tampered, replayed, meant for another)."""
        ...


BallFilter = Callable[[dict[EventId, tuple[Event, int]], float], dict[EventId, tuple[Event, int]]]
"""Called on every decoded ball with ``now``; returns the ball to hand to EpTO
(for example without the events whose signature fails)."""


class FrameCodec:
    """Encode messages of any registered kind; decode and count rejections.

    ``group`` is the uint64 id every frame carries; frames of another group are
    rejected (``fault="wrong-group"``). With a ``sealer`` every frame sent is
    sealed and every frame received must be sealed (``fault="unsealed"``).
    ``me`` is the id of the receiving process: sealed frames bound to another
    receiver (``encode(..., to=)``) fail authentication here, so a frame
    captured on its way to one member cannot be replayed to another.
    """

    def __init__(
        self,
        *,
        group: int,
        limits: Limits | None = None,
        registry: FrameRegistry | None = None,
        sealer: Sealer | None = None,
        ball_filter: BallFilter | None = None,
        me: ProcessId | None = None,
    ) -> None:
        if not 0 <= group < 1 << 64:
            raise LocalProtocolError(f"group id {group} is not a uint64")
        self.group = group
        self.limits = limits if limits is not None else Limits()
        self.registry = registry if registry is not None else default_registry()
        self.sealer = sealer
        self.ball_filter = ball_filter
        if me is not None and not 0 <= me < 1 << 64:
            raise LocalProtocolError(f"process id {me} is not a uint64")
        self.me = me
        overhead = HEADER_SIZE + (SEAL_OVERHEAD if sealer is not None else 0)
        self._body_budget = self.limits.max_frame_size - overhead
        self.rejected: Counter[str] = Counter()
        """Rejected frames by fault; the application reads it, may reset it."""
        self.accepted: Counter[str] = Counter()
        """Accepted frames by kind name."""
        self.copies_reused = 0
        """Ball entries handed over as the receiver's held event (``decode(held=)``)."""
        self.copies_conflicting = 0
        """Ball entries dropped because the receiver holds another content
        under their id (``decode(held=)``; the held event wins)."""

    # -- sending ------------------------------------------------------------

    def encode(
        self, sender: ProcessId, message: Any, *, to: ProcessId | None = None
    ) -> list[bytes]:
        """The frames carrying ``message`` from ``sender``.

        A ball (any ``dict`` of ``EventId -> (Event, ttl)``) may need several
        frames; so may a message whose kind has a splitting rule
        (``FrameKind.split``: the parts, in order, halved again as needed);
        every other kind takes exactly one. With a sealer and ``to``, the
        frames are bound to receiver ``to``. Raises
        :class:`LocalProtocolError` if the message breaks the limits (and
        cannot be split so that its parts do not).
        """
        if isinstance(message, Mapping):
            return self.encode_ball(sender, message, to=to)
        kind = self.registry.by_type(type(message))
        try:
            body = kind.encode(message, self.limits)
            if len(body) > self._body_budget:
                raise LocalProtocolError(
                    f"{kind.name} body of {len(body)} bytes exceeds the frame budget "
                    f"{self._body_budget}"
                )
        except LocalProtocolError:
            parts = kind.split(message) if kind.split is not None else None
            if parts is None:
                raise
            return self.encode(sender, parts[0], to=to) + self.encode(sender, parts[1], to=to)
        return [self._wrap(kind.code, sender, body, to)]

    def encode_ball(
        self,
        sender: ProcessId,
        ball: Mapping[EventId, tuple[Event, int]],
        *,
        to: ProcessId | None = None,
    ) -> list[bytes]:
        """Frames that carry ``ball``, split so that each fits ``max_frame_size``."""
        bodies = split_ball(ball, self.limits, self._body_budget)
        return [self._wrap(KIND_BALL, sender, body, to) for body in bodies]

    def _wrap(self, kind: int, sender: ProcessId, body: bytes, to: ProcessId | None) -> bytes:
        if self.sealer is not None:
            return self.sealer.seal(kind, sender, self.group, body, to)
        return pack_header(kind, sender, self.group) + body

    # -- receiving ----------------------------------------------------------

    def decode(
        self,
        data: bytes | bytearray | memoryview,
        now: float = 0.0,
        *,
        held: HeldLookup | None = None,
    ) -> Frame:
        """Decode one frame or raise :class:`RemoteProtocolError`; counts no frame.

        ``held`` (for example ``epto.epidemic.Process.held_event``) names the events the
        receiver already holds. A ball entry whose id it knows and whose
        content equals the held event's comes back as that very object: no
        ``Event`` is built, no payload copied, no signature checked again (the
        held event was checked when it arrived). An entry of a held id with
        another content is dropped from the ball, counted in
        :attr:`copies_conflicting` (and shown to the ``ball_filter``, which
        counts it as it would), so a peer cannot replace an event the receiver
        holds. Every bound is checked on every entry, as without ``held``.
        """
        kind, sender, group, message = self._decode(data, now, held)
        return Frame(kind=kind, sender=sender, group=group, message=message)

    def decode_message(
        self,
        data: bytes | bytearray | memoryview,
        now: float = 0.0,
        *,
        held: HeldLookup | None = None,
    ) -> tuple[ProcessId, Any]:
        """``(sender, message)`` of one frame, decoded as :meth:`decode` does
        without building a :class:`Frame` (a driver's per-datagram path)."""
        _kind, sender, _group, message = self._decode(data, now, held)
        return sender, message

    def _decode(
        self, data: bytes | bytearray | memoryview, now: float, held: HeldLookup | None
    ) -> tuple[int, ProcessId, int, Any]:
        if len(data) > self.limits.max_frame_size:
            raise RemoteProtocolError(
                f"frame of {len(data)} bytes exceeds {self.limits.max_frame_size}",
                fault="oversized",
            )
        if not isinstance(data, bytes):
            data = bytes(data)
        code, flags, key_id, sender, group = unpack_header_fields(data)
        if group != self.group:
            raise RemoteProtocolError(f"frame of group {group}", fault="wrong-group")
        kind = self.registry.by_code(code)
        if flags & FLAG_SEALED:
            if self.sealer is None:
                raise RemoteProtocolError("sealed frame, no group key", fault="unexpected-seal")
            header = Header(kind=code, sender=sender, group=group, flags=flags, key_id=key_id)
            reader = Reader(self.sealer.open(header, data, now, self.me))
        elif self.sealer is not None:
            raise RemoteProtocolError("unsealed frame in a sealed group", fault="unsealed")
        else:
            reader = Reader(data, HEADER_SIZE)
        if code != KIND_BALL:
            message = kind.decode(reader, self.limits)
            reader.finish()
        elif held is not None:
            message = self._decode_ball_held(reader, held, now)
        else:
            message = kind.decode(reader, self.limits)
            reader.finish()
            if self.ball_filter is not None:
                message = self.ball_filter(message, now)
        return code, sender, group, message

    def _decode_ball_held(
        self, reader: Reader, held: HeldLookup, now: float
    ) -> dict[EventId, tuple[Event, int]]:
        fresh, reused, conflicting = decode_ball_held(reader, self.limits, held)
        reader.finish()
        ball_filter = self.ball_filter
        if conflicting:
            self.copies_conflicting += len(conflicting)
            if ball_filter is not None:
                # Counted by the filter (a verifier: altered, equivocation);
                # dropped whatever it says.
                ball_filter(conflicting, now)
        # Only fresh copies are checked: a held event passed the filter when
        # it arrived (or is the receiver's own).
        checked = ball_filter(fresh, now) if fresh and ball_filter is not None else fresh
        if not reused:
            return checked
        self.copies_reused += len(reused)
        if checked:
            reused.update(checked)  # disjoint ids; every value was checked
        return reused

    def receive(
        self,
        data: bytes | bytearray | memoryview,
        now: float = 0.0,
        *,
        held: HeldLookup | None = None,
    ) -> Frame | None:
        """Decode one frame (``held`` as in :meth:`decode`); on bad input count
        the fault and return ``None``."""
        try:
            frame = self.decode(data, now, held=held)
        except RemoteProtocolError as exc:
            self.rejected[exc.fault] += 1
            return None
        self.accepted[self.registry.by_code(frame.kind).name] += 1
        return frame

    def statistics(self) -> dict[str, dict[str, int]]:
        """Snapshot of the counters: ``{"accepted": {...}, "rejected": {...}}``."""
        return {"accepted": dict(self.accepted), "rejected": dict(self.rejected)}
