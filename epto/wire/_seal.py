"""Group encryption: every frame sealed with an AEAD under the group key.

The header travels in clear and is authenticated as associated data; the
body is encrypted. Layout and rationale: docs/wire-format.md, docs/security.md.

Nonces never repeat under one key:

* each sender seals under its own subkey, ``HKDF-SHA256(group key, info =
  "epto-frame-v1" | key id | sender id)``, so senders cannot collide with
  each other whatever their nonces;
* a sender's nonce is a 4-byte prefix drawn once per :class:`GroupSealer`
  (by the caller: the core reads no system randomness) followed by an 8-byte
  counter that starts where the caller says and grows by one per frame.

A restarted process must pass a ``counter_start`` above every counter it used
before (drivers pass the wall clock in microseconds), or receivers take its
first frames for replays; the fresh prefix keeps nonces unique even if the
clock went backwards.

``cryptography`` is imported when a sealer is built, so ``import epto`` works
without the ``crypto`` extra.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import TYPE_CHECKING, Literal

import attrs

from .._errors import ConfigurationError, LocalProtocolError, RemoteProtocolError
from .._event import ProcessId
from ._frames import FLAG_BOUND, FLAG_SEALED, Header, pack_header
from ._limits import HEADER_SIZE, SEAL_OVERHEAD
from ._replay import ReplayWindow

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

Cipher = Literal["aes-256-gcm", "chacha20-poly1305"]
CIPHERS: tuple[Cipher, ...] = ("aes-256-gcm", "chacha20-poly1305")
_NONCE_END = HEADER_SIZE + 12
_U64_LIMIT = 1 << 64


@attrs.frozen(kw_only=True, slots=True, repr=False)
class GroupKey:
    """A group key: its id on the wire (1..255), 32 secret bytes, the AEAD."""

    key_id: int = attrs.field()
    secret: bytes = attrs.field()
    cipher: Cipher = attrs.field(default="aes-256-gcm")

    @key_id.validator
    def _check_id(self, _attribute: object, value: int) -> None:
        if not 1 <= value <= 255:
            raise ConfigurationError(f"GroupKey.key_id must be in 1..255, got {value}")

    @secret.validator
    def _check_secret(self, _attribute: object, value: bytes) -> None:
        if not isinstance(value, bytes) or len(value) != 32:
            raise ConfigurationError("GroupKey.secret must be 32 bytes")

    @cipher.validator
    def _check_cipher(self, _attribute: object, value: str) -> None:
        if value not in CIPHERS:
            raise ConfigurationError(f"GroupKey.cipher must be one of {CIPHERS}, got {value!r}")

    def __repr__(self) -> str:
        return f"GroupKey(key_id={self.key_id}, cipher={self.cipher!r}, secret=<hidden>)"


def _subkey_aead(key: GroupKey, sender: ProcessId) -> AESGCM | ChaCha20Poly1305:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = b"epto-frame-v1" + bytes((key.key_id,)) + sender.to_bytes(8, "big")
    sub = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key.secret)
    return AESGCM(sub) if key.cipher == "aes-256-gcm" else ChaCha20Poly1305(sub)


class GroupSealer:
    """Seals the frames of one process and opens those of the group.

    Give it to :class:`epto.FrameCodec` as ``sealer=``. ``prefix`` (4 bytes)
    or ``rng`` (to draw it) supplies the nonce prefix. Keys rotate with
    :meth:`add_key` on every member first, then :meth:`use_key`; the previous
    key is still accepted for ``grace`` (in the unit of ``now``).
    """

    def __init__(
        self,
        key: GroupKey,
        *,
        counter_start: int,
        prefix: bytes | None = None,
        rng: random.Random | None = None,
        replay_window: int = 4096,
        max_senders: int = 65536,
    ) -> None:
        if prefix is None:
            if rng is None:
                raise ConfigurationError("GroupSealer needs a nonce prefix or an rng to draw it")
            prefix = rng.getrandbits(32).to_bytes(4, "big")
        if len(prefix) != 4:
            raise ConfigurationError("GroupSealer prefix must be 4 bytes")
        if not 0 <= counter_start < _U64_LIMIT:
            raise ConfigurationError("GroupSealer counter_start must be a uint64")
        self._prefix = bytes(prefix)
        self._counter = counter_start
        self._keys: dict[int, GroupKey] = {key.key_id: key}
        self._expires: dict[int, float] = {}
        self._current = key
        self._max_senders = max_senders
        self._aeads: OrderedDict[tuple[int, ProcessId], AESGCM | ChaCha20Poly1305] = OrderedDict()
        self.replay = ReplayWindow(replay_window, max_senders)
        from cryptography.exceptions import InvalidTag

        self._invalid_tag = InvalidTag
        _subkey_aead(key, 0)  # fail now, not on the first frame, without cryptography

    @property
    def key_id(self) -> int:
        """Id of the key frames are sealed with."""
        return self._current.key_id

    @property
    def counter(self) -> int:
        """Counter of the next frame sealed."""
        return self._counter

    def add_key(self, key: GroupKey) -> None:
        """Accept frames sealed with ``key`` (without sending with it yet)."""
        known = self._keys.get(key.key_id)
        if known is not None and known.secret != key.secret:
            raise LocalProtocolError(f"key id {key.key_id} is in use by another key")
        self._keys[key.key_id] = key
        self._expires.pop(key.key_id, None)

    def use_key(self, key_id: int, now: float, grace: float) -> None:
        """Seal with key ``key_id`` from now on; the key used so far is accepted
        until ``now + grace``, then forgotten."""
        if key_id not in self._keys:
            raise LocalProtocolError(f"unknown key id {key_id}; add_key first")
        old = self._current.key_id
        self._current = self._keys[key_id]
        self._expires.pop(key_id, None)
        if old != key_id:
            self._expires[old] = now + grace

    def _aead(self, key: GroupKey, sender: ProcessId) -> AESGCM | ChaCha20Poly1305:
        aead = self._aeads.get((key.key_id, sender))
        if aead is None:
            return _subkey_aead(key, sender)
        self._aeads.move_to_end((key.key_id, sender))
        return aead

    def _remember(self, key: GroupKey, sender: ProcessId, aead: AESGCM | ChaCha20Poly1305) -> None:
        # Only subkeys that authenticated a frame (or sealed one) are cached, so
        # forged frames with made-up sender ids cannot evict the members' subkeys.
        cache_key = (key.key_id, sender)
        if cache_key not in self._aeads:
            if len(self._aeads) >= self._max_senders:
                self._aeads.popitem(last=False)
            self._aeads[cache_key] = aead

    def seal(
        self, kind: int, sender: ProcessId, group: int, body: bytes, to: ProcessId | None = None
    ) -> bytes:
        if to is not None and not 0 <= to < _U64_LIMIT:
            raise LocalProtocolError(f"receiver id {to} is not a uint64")
        counter = self._counter
        if counter >= _U64_LIMIT:
            raise LocalProtocolError("nonce counter exhausted; rotate the key and restart")
        self._counter = counter + 1
        key = self._current
        flags = FLAG_SEALED if to is None else FLAG_SEALED | FLAG_BOUND
        header = pack_header(kind, sender, group, flags=flags, key_id=key.key_id)
        aad = header if to is None else header + to.to_bytes(8, "big")
        nonce = self._prefix + counter.to_bytes(8, "big")
        aead = self._aead(key, sender)
        self._remember(key, sender, aead)
        return header + nonce + aead.encrypt(nonce, body, aad)

    def open(self, header: Header, frame: bytes, now: float, me: ProcessId | None = None) -> bytes:

        if len(frame) < HEADER_SIZE + SEAL_OVERHEAD:
            raise RemoteProtocolError("sealed frame shorter than its seal", fault="truncated")
        key = self._keys.get(header.key_id)
        expires = self._expires.get(header.key_id)
        if expires is not None and now >= expires:
            del self._keys[header.key_id], self._expires[header.key_id]
            key = None
        if key is None:
            raise RemoteProtocolError(f"no group key {header.key_id}", fault="unknown-key")
        aad = frame[:HEADER_SIZE]
        if header.bound:
            if me is None:
                raise RemoteProtocolError("frame bound to a receiver", fault="bad-header")
            aad += me.to_bytes(8, "big")
        counter = int.from_bytes(frame[HEADER_SIZE + 4 : _NONCE_END], "big")
        sender = header.sender
        if not self.replay.fresh(sender, counter):
            raise RemoteProtocolError(f"frame {counter} of {sender} replayed", fault="replay")
        aead = self._aead(key, sender)
        try:
            body = aead.decrypt(frame[HEADER_SIZE:_NONCE_END], frame[_NONCE_END:], aad)
        except self._invalid_tag:
            raise RemoteProtocolError("frame failed authentication", fault="bad-tag") from None
        self._remember(key, sender, aead)
        self.replay.accept(sender, counter)
        return body
