"""A gateway: a member of a running group that broadcasts what Spark tasks send it.

:class:`Gateway` wraps one trio group node (EpTO or the token ring, anything
with ``broadcast``, async iteration of deliveries and ``pid``) and listens on
TCP for the sink's tasks (:mod:`epto.spark._client` has the protocol). It
owns the node's delivery stream: it acknowledges the events it broadcast once
the node delivered them, then hands every delivery to ``on_delivery``.

Everything a connection sends is hostile until checked: frames are bounded
(one event payload of at most ``max_payload`` bytes), an event must decode as
a sink event, a connection may leave at most ``window`` events
unacknowledged (a slot frees when its acknowledgement is written, so a peer
that does not read them stalls only itself), the token, when set, must match,
and a connection that sends nothing for ``idle_timeout`` seconds while it has
nothing outstanding is closed. Each refusal is counted in
``statistics.rejected``; none stops the node.

Connections that have not authenticated cannot crowd out a writer: the first
message (the token) must arrive whole within ``hello_timeout`` seconds of the
connection's acceptance, whatever the peer trickles meanwhile; at most
``max_unauthenticated`` connections wait for it, and one more evicts the one
that has waited longest (so a writer that sends its token at once gets its
turn however many silent connections are opened); and only authenticated
connections count against ``max_connections`` (more are refused at once, or
right after their token when several authenticate at the same moment).
Without a token anyone authenticates with the empty one, and then
``max_connections`` connections that authenticate and fall silent hold the
gateway for ``idle_timeout``: set a token wherever others can connect.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from epto import Delivery, EventId

from ._client import (
    CHUNK,
    FRAME_LEN,
    HELLO,
    HELLO_CHUNK,
    HELLO_MAGIC,
    MAX_REASON,
    MAX_TOKEN,
    parse_address,
)
from ._rows import SinkFormatError, decode_event

if TYPE_CHECKING:
    from epto.transports.trio_node import GroupNode


@attrs.define(slots=True)
class GatewayStatistics:
    """Counters of a :class:`Gateway`."""

    connections: int = 0
    """Connections accepted (refused ones not included)."""
    open_connections: int = 0
    """Connections open now, authenticated or not."""
    authenticating: int = 0
    """Connections now waiting to authenticate (at most ``max_unauthenticated``)."""
    events: int = 0
    """Events broadcast for the sink."""
    rows: int = 0
    """Rows in those events (a retried task's rows count again)."""
    acknowledged: int = 0
    """Events acknowledged to a connection after the node delivered them."""
    rejected: dict[str, int] = attrs.field(factory=dict)
    """Refusals by reason: ``connections`` (``max_connections`` authenticated
    connections are open), ``hello-timeout`` (no token within
    ``hello_timeout``), ``hello-evicted`` (``max_unauthenticated`` younger
    connections were waiting to authenticate), ``token``, ``frame-size``,
    ``malformed``, ``idle``, ``broadcast`` (the node refused the payload),
    ``error`` (an unexpected failure while serving a connection)."""

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


class _Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _Connection:
    def __init__(self, stream: trio.SocketStream, window: int) -> None:
        self.stream = stream
        self.slots = trio.Semaphore(window)
        self.outstanding = 0
        self.buffer = bytearray()
        self.open = True
        self.evicted = False
        # Events broadcast for this connection and not delivered yet.
        self.eids: set[EventId] = set()
        self.send_lock = trio.Lock()
        # Acknowledgements to send: at most ``window`` (one per slot taken).
        self.acks, self._ack_source = trio.open_memory_channel[int](window)

    async def read_exact(self, n: int, limit: float) -> bytes:
        while len(self.buffer) < n:
            with trio.move_on_after(limit) as scope:
                part = await self.stream.receive_some(max(65536, n - len(self.buffer)))
            if scope.cancelled_caught:
                if self.outstanding:
                    continue  # waiting for acknowledgements is not idling
                raise _Refused("idle", "idle connection")
            if not part:
                raise EOFError
            self.buffer += part
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    async def send_frame(self, body: bytes) -> None:
        if not self.open:
            return
        async with self.send_lock:
            try:
                await self.stream.send_all(FRAME_LEN.pack(len(body)) + body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.open = False

    async def send_acks(self) -> None:
        """Send acknowledgements; a slot frees only once its acknowledgement
        was written, so a peer that does not read them stalls only itself."""
        async for chunk in self._ack_source:
            await self.send_frame(b"A" + CHUNK.pack(chunk))
            self.outstanding -= 1
            self.slots.release()


class Gateway:
    """Broadcast sink events that Spark tasks send over TCP into ``node``'s group.

    ``bind`` is ``host:port`` (port 0 picks one; :attr:`address` says which
    once :meth:`run` started). ``max_payload`` must not exceed the group's
    ``Limits.max_payload_size``. ``hello_timeout`` and ``max_unauthenticated``
    bound the connections that have not sent the token yet (see the module's
    docstring). Run it in the nursery that holds the node::

        async with open_node(config) as node:
            gateway = Gateway(node, "127.0.0.1:7600", max_payload=60_000)
            await nursery.start(gateway.run)
    """

    def __init__(
        self,
        node: GroupNode,
        bind: str = "127.0.0.1:0",
        *,
        max_payload: int = 1024,
        window: int = 64,
        max_connections: int = 64,
        idle_timeout: float = 120.0,
        hello_timeout: float = 5.0,
        max_unauthenticated: int = 16,
        token: bytes = b"",
        on_delivery: Callable[[Delivery], Any] | None = None,
    ) -> None:
        if len(token) > MAX_TOKEN:
            raise ValueError(f"token longer than {MAX_TOKEN} bytes")
        if not hello_timeout > 0:
            raise ValueError(f"hello_timeout must be > 0, got {hello_timeout!r}")
        if not max_unauthenticated >= 1:
            raise ValueError(f"max_unauthenticated must be >= 1, got {max_unauthenticated!r}")
        self.node = node
        self.bind = bind
        self.max_payload = max_payload
        self.window = window
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.hello_timeout = hello_timeout
        self.max_unauthenticated = max_unauthenticated
        self.token = token
        self.on_delivery = on_delivery
        self.statistics = GatewayStatistics()
        self.address = bind
        self._pending: dict[EventId, tuple[_Connection, int]] = {}
        # Connections waiting to authenticate, oldest first, each with the
        # scope that bounds its wait (cancelled to evict it).
        self._waiting: dict[_Connection, trio.CancelScope] = {}
        self._authenticated = 0

    async def run(self, *, pump: bool = True, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and pump deliveries until cancelled.

        With ``pump=False`` the caller keeps the node's delivery stream and
        hands every delivery to :meth:`delivered` itself.
        """
        host, port = parse_address(self.bind)
        listeners = await trio.open_tcp_listeners(port, host=host)
        sockname = listeners[0].socket.getsockname()
        self.address = f"{sockname[0]}:{sockname[1]}"
        async with trio.open_nursery() as nursery:
            if pump:
                nursery.start_soon(self._pump)
            nursery.start_soon(trio.serve_listeners, self._serve, listeners)
            task_status.started(self.address)

    async def _pump(self) -> None:
        async for delivery in self.node:
            self.delivered(delivery)

    def delivered(self, delivery: Delivery) -> None:
        """Take one of the node's deliveries: acknowledge it if a connection
        waits for it, then hand it to ``on_delivery``."""
        waiting = self._pending.pop(delivery.event.id, None)
        if waiting is not None:
            conn, chunk = waiting
            conn.eids.discard(delivery.event.id)
            # Never blocks: the channel holds a slot's worth per event.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                conn.acks.send_nowait(chunk)
                self.statistics.acknowledged += 1
        if self.on_delivery is not None:
            self.on_delivery(delivery)

    async def _serve(self, stream: trio.SocketStream) -> None:
        stats = self.statistics
        if self._authenticated >= self.max_connections:
            stats.reject("connections")
            await _refuse(stream, "too many connections")
            return
        if len(self._waiting) >= self.max_unauthenticated:
            oldest = next(iter(self._waiting))
            oldest.evicted = True
            self._waiting[oldest].cancel()
            self._stop_waiting(oldest)
        stats.connections += 1
        stats.open_connections += 1
        conn = _Connection(stream, self.window)
        hello = trio.CancelScope(deadline=trio.current_time() + self.hello_timeout)
        self._waiting[conn] = hello
        stats.authenticating = len(self._waiting)
        authenticated = counted = False
        refused: _Refused | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.send_acks)
                try:
                    with hello:
                        await stream.send_all(
                            HELLO.pack(HELLO_MAGIC, self.max_payload, self.window)
                        )
                        await self._authenticate(conn)
                        authenticated = True
                    self._stop_waiting(conn)
                    if not authenticated:
                        raise _hello_refusal(conn, self.hello_timeout)
                    if self._authenticated >= self.max_connections:
                        raise _Refused("connections", "too many connections")
                    self._authenticated += 1
                    counted = True
                    await conn.send_frame(b"A" + CHUNK.pack(HELLO_CHUNK))
                    await self._converse(conn)
                except _Refused as exc:
                    refused = exc
                except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                finally:
                    nursery.cancel_scope.cancel()
            if refused is not None:
                stats.reject(refused.reason)
                # Bounded: a peer that does not read must not keep the connection.
                with trio.move_on_after(5 if authenticated else 1):
                    await conn.send_frame(b"R" + str(refused).encode()[:MAX_REASON])
        except Exception:  # a bug here must not take the node down with it
            stats.reject("error")
        finally:
            self._stop_waiting(conn)
            if counted:
                self._authenticated -= 1
            # Its events are still delivered; nobody waits for their
            # acknowledgements now (an event never delivered must not keep
            # the connection's state for ever).
            for eid in conn.eids:
                self._pending.pop(eid, None)
            conn.eids.clear()
            conn.open = False
            conn.acks.close()
            stats.open_connections -= 1
            await trio.aclose_forcefully(stream)

    def _stop_waiting(self, conn: _Connection) -> None:
        """``conn`` no longer waits to authenticate (it did, failed or was evicted)."""
        self._waiting.pop(conn, None)
        self.statistics.authenticating = len(self._waiting)

    async def _frame(self, conn: _Connection, limit: int) -> bytes:
        (length,) = FRAME_LEN.unpack(await conn.read_exact(FRAME_LEN.size, self.idle_timeout))
        if length > limit:
            raise _Refused("frame-size", f"frame of {length} bytes exceeds {limit}")
        return await conn.read_exact(length, self.idle_timeout)

    async def _authenticate(self, conn: _Connection) -> None:
        """Read the first frame, the token (the caller bounds the wait)."""
        hello = await self._frame(conn, 1 + MAX_TOKEN)
        if hello[:1] != b"H" or not hmac.compare_digest(hello[1:], self.token):
            raise _Refused("token", "wrong token")

    async def _converse(self, conn: _Connection) -> None:
        """Broadcast an authenticated connection's events."""
        while True:
            body = await self._frame(conn, 1 + CHUNK.size + self.max_payload)
            if body[:1] != b"E" or len(body) < 1 + CHUNK.size:
                raise _Refused("malformed", "unknown frame")
            (chunk,) = CHUNK.unpack_from(body, 1)
            payload = body[1 + CHUNK.size :]
            try:
                event = decode_event(payload)
            except SinkFormatError as exc:
                raise _Refused("malformed", f"not a sink event: {exc}") from None
            await conn.slots.acquire()
            try:
                eid = self.node.broadcast(payload)
            except Exception as exc:  # the node refuses; the connection goes, the node stays
                conn.slots.release()
                raise _Refused("broadcast", f"the node refused the event: {exc}") from None
            conn.outstanding += 1
            conn.eids.add(eid)
            self._pending[eid] = (conn, chunk)
            self.statistics.events += 1
            self.statistics.rows += len(event.values)


def _hello_refusal(conn: _Connection, timeout: float) -> _Refused:
    if conn.evicted:
        return _Refused("hello-evicted", "too many connections waiting to authenticate")
    return _Refused("hello-timeout", f"no token within {timeout:g} s")


async def _refuse(stream: trio.SocketStream, reason: str) -> None:
    with trio.move_on_after(1):
        try:
            await stream.send_all(HELLO.pack(HELLO_MAGIC, 0, 0))
            body = b"R" + reason.encode()
            await stream.send_all(FRAME_LEN.pack(len(body)) + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await trio.aclose_forcefully(stream)
