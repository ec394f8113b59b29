"""State transfer between replicas (:mod:`epto.services.trio_rsm`): a small
request/response protocol over its own TCP connections.

Every message is a 4-byte big-endian length and a JSON object; a snapshot's
state follows its header as raw bytes, in chunks. Requests:

* ``{"op": "snapshot", "need": KEY | null}``: the server waits (at most
  ``wait`` seconds) until its cut reaches ``need``, then answers ``{"cut",
  "applied", "digest", "size", "sha256"}`` and the state.
* ``{"op": "digest", "cut": KEY | null}``: the server waits (at most ``wait``)
  until its cut reaches ``cut``, then answers ``{"digest": HEX | null}``
  (null: that cut left its history).
* ``{"op": "latest"}``: ``{"cut": KEY | null, "digest": HEX}``, at once (an
  audit).
* ``{"op": "state", "cuts": [KEY | null, ...], "wait": SECONDS, "digests":
  [HEX | null, ...], "group": HEX}`` (at most :data:`MAX_CUTS` cuts, ``wait``
  at most :data:`MAX_STATE_WAIT`; ``digests`` and ``group`` optional): the
  server waits at most ``wait`` seconds until its cut reaches the first of
  ``cuts``, then answers ``{"ready": BOOL, "cut": KEY | null, "digest": HEX |
  null, "at": [HEX | null, ...], "view": INT}``: whether it is ready, its
  latest cut and digest, its digest at each of ``cuts`` (null: not one of its
  recent cuts) and the view its node is in (token ring; optional). The
  confirmations of a call's cut (docs/rsm.md, *Acknowledgement*), the start
  of a restarted replica, the choice of a provider and the resolution of a
  divergence all ask this. ``digests`` are the asker's own digests at
  ``cuts``: where the server's equals the asker's, the server notes that it
  shared that prefix with a peer (``matched``: the asker may count it
  towards a majority, so the server must never drop it). ``group`` names the
  set of replica ids the asker counts its majority over (:func:`group_id`);
  a server with a ``group`` of its own refuses a request naming another one
  (``{"error": "group mismatch ..."}``, counted as ``group-mismatch``).

A replica that is not ready answers every request at once, never holding
the connection: ``{"error": "not ready"}`` to ``snapshot`` and ``latest``,
``{"digest": null, "ready": false}`` to ``digest``, and ``state`` with
``"ready": false`` and its own cut (a replica recovering from its disk says
how far its local state goes; it serves nothing).

A request is at most :data:`MAX_REQUEST` bytes; the server serves at most
``max_connections`` connections at once and bounds each by ``wait`` plus the
time to send the state; the client refuses a state larger than its
``max_snapshot_bytes`` or one whose SHA-256 differs, and bounds every read by
its timeout. Nothing the peer sends is executed: the state is handed to the
machine's ``restore`` only after the digest check (:class:`ReplicatedNode`).

With a :class:`~.rsm_channel.TransferKey` (the replicas' group key), server
and client speak all of this inside a :class:`~.rsm_channel.SealedStream`:
a handshake, then AEAD records. The server reads the request only from a
record that authenticated, and counts a broken channel in ``refused`` by its
reason; the client takes nothing before a record authenticated. Without a
key the bytes on the wire are the plain protocol's.

Size: the server and the client of one protocol, each request's encoder
beside its decoder (what one side writes the other reads), so that a change
to a message is one change in one file; the sealed channel under it is a
module of its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from epto.endpoint import Address, parse_host_port
from epto.rsm import OrderKey, Snapshot

from ._rsm_channel import ChannelError, ExactReader, SealedStream, TransferKey

MAX_REQUEST = 4096
CHUNK = 1 << 16
MAX_CUTS = 16
"""Cuts one ``state`` request may ask about."""
MAX_STATE_WAIT = 1.0
"""Seconds a ``state`` request may ask the server to wait for its cut."""


class TransferError(Exception):
    """A peer could not serve, or served something that does not check out."""


def _key(value: Any) -> OrderKey | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64 for v in value)
    ):
        raise TransferError(f"not an order key: {value!r}"[:100])
    return (value[0], value[1], value[2])


def _digest(value: Any) -> bytes | None:
    """A 16-byte digest sent as 32 hex characters, or None for null."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 32:
        raise TransferError(f"not a digest: {value!r}"[:100])
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise TransferError(f"not a digest: {value!r}"[:100]) from None


def _cuts(value: Any) -> list[OrderKey | None]:
    if not isinstance(value, list) or len(value) > MAX_CUTS:
        raise TransferError(f"at most {MAX_CUTS} cuts")
    return [_key(v) for v in value]


def _digests(value: Any, count: int) -> list[bytes | None]:
    if value is None:
        return [None] * count
    if not isinstance(value, list) or len(value) != count:
        raise TransferError(f"not {count} digests")
    return [_digest(v) for v in value]


def group_id(pids: Iterable[int]) -> str:
    """The name of a set of replica ids (16 bytes of BLAKE2b, hex): replicas
    given different ``peers`` count their majorities over different sets."""
    text = ",".join(str(p) for p in sorted(set(pids)))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class GroupMismatchError(Exception):
    """A peer counts its majority over another set of replicas."""


def _wait(value: Any) -> float:
    if value is None:
        return 0.0
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise TransferError(f"not a wait: {value!r}"[:100])
    return min(float(value), MAX_STATE_WAIT)


@attrs.frozen(kw_only=True)
class PeerState:
    """A peer's answer to ``state``: whether it is ready, its latest cut and
    digest, and its digests at the cuts asked about (None: not known there)."""

    ready: bool
    cut: OrderKey | None
    digest: bytes | None
    at: tuple[bytes | None, ...] = ()
    view: int = 0
    """The view its node is in (token ring: the configuration's instance; 0
    where the server does not say)."""


def decode_state(answer: dict[str, Any], asked: int) -> PeerState:
    """The :class:`PeerState` in a server's answer to a ``state`` request
    about ``asked`` cuts; :class:`TransferError` for anything else."""
    if "error" in answer:
        if str(answer["error"]).startswith("group mismatch"):
            raise GroupMismatchError(str(answer["error"])[:200])
        raise TransferError(f"the peer answered an error: {answer['error']!r}"[:200])
    ready = answer.get("ready")
    at = answer.get("at")
    if not isinstance(ready, bool):
        raise TransferError("a state answer without 'ready'")
    if not isinstance(at, list) or len(at) != asked:
        raise TransferError(f"a state answer with other than {asked} digests")
    view = answer.get("view", 0)
    if not isinstance(view, int) or isinstance(view, bool) or not 0 <= view < 2**64:
        raise TransferError(f"not a view: {view!r}"[:100])
    return PeerState(
        ready=ready,
        cut=_key(answer.get("cut")),
        digest=_digest(answer.get("digest")),
        at=tuple(_digest(v) for v in at),
        view=view,
    )


def _peer_closed(got: int) -> TransferError:
    return TransferError("the peer closed the connection")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _send(stream: trio.abc.Stream, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    await stream.send_all(len(data).to_bytes(4, "big") + data)


class _Reader(ExactReader):
    """Exact reads and length-prefixed JSON messages from a stream (bounded
    by the caller's deadline)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream, _peer_closed)

    async def message(self, limit: int) -> dict[str, Any]:
        size = int.from_bytes(await self.exactly(4), "big")
        if size > limit:
            raise TransferError(f"a message of {size} bytes (limit {limit})")
        try:
            value = json.loads(await self.exactly(size))
        except (UnicodeDecodeError, ValueError) as exc:
            raise TransferError(f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise TransferError("not a JSON object")
        return value


class TransferServer:
    """Serves snapshots and digests of one replica.

    ``snapshot()`` takes the replica's current snapshot (awaitable: the
    replica's driver takes it off the event loop); ``ready()`` whether
    it may serve one; ``cut()`` its cut; ``digest_at(cut)`` its digest there; ``wait``
    bounds how long a request may wait for the replica to reach a cut, and
    ``send_timeout`` how long sending a state may take, ``request_timeout``
    how long a connection may take to send its request (the handshake
    included): a peer that connects and says nothing holds one of the
    ``max_connections`` slots that long, not ``wait + send_timeout``; with
    ``key`` every connection is sealed (and one that is not is refused)."""

    def __init__(
        self,
        *,
        snapshot: Callable[[], Awaitable[Snapshot]],
        ready: Callable[[], bool],
        cut: Callable[[], OrderKey | None],
        digest_at: Callable[[OrderKey | None], bytes | None],
        wait: float = 30.0,
        send_timeout: float = 300.0,
        max_connections: int = 16,
        key: TransferKey | None = None,
        request_timeout: float = 10.0,
        view: Callable[[], int] | None = None,
        matched: Callable[[OrderKey, bytes], None] | None = None,
        group: str | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._matched = matched
        self._group = group
        self._view = view
        self._ready = ready
        self._cut = cut
        self._digest_at = digest_at
        self._wait = wait
        self._send_timeout = send_timeout
        self._request_timeout = request_timeout
        self._limit = trio.CapacityLimiter(max_connections)
        self._key = key
        self.refused: dict[str, int] = {}
        self.served = 0
        self._moved = trio.Event()

    def notify(self) -> None:
        """The replica's cut or readiness changed: requests waiting for a cut
        look again (the replica calls this after applying)."""
        self._moved.set()
        self._moved = trio.Event()

    def _refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1

    async def handle(self, stream: trio.abc.Stream) -> None:
        if self._limit.borrowed_tokens >= self._limit.total_tokens:
            self._refuse("too-many-connections")
            await stream.aclose()
            return
        async with self._limit, stream:
            try:
                with trio.fail_after(self._wait + self._send_timeout):
                    channel: trio.abc.Stream = stream
                    with trio.move_on_after(self._request_timeout) as waited:
                        if self._key is not None:
                            channel = await SealedStream.server(stream, self._key)
                        request = await _Reader(channel).message(MAX_REQUEST)
                    if waited.cancelled_caught:
                        self._refuse("request-timeout")
                        return
                    op = request.get("op")
                    if op == "snapshot":
                        await self._serve_snapshot(channel, _key(request.get("need")))
                    elif op == "digest":
                        await self._serve_digest(channel, _key(request.get("cut")))
                    elif op == "latest":
                        await self._serve_latest(channel)
                    elif op == "state":
                        cuts = _cuts(request.get("cuts"))
                        theirs = _digests(request.get("digests"), len(cuts))
                        group = request.get("group")
                        if group is not None and self._group is not None and group != self._group:
                            self._refuse("group-mismatch")
                            await _send(
                                channel,
                                {"error": "group mismatch: the replicas' peers lists differ"},
                            )
                            return
                        await self._serve_state(channel, cuts, _wait(request.get("wait")), theirs)
                    else:
                        self._refuse("bad-request")
            except ChannelError as exc:
                self._refuse(exc.reason)
            except (TransferError, trio.TooSlowError) as exc:
                self._refuse("timeout" if isinstance(exc, trio.TooSlowError) else "bad-request")
            except (trio.BrokenResourceError, OSError):
                self._refuse("broken")

    async def _reached(self, need: OrderKey | None, wait: float | None = None) -> bool:
        """Wait (at most ``wait``, default the server's) until the replica's
        cut reaches ``need``; False at once while the replica is not ready:
        a replica that recovers or fetches its own state answers at once
        instead of holding the asker."""
        with trio.move_on_after(self._wait if wait is None else wait):
            while self._ready():
                cut = self._cut()
                if need is None or (cut is not None and cut >= need):
                    return True
                moved = self._moved
                with trio.move_on_after(0.25):  # a replica may skip notify
                    await moved.wait()
        return False

    async def _serve_snapshot(self, stream: trio.abc.Stream, need: OrderKey | None) -> None:
        if not self._ready():
            await _send(stream, {"error": "not ready"})
            return
        snapshot = await self._snapshot() if await self._reached(need) else None
        if snapshot is None:
            await _send(stream, {"error": "not reached"})
            return
        state = snapshot.state
        await _send(
            stream,
            {
                "cut": None if snapshot.cut is None else list(snapshot.cut),
                "applied": snapshot.applied,
                "digest": snapshot.digest.hex(),
                "size": len(state),
                "sha256": await trio.to_thread.run_sync(_sha256, state),
            },
        )
        view = memoryview(state)
        for i in range(0, len(state), CHUNK):
            await stream.send_all(view[i : i + CHUNK])
        self.served += 1

    async def _serve_digest(self, stream: trio.abc.Stream, cut: OrderKey | None) -> None:
        if not self._ready():
            await _send(stream, {"digest": None, "ready": False})
            return
        digest = self._digest_at(cut) if await self._reached(cut) else None
        await _send(stream, {"digest": None if digest is None else digest.hex()})

    async def _serve_state(
        self,
        stream: trio.abc.Stream,
        cuts: list[OrderKey | None],
        wait: float,
        theirs: list[bytes | None],
    ) -> None:
        if cuts and wait > 0:
            await self._reached(cuts[0], wait)
        ready = self._ready()
        cut = self._cut()
        digest = self._digest_at(cut)
        at = [self._digest_at(c) if ready else None for c in cuts]
        if self._matched is not None:
            # Noted before answering, in the same step as the digests read:
            # the asker can count no match the server did not note.
            for c, mine, other in zip(cuts, at, theirs, strict=True):
                if c is not None and mine is not None and mine == other:
                    self._matched(c, mine)
        answer: dict[str, Any] = {
            "ready": ready,
            "cut": None if cut is None else list(cut),
            "digest": None if digest is None else digest.hex(),
            "at": [None if d is None else d.hex() for d in at],
        }
        if self._view is not None:
            answer["view"] = self._view()
        await _send(stream, answer)

    async def _serve_latest(self, stream: trio.abc.Stream) -> None:
        if not self._ready():
            await _send(stream, {"error": "not ready"})
            return
        cut = self._cut()
        digest = self._digest_at(cut)
        await _send(
            stream,
            {
                "cut": None if cut is None else list(cut),
                "digest": None if digest is None else digest.hex(),
            },
        )


@asynccontextmanager
async def _connect(address: Address, key: TransferKey | None) -> AsyncIterator[trio.abc.Stream]:
    """A connection to ``address``, sealed with ``key`` (closed on the way out)."""
    host, port = parse_host_port(address)
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        yield stream if key is None else await SealedStream.client(stream, key)


_BROKEN = (OSError, trio.BrokenResourceError, trio.TooSlowError, ValueError, ChannelError)
"""What a client turns into a :class:`TransferError`."""


async def fetch_snapshot(
    address: Address,
    need: OrderKey | None,
    *,
    timeout: float,
    max_bytes: int,
    key: TransferKey | None = None,
) -> Snapshot:
    """The snapshot of the replica at ``address`` at a cut reaching ``need``."""
    try:
        with trio.fail_after(timeout):
            async with _connect(address, key) as stream:
                await _send(
                    stream, {"op": "snapshot", "need": None if need is None else list(need)}
                )
                reader = _Reader(stream)
                header = await reader.message(MAX_REQUEST)
                if "error" in header:
                    raise TransferError(f"{address}: {header['error']}"[:200])
                size = header.get("size")
                if not isinstance(size, int) or not 0 <= size <= max_bytes:
                    raise TransferError(f"{address}: a state of {size!r} bytes (limit {max_bytes})")
                state = await reader.exactly(size)
                if await trio.to_thread.run_sync(_sha256, state) != header.get("sha256"):
                    raise TransferError(f"{address}: the state does not match its checksum")
                digest = bytes.fromhex(str(header.get("digest")))
                applied = header.get("applied")
                if len(digest) != 16 or not isinstance(applied, int) or applied < 0:
                    raise TransferError(f"{address}: a malformed header")
                return Snapshot(
                    cut=_key(header.get("cut")), applied=applied, digest=digest, state=state
                )
    except _BROKEN as exc:
        raise TransferError(f"{address}: {type(exc).__name__}: {exc}"[:200]) from None


async def fetch_digest(
    address: Address, cut: OrderKey | None, *, timeout: float, key: TransferKey | None = None
) -> bytes | None:
    """The digest of the replica at ``address`` at ``cut`` (None: unknown there)."""
    try:
        with trio.fail_after(timeout):
            async with _connect(address, key) as stream:
                await _send(stream, {"op": "digest", "cut": None if cut is None else list(cut)})
                answer = await _Reader(stream).message(MAX_REQUEST)
                value = answer.get("digest")
                return None if value is None else bytes.fromhex(str(value))
    except _BROKEN as exc:
        raise TransferError(f"{address}: {type(exc).__name__}: {exc}"[:200]) from None


async def fetch_latest(
    address: Address, *, timeout: float, key: TransferKey | None = None
) -> tuple[OrderKey | None, bytes] | None:
    """The latest cut and digest of the replica at ``address`` (None: not ready)."""
    try:
        with trio.fail_after(timeout):
            async with _connect(address, key) as stream:
                await _send(stream, {"op": "latest"})
                answer = await _Reader(stream).message(MAX_REQUEST)
                if "error" in answer or answer.get("digest") is None:
                    return None
                return _key(answer.get("cut")), bytes.fromhex(str(answer["digest"]))
    except _BROKEN as exc:
        raise TransferError(f"{address}: {type(exc).__name__}: {exc}"[:200]) from None


async def fetch_state(
    address: Address,
    cuts: list[OrderKey | None] | tuple[OrderKey | None, ...] = (),
    *,
    wait: float = 0.0,
    timeout: float,
    key: TransferKey | None = None,
    digests: list[bytes | None] | None = None,
    group: str | None = None,
) -> PeerState:
    """Whether the replica at ``address`` is ready, its latest cut and
    digest, and its digests at ``cuts`` (at most :data:`MAX_CUTS`), once its
    cut reaches the first of them or ``wait`` seconds passed. ``digests``:
    the asker's own at ``cuts`` (the server notes where they match);
    ``group``: :func:`group_id` of the asker's replicas
    (:class:`GroupMismatchError` if the server's differs)."""
    if len(cuts) > MAX_CUTS:
        raise ValueError(f"at most {MAX_CUTS} cuts per request")
    try:
        with trio.fail_after(timeout):
            async with _connect(address, key) as stream:
                request: dict[str, Any] = {
                    "op": "state",
                    "cuts": [None if c is None else list(c) for c in cuts],
                    "wait": min(wait, MAX_STATE_WAIT),
                }
                if digests is not None:
                    if len(digests) != len(cuts):
                        raise ValueError("one digest per cut")
                    request["digests"] = [None if d is None else d.hex() for d in digests]
                if group is not None:
                    request["group"] = group
                await _send(stream, request)
                return decode_state(await _Reader(stream).message(MAX_REQUEST), len(cuts))
    except _BROKEN as exc:
        raise TransferError(f"{address}: {type(exc).__name__}: {exc}"[:200]) from None
