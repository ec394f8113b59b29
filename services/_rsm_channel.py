"""The sealed channel of the state transfer (:mod:`.rsm_transfer`): with a
group key, every transfer connection runs over a :class:`SealedStream`
instead of plain TCP (docs/rsm.md, "State transfer"; docs/security.md).

Construction, from standard parts only (HKDF-SHA256 and the group key's AEAD,
from ``cryptography``):

* the transfer key ``K = HKDF-SHA256(group secret, salt=None,
  info="epto-rsm-transfer-v1" | key id)`` (:class:`TransferKey`), apart from
  the keys the group's frames are sealed with;
* the handshake, in clear: the client sends ``MAGIC | key id | Nc``, the
  server answers ``MAGIC | Ns`` (``Nc``, ``Ns``: 16 random bytes each); the
  client-to-server key is ``HKDF-SHA256(K, salt=None, info="c2s" | Nc | Ns)``
  and the server-to-client key the same with ``"s2c"``;
* then records both ways: a 4-byte big-endian length and the AEAD ciphertext
  of 1 to :data:`MAX_PLAINTEXT` bytes, with no associated data, its nonce the
  12-byte big-endian count of records sent before it in that direction.

Both nonces enter both keys, so keys are fresh per connection and a counter
never repeats under a key; a record replayed from another connection,
reflected, reordered, dropped or altered fails authentication. The client's
first record (its request) shows the server that the client holds the group
key, and the server's first record (its answer) shows the same to the client;
neither side takes anything but the other's nonce before a record
authenticated. The protocol above says where its messages end, so a
connection cut at a record boundary is an error there, not a short message.

Every length is checked before anything is read or allocated for it: a
handshake is 25 or 24 bytes, a record at most :data:`MAX_RECORD`. Any fault
raises :class:`ChannelError` with a ``reason`` (the server counts it in
``TransferServer.refused``, the client raises ``TransferError``); the caller
then closes the connection. ``cryptography`` is imported when a
:class:`TransferKey` is built.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

    from epto import GroupKey

MAGIC = b"EPTOxfr\x01"
"""Opens both hellos: protocol and version (its first byte makes it an
impossible length for the plain protocol, whose requests are at most 4 KiB)."""
NONCE_BYTES = 16
TAG_BYTES = 16
MAX_PLAINTEXT = 1 << 16
"""The most a record carries: one chunk of a state."""
MAX_RECORD = MAX_PLAINTEXT + TAG_BYTES
_CLIENT_HELLO = len(MAGIC) + 1 + NONCE_BYTES
_SERVER_HELLO = len(MAGIC) + NONCE_BYTES
_READ = 1 << 18
"""Bytes asked of the socket per read (recv allocates what it is asked for)."""


class ChannelError(Exception):
    """The peer broke the channel; ``reason`` names how: ``bad-magic``,
    ``unknown-key``, ``truncated``, ``bad-length`` or ``bad-tag``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _hkdf(secret: bytes, info: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


class TransferKey:
    """The transfer key derived from a group key (once, by the replica)."""

    def __init__(self, group_key: GroupKey) -> None:
        from cryptography.exceptions import InvalidTag

        self.key_id = group_key.key_id
        self.cipher = group_key.cipher
        self._secret = _hkdf(group_key.secret, b"epto-rsm-transfer-v1" + bytes((self.key_id,)))
        self.invalid_tag = InvalidTag

    def __repr__(self) -> str:
        return f"TransferKey(key_id={self.key_id}, cipher={self.cipher!r}, secret=<hidden>)"

    def aead(self, direction: bytes, nc: bytes, ns: bytes) -> AESGCM | ChaCha20Poly1305:
        """The AEAD of one direction (``b"c2s"`` or ``b"s2c"``) of one connection."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

        key = _hkdf(self._secret, direction + nc + ns)
        return AESGCM(key) if self.cipher == "aes-256-gcm" else ChaCha20Poly1305(key)


class ExactReader:
    """Exact reads from a stream, buffered: what both the channel and the
    transfer protocol read with. At most 1 MiB is asked of the stream at a
    time (``receive_some`` allocates what it is asked for), whatever length
    the caller wants; the caller bounds the lengths. ``closed(got)`` is the
    error raised when the peer closes after ``got`` bytes of a read."""

    def __init__(self, stream: trio.abc.Stream, closed: Callable[[int], Exception]) -> None:
        self.stream = stream
        self._closed = closed
        self._buffer = bytearray()

    async def exactly(self, n: int) -> bytes:
        """``n`` bytes, or the ``closed`` error if the peer closes first."""
        buffer = self._buffer
        while len(buffer) < n:
            chunk = await self.stream.receive_some(min(1 << 20, max(_READ, n - len(buffer))))
            if not chunk:
                raise self._closed(len(buffer))
            buffer += chunk
        if len(buffer) == n:
            # A whole read at once (a state, a record): one copy out, where a
            # slice and then bytes() would copy it twice.
            out = bytes(buffer)
            buffer.clear()
            return out
        with memoryview(buffer) as view:
            out = bytes(view[:n])
        del buffer[:n]
        return out

    async def at_eof(self) -> bool:
        """Whether the peer closed with nothing left to read."""
        if not self._buffer:
            chunk = await self.stream.receive_some(_READ)
            if not chunk:
                return True
            self._buffer += chunk
        return False


def _truncated(got: int) -> ChannelError:
    return ChannelError("truncated", f"the peer closed after {got} bytes")


class SealedStream(trio.abc.Stream):
    """A stream whose bytes travel in AEAD records (see the module). Open
    one with :meth:`client` or :meth:`server` on a connected stream; closing
    it closes that stream."""

    def __init__(
        self,
        source: ExactReader,
        send: AESGCM | ChaCha20Poly1305,
        receive: AESGCM | ChaCha20Poly1305,
        invalid_tag: type[Exception],
    ) -> None:
        self._source = source
        self._stream = source.stream
        self._send = send
        self._receive = receive
        self._invalid_tag = invalid_tag
        self._sent = 0
        self._received = 0
        self._plain = b""
        self._offset = 0
        self._broken: ChannelError | None = None

    @classmethod
    async def client(cls, stream: trio.abc.Stream, key: TransferKey) -> SealedStream:
        """The client's end: sends its hello, takes the server's."""
        # Drawn from the system here, never from a seeded generator: a nonce
        # repeated with the server's would repeat both keys.
        nc = secrets.token_bytes(NONCE_BYTES)
        await stream.send_all(MAGIC + bytes((key.key_id,)) + nc)
        source = ExactReader(stream, _truncated)
        hello = await source.exactly(_SERVER_HELLO)
        if hello[: len(MAGIC)] != MAGIC:
            raise ChannelError("bad-magic", "the server does not speak the sealed transfer")
        ns = hello[len(MAGIC) :]
        return cls(source, key.aead(b"c2s", nc, ns), key.aead(b"s2c", nc, ns), key.invalid_tag)

    @classmethod
    async def server(cls, stream: trio.abc.Stream, key: TransferKey) -> SealedStream:
        """The server's end: takes the client's hello (checked before the
        rest is read), answers with its own."""
        source = ExactReader(stream, _truncated)
        if await source.exactly(len(MAGIC)) != MAGIC:
            raise ChannelError("bad-magic", "the client does not speak the sealed transfer")
        rest = await source.exactly(_CLIENT_HELLO - len(MAGIC))
        if rest[0] != key.key_id:
            raise ChannelError("unknown-key", f"the client holds key {rest[0]}")
        nc = rest[1:]
        ns = secrets.token_bytes(NONCE_BYTES)
        await stream.send_all(MAGIC + ns)
        return cls(source, key.aead(b"s2c", nc, ns), key.aead(b"c2s", nc, ns), key.invalid_tag)

    # -- trio.abc.Stream ------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for i in range(0, len(view), MAX_PLAINTEXT):
            nonce = self._sent.to_bytes(12, "big")
            self._sent += 1
            sealed = self._send.encrypt(nonce, view[i : i + MAX_PLAINTEXT], None)
            await self._stream.send_all(len(sealed).to_bytes(4, "big") + sealed)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Plaintext from the current record, at most ``max_bytes``; b"" when
        the peer closed at a record boundary."""
        if self._offset >= len(self._plain):
            record = await self._record()
            if record is None:
                return b""
            self._plain, self._offset = record, 0
        end = len(self._plain) if max_bytes is None else self._offset + max_bytes
        out = self._plain[self._offset : end]
        self._offset += len(out)
        return out

    async def aclose(self) -> None:
        await self._stream.aclose()

    # -- records --------------------------------------------------------------------

    async def _record(self) -> bytes | None:
        if self._broken is not None:
            raise self._broken
        try:
            if await self._source.at_eof():
                return None
            size = int.from_bytes(await self._source.exactly(4), "big")
            if not TAG_BYTES < size <= MAX_RECORD:
                raise ChannelError("bad-length", f"a record of {size} bytes (limit {MAX_RECORD})")
            sealed = await self._source.exactly(size)
            nonce = self._received.to_bytes(12, "big")
            try:
                plain = self._receive.decrypt(nonce, sealed, None)
            except self._invalid_tag:
                raise ChannelError("bad-tag", "a record failed authentication") from None
        except ChannelError as exc:
            self._broken = exc
            raise
        self._received += 1
        return plain
