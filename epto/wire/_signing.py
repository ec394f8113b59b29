"""Event signatures: Ed25519 by the source, verified once per event id.

With group encryption alone every member can forge or alter events of any
other member when it relays them. With signatures, a source signs
``(source, seq, ts, payload)`` and every receiver checks the signature
against a roster of public keys before EpTO sees the event; a relay can then
neither forge nor alter events (it can still drop them, which EpTO's
redundancy absorbs).

Signing happens at the driver, on the balls that leave a process
(:meth:`EventSigner.sign_ball`), because ``Process.broadcast`` builds the
event itself; the signature is deterministic (Ed25519), so re-signing an
evicted event gives the same bytes.

Verification costs about 100 microseconds, so :class:`SignatureVerifier`
verifies each event id once and remembers the verified content in a bounded
LRU cache: a later copy with the same id is accepted only if its ts, payload
and signature equal the verified ones. A copy with another content is refused:
as ``altered`` without a new verification when it carries no signature or the
verified one, else after one verification, as ``equivocation`` when its own
signature is valid (the source signed two versions of one event id).

``cryptography`` is imported when a signer or verifier is built.
"""

from __future__ import annotations

import struct
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from .._errors import ConfigurationError
from .._event import Event, EventId, ProcessId

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

_CONTEXT = b"epto-event-v1\0"
_IDS = struct.Struct(">QQQ")

Ball = dict[EventId, tuple[Event, int]]


def signed_message(source: ProcessId, seq: int, ts: int, payload: bytes) -> bytes:
    """The bytes a source signs: a context string, then source, seq and ts as
    uint64 big-endian, then the payload."""
    return _CONTEXT + _IDS.pack(source, seq, ts) + payload


class EventSigner:
    """Signs the events of one source with its Ed25519 private key (32 raw bytes)."""

    def __init__(self, source: ProcessId, private_key: bytes, *, cache_size: int = 4096) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        if len(private_key) != 32:
            raise ConfigurationError("an Ed25519 private key is 32 bytes")
        self.source = source
        self._key: Ed25519PrivateKey = Ed25519PrivateKey.from_private_bytes(private_key)
        self.public_key: bytes = self._key.public_key().public_bytes_raw()
        self._cache_size = cache_size
        self._signed: OrderedDict[int, Event] = OrderedDict()
        self.signatures = 0
        """Signatures computed (cache misses)."""

    def signature(self, event: Event) -> bytes:
        """The signature of ``event``: the shape of a ``Process`` signing hook
        (``signer: Callable[[Event], bytes]``)."""
        self.signatures += 1
        return self._key.sign(signed_message(event.source, event.seq, event.ts, event.payload))

    def sign(self, event: Event) -> Event:
        """``event`` with its signature (cached per seq, so each event is signed once)."""
        if event.source != self.source:
            raise ConfigurationError(f"signer of {self.source} asked to sign for {event.source}")
        done = self._signed.get(event.seq)
        if done is not None and done.ts == event.ts and done.payload == event.payload:
            self._signed.move_to_end(event.seq)
            return done
        signed = attrs.evolve(event, signature=self.signature(event))
        self._signed[event.seq] = signed
        if len(self._signed) > self._cache_size:
            self._signed.popitem(last=False)
        return signed

    def sign_ball(
        self, ball: Mapping[EventId, tuple[Event, int]]
    ) -> Mapping[EventId, tuple[Event, int]]:
        """``ball`` with this source's unsigned events signed; the same object when
        there is nothing to sign. Apply to every ball ``messages_to_send`` yields."""
        out: Ball | None = None
        source = self.source
        for key, (event, ttl) in ball.items():
            if event.source == source and not event.signature:
                if out is None:
                    out = dict(ball)
                out[key] = (self.sign(event), ttl)
        return ball if out is None else out


@attrs.frozen(kw_only=True, slots=True)
class VerifierStatistics:
    checks: int
    """Ed25519 verifications performed, passed or failed."""
    passed: int
    """Verifications that passed: one per distinct event while it stays cached."""
    cache_hits: int
    """Copies accepted because the same content was verified before."""
    rejected: dict[str, int]
    """Events dropped, by reason: ``bad-signature``, ``unsigned``,
    ``unknown-source``, ``altered`` (another content under a verified id, not
    validly signed: a relay changed it), ``equivocation`` (another content
    under a verified id, validly signed by the source: it signed two versions)."""

    @property
    def equivocations(self) -> int:
        """Copies refused because their source validly signed two different
        versions of one event id (``rejected["equivocation"]``)."""
        return self.rejected.get("equivocation", 0)


class SignatureVerifier:
    """Checks event signatures against ``roster`` (process id to 32-byte public key).

    Use :meth:`filter_ball` as ``FrameCodec(ball_filter=...)``: events that
    fail are removed from the ball (so they never reach ordering) and counted.
    ``cache_size`` (entries) and ``cache_bytes`` (payload bytes kept alive by
    the cache) bound the verified-content cache, least recently used first;
    make them cover the distinct events a process holds at once (about ``ttl``
    rounds of broadcasts), or copies are verified more than once (still
    correct, only slower).
    """

    def __init__(
        self,
        roster: Mapping[ProcessId, bytes],
        *,
        cache_size: int = 65536,
        cache_bytes: int = 8 << 20,
    ) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self._invalid_signature = InvalidSignature
        if cache_size < 1 or cache_bytes < 1:
            raise ConfigurationError("SignatureVerifier cache bounds must be positive")
        self._keys: dict[ProcessId, Ed25519PublicKey] = {}
        for pid, raw in roster.items():
            try:
                self._keys[pid] = Ed25519PublicKey.from_public_bytes(raw)
            except ValueError as exc:
                raise ConfigurationError(f"bad public key for process {pid}: {exc}") from None
        self._cache_size = cache_size
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._verified: OrderedDict[EventId, tuple[int, bytes, bytes]] = OrderedDict()
        self._checks = 0
        self._passed = 0
        self._hits = 0
        self.rejected: Counter[str] = Counter()

    def add(self, pid: ProcessId, public_key: bytes) -> None:
        """Add or replace a member's public key."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self._keys[pid] = Ed25519PublicKey.from_public_bytes(public_key)

    def check(self, event: Event) -> str | None:
        """``None`` if ``event`` is authentic, else the reason (and count it)."""
        key = event.id
        known = self._verified.get(key)
        if known is not None:
            ts, payload, signature = known
            if event.ts == ts and event.payload == payload and event.signature == signature:
                self._hits += 1
                self._verified.move_to_end(key)
                return None
            # Another content under a verified id: a relay altered it, or the
            # source signed two versions (equivocation). Either way the copy is
            # refused; a valid signature of its own says the source is at
            # fault. The verified signature cannot sign another content, and an
            # unsigned copy signs nothing: neither costs a verification.
            if event.signature and event.signature != signature and self._verify(event):
                reason = "equivocation"
            else:
                reason = "altered"
        elif not event.signature:
            reason = "unsigned"
        elif (public := self._keys.get(event.source)) is None:
            reason = "unknown-source"
        elif self._verify(event, public):
            self._passed += 1
            self._remember(key, event)
            return None
        else:
            reason = "bad-signature"
        self.rejected[reason] += 1
        return reason

    def _verify(self, event: Event, public: Ed25519PublicKey | None = None) -> bool:
        """Whether ``event`` carries a valid signature of its source (one
        Ed25519 verification, counted in ``checks``)."""
        if public is None:
            public = self._keys.get(event.source)
            if public is None or not event.signature:
                return False
        self._checks += 1
        message = signed_message(event.source, event.seq, event.ts, event.payload)
        try:
            public.verify(event.signature, message)
        except self._invalid_signature:
            return False
        return True

    def _remember(self, key: EventId, event: Event) -> None:
        verified = self._verified
        verified[key] = (event.ts, event.payload, event.signature)
        self._cached_bytes += len(event.payload)
        while len(verified) > self._cache_size or (
            self._cached_bytes > self._cache_bytes and len(verified) > 1
        ):
            _ts, payload, _sig = verified.popitem(last=False)[1]
            self._cached_bytes -= len(payload)

    def filter_ball(self, ball: Ball, now: float = 0.0) -> Ball:
        """``ball`` without the events whose signature fails (the same dict if all pass)."""
        bad = [key for key, (event, _ttl) in ball.items() if self.check(event) is not None]
        if not bad:
            return ball
        drop = set(bad)
        return {key: entry for key, entry in ball.items() if key not in drop}

    def statistics(self) -> VerifierStatistics:
        return VerifierStatistics(
            checks=self._checks,
            passed=self._passed,
            cache_hits=self._hits,
            rejected=dict(self.rejected),
        )
