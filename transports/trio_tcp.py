"""The token ring over TCP with trio: reliable FIFO links, as the protocol assumes.

Each node listens on one TCP port and opens one outgoing stream to every peer
it sends to; a stream carries frames in one direction only, each prefixed by
its length (uint32, big-endian, at most ``limits.max_frame_size``), so frames
from one sender to one receiver arrive in the order sent while the stream is
up. A broken stream loses what was in flight and whatever was queued for the
peer; the next frame for that peer opens a new stream (at most one attempt per
``reconnect_interval``). The protocol repairs such losses (retransmission of
the token and of unsequenced messages, fetches, token regeneration).

::

    config = TokenRingNodeConfig(pid=1, bind="127.0.0.1:9001",
                                 members={1: "127.0.0.1:9001", 2: "127.0.0.1:9002"})
    async with TokenRingNode(config) as node:
        node.broadcast(b"hello")
        async for delivery in node:
            print(delivery.event.payload)
"""

from __future__ import annotations

import contextlib
import math
import random
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Self

import attrs
import trio

from epto import (
    ConfigurationError,
    Delivery,
    EventId,
    FrameCodec,
    GroupKey,
    GroupSealer,
    Limits,
    LocalProtocolError,
    ProcessId,
)
from epto._limits import HEADER_SIZE
from epto.tokenring import TokenRingConfig, TokenRingProcess, token_ring_registry
from epto.tokenring._messages import Catchup, DataBatch, Order

from ._addresses import AddressBook, Directory, join_host_port, with_addresses
from ._common import (
    Address,
    DeliveryBuffer,
    DeliveryOverflowError,
    OverflowPolicy,
    parse_host_port,
)

__all__ = [
    "MemberExcludedError",
    "TokenRingNode",
    "TokenRingNodeConfig",
    "TokenRingNodeStatistics",
]

_LENGTH = struct.Struct(">I")
_RECV_SIZE = 262_144
_FRAMES_PER_TURN = 16


def _stream_limits() -> Limits:
    # A catch-up carries up to 4096 sequenced messages (TokenRingProcess); a
    # payload is at most the default window budget (TokenRingConfig.check_limits).
    return Limits.for_frame_size(1 << 20, max_events_per_ball=4096, max_payload_size=524_224)


def encode_split(
    codec: FrameCodec, sender: ProcessId, message: object, *, to: ProcessId | None
) -> list[bytes]:
    """The frames of ``message``; a catch-up, a batch of broadcasts or an order
    notice too big for one frame is split in halves (in order; each part of a
    catch-up keeps ``stable`` and ``oldest``, each part of a notice its state,
    so receiving the parts one after the other is receiving the whole). Raises
    :class:`LocalProtocolError` when a message still does not fit."""
    try:
        return codec.encode(sender, message, to=to)
    except LocalProtocolError:
        parts: tuple[object, object] | None = None
        if isinstance(message, DataBatch) and len(message.events) >= 2:
            half = len(message.events) // 2
            parts = (
                DataBatch(events=message.events[:half]),
                DataBatch(events=message.events[half:]),
            )
        elif isinstance(message, Order) and len(message.assigned) >= 2:
            # Each part carries the state: learning it twice is learning it once.
            half = len(message.assigned) // 2
            parts = (
                attrs.evolve(message, assigned=message.assigned[:half]),
                attrs.evolve(message, assigned=message.assigned[half:]),
            )
        if parts is not None:
            return encode_split(codec, sender, parts[0], to=to) + encode_split(
                codec, sender, parts[1], to=to
            )
        if not isinstance(message, Catchup):
            raise
        n, m = len(message.entries), len(message.events)
        if n + m < 2:
            raise
        if n >= 2:
            first = attrs.evolve(message, entries=message.entries[: n // 2], events=())
            second = attrs.evolve(message, entries=message.entries[n // 2 :])
        else:
            first = attrs.evolve(message, events=message.events[: m // 2])
            second = attrs.evolve(message, entries=(), events=message.events[m // 2 :])
        return encode_split(codec, sender, first, to=to) + encode_split(
            codec, sender, second, to=to
        )


@attrs.frozen(kw_only=True)
class TokenRingNodeConfig:
    """How to run one token-ring node on TCP.

    Bootstrap members all pass the same ``members`` (pid to ``"host:port"``,
    this node included). A new identity joining a running group passes
    ``contacts`` instead (some current members); it learns the other members'
    addresses from them, and they learn its address from the hello at the
    start of its streams (see :mod:`epto.transports._addresses`). Times are in
    seconds.
    """

    pid: ProcessId
    bind: Address = "127.0.0.1:0"
    """Where this node listens; port 0 picks a free port (see ``node.address``)."""
    members: Mapping[ProcessId, Address] = attrs.field(factory=dict)
    contacts: Mapping[ProcessId, Address] = attrs.field(factory=dict)
    """Join a running group through these members (a new identity)."""
    advertise: Address | None = None
    """The address announced to the others in hellos; default the bound
    address, whose unspecified host (``0.0.0.0``) a receiver replaces by the
    address the connection comes from."""
    tokenring: TokenRingConfig = attrs.field(factory=TokenRingConfig)
    group: int = 0
    """Group id carried by every frame; frames of other groups are refused."""
    group_key: GroupKey | None = None
    """Seal every frame under this key (AEAD), bound to its receiver."""
    limits: Limits = attrs.field(factory=_stream_limits)
    """Frame bounds (every member must use the same). Token states and
    catch-ups grow with the unstable messages, hence 1 MiB frames by default."""
    seed: int | None = None
    delivery_buffer: int = 100_000
    overflow: OverflowPolicy = "fail"
    reconnect_interval: float = 0.05
    """Least time between two connection attempts to one peer."""
    connect_timeout: float = 1.0
    send_queue: int = 10_000
    """Frames queued for one peer; beyond that new frames for it are dropped."""
    flush_timeout: float = 5.0
    """Seconds ``aclose()`` waits for this node's own broadcasts to be delivered."""

    def __attrs_post_init__(self) -> None:
        for what, book in (("members", self.members), ("contacts", self.contacts)):
            for pid, address in book.items():
                if not isinstance(pid, int) or not 0 <= pid < 2**64:
                    raise ConfigurationError(f"{what}: process id out of range: {pid!r}")
                parse_host_port(address)
        if self.contacts and set(self.members) - {self.pid}:
            raise ConfigurationError(
                "TokenRingNodeConfig: bootstrap with 'members' or join through 'contacts', not both"
            )
        if self.pid in self.contacts:
            raise ConfigurationError("TokenRingNodeConfig: a node cannot be its own contact")
        if self.advertise is not None:
            parse_host_port(self.advertise)
        # A full view change sends the unstable window in one frame.
        self.tokenring.check_limits(self.limits)


class MemberExcludedError(LocalProtocolError):
    """This member is out of the group's view for good (excluded by a view
    change, its delivered prefix diverged, or it fell too far behind). The node
    has stopped; to take part again, start a new node with a **new** process id
    that joins through ``contacts``."""


@attrs.frozen(kw_only=True, slots=True)
class TokenRingNodeStatistics:
    """The process's counters and the transport's."""

    role: str
    view: int
    instance: int
    core: tuple[ProcessId, ...]
    members: tuple[ProcessId, ...]
    holds_token: bool
    """This member holds the token now."""
    broadcasts: int
    delivered: int
    frames_sent: int
    frames_received: int
    frames_dropped: int
    """Frames lost to a broken or absent stream, or to a full send queue."""
    connects: int
    connect_failures: int
    encode_failures: int
    rejected: Mapping[str, int]
    delivery_queue: int
    deliveries_dropped: int


class TokenRingNode:
    """One token-ring member on TCP; an async context manager owning its tasks."""

    mode = "token-ring"
    """The ordering engine this node runs."""

    def __init__(self, config: TokenRingNodeConfig) -> None:
        self.config = config
        self.address = ""
        self._state = "new"
        self._process: TokenRingProcess | None = None
        self._codec: FrameCodec | None = None
        self._buffer = DeliveryBuffer(config.delivery_buffer, config.overflow)
        self._addresses: dict[ProcessId, Address] = {**config.members, **config.contacts}
        self._directory = Directory(config.pid, self._addresses)
        self._excluded = False
        self._queues: dict[ProcessId, trio.MemorySendChannel[bytes]] = {}
        self._listeners: list[trio.SocketListener] = []
        self._readers = trio.lowlevel.ParkingLot()
        self._wake = trio.lowlevel.ParkingLot()
        self._nursery_cm: Any = None
        self._nursery: trio.Nursery | None = None
        self._scopes: list[trio.CancelScope] = []
        self._own_pending: set[EventId] = set()
        self._flush_due = False
        self._flusher_started = False
        self._flush_lot = trio.lowlevel.ParkingLot()
        self._counts = dict.fromkeys(
            (
                "sent",
                "received",
                "dropped",
                "connects",
                "connect_failures",
                "encode_failures",
            ),
            0,
        )

    # -- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise LocalProtocolError("a node can be entered once")
        cfg = self.config
        rng = random.Random(cfg.seed)
        now = trio.current_time()
        sealer = None
        if cfg.group_key is not None:
            # Nonce counters start at wall-clock microseconds, above any earlier run.
            sealer = GroupSealer(cfg.group_key, counter_start=int(time.time() * 1e6), rng=rng)
        self._codec = FrameCodec(
            group=cfg.group,
            limits=cfg.limits,
            registry=with_addresses(token_ring_registry()),
            sealer=sealer,
            me=cfg.pid,
        )
        if cfg.contacts:
            self._process = TokenRingProcess(
                cfg.pid, cfg.tokenring, rng=rng, now=now, contacts=sorted(cfg.contacts)
            )
        else:
            members = sorted(set(cfg.members) | {cfg.pid})
            self._process = TokenRingProcess(
                cfg.pid, cfg.tokenring, rng=rng, now=now, members=members
            )
        host, port = parse_host_port(cfg.bind)
        self._listeners = await trio.open_tcp_listeners(port, host=host)
        bound = self._listeners[0].socket.getsockname()
        self.address = join_host_port(bound[0], bound[1])
        self._directory.advertised = cfg.advertise or self.address
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        self._state = "running"
        self._spawn(self._serve)
        self._spawn(self._timer_loop)
        return self

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        # Each task runs in its own cancel scope: cancelling the nursery's
        # scope would also cancel the code of the task that entered the node
        # (an 'async with' body calling abort() on its own node).
        scope = trio.CancelScope()
        self._scopes.append(scope)
        if self._state == "closed":
            scope.cancel()

        async def run() -> None:
            with scope:
                await fn(*args)

        assert self._nursery is not None
        self._nursery.start_soon(run)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            if exc_type is None:
                await self.aclose()
            else:
                self.abort()
        finally:
            result: bool | None = await self._nursery_cm.__aexit__(exc_type, exc, tb)
        return result

    async def aclose(self) -> None:
        """Stop broadcasting, wait (at most ``flush_timeout``) until this node's
        own broadcasts are delivered here, so the group has sequenced them, then stop."""
        if self._state != "running":
            self.abort()
            return
        self._state = "closing"
        with trio.move_on_after(self.config.flush_timeout):
            while self._own_pending:
                await self._wake.park()
        self.abort()

    def abort(self) -> None:
        """Stop at once (what a crash looks like to the group)."""
        if self._state == "closed":
            return
        self._state = "closed"
        for scope in self._scopes:
            scope.cancel()
        for listener in self._listeners:
            listener.socket.close()
        self._readers.unpark_all()
        self._wake.unpark_all()

    # -- application API ----------------------------------------------------

    def broadcast(self, payload: bytes) -> EventId:
        """Broadcast ``payload``; it is delivered in the group's total order."""
        if self._state != "running":
            raise LocalProtocolError(f"cannot broadcast on a node that is {self._state}")
        eid = self._require_process().broadcast(payload, trio.current_time())
        self._own_pending.add(eid)
        self._after_input()
        return eid

    def set_address(self, pid: ProcessId, address: Address) -> None:
        """Where ``pid`` is reached from now on (the next connection uses it)."""
        parse_host_port(address)
        self._directory.set(pid, address)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Delivery:
        while True:
            delivery = self._buffer.get()
            if delivery is not None:
                return delivery
            if self._buffer.overflowed:
                raise DeliveryOverflowError(
                    f"more than {self._buffer.capacity} deliveries waited for the application"
                )
            if self._state == "closed":
                if self._excluded:
                    raise MemberExcludedError(
                        f"member {self.config.pid} was excluded from the group's view; "
                        "rejoin with a new process id through contacts"
                    )
                raise StopAsyncIteration
            await self._readers.park()

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    @property
    def excluded(self) -> bool:
        """True once this member is out of the view for good (the node has
        stopped; iterating raises :class:`MemberExcludedError` after the
        deliveries already queued)."""
        return self._excluded

    def addresses(self) -> dict[ProcessId, Address]:
        """Where this node reaches each process it knows of."""
        return dict(self._addresses)

    @property
    def process(self) -> TokenRingProcess:
        return self._require_process()

    def statistics(self) -> TokenRingNodeStatistics:
        s = self._require_process().statistics()
        c = self._counts
        return TokenRingNodeStatistics(
            role=s.role,
            view=s.view,
            instance=s.instance,
            core=s.core,
            members=s.members,
            holds_token=self._require_process().holds_token(),
            broadcasts=s.broadcasts,
            delivered=s.delivered,
            frames_sent=c["sent"],
            frames_received=c["received"],
            frames_dropped=c["dropped"],
            connects=c["connects"],
            connect_failures=c["connect_failures"],
            encode_failures=c["encode_failures"],
            rejected=self._rejected(),
            delivery_queue=len(self._buffer),
            deliveries_dropped=self._buffer.dropped,
        )

    def _rejected(self) -> dict[str, int]:
        rejected = dict(self._codec.rejected) if self._codec is not None else {}
        if self._directory.rejected:
            rejected["bad-address"] = rejected.get("bad-address", 0) + self._directory.rejected
        return rejected

    # -- the loop -----------------------------------------------------------

    def _require_process(self) -> TokenRingProcess:
        if self._process is None:
            raise LocalProtocolError("the node is not started; use 'async with node:'")
        return self._process

    async def _timer_loop(self) -> None:
        process = self._require_process()
        while True:
            deadline = process.get_timer()
            if deadline > trio.current_time():
                with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf):
                    await self._wake.park()
            else:
                # A timer that stays due must not starve the other tasks.
                await trio.lowlevel.checkpoint()
            if trio.current_time() >= process.get_timer():
                process.handle_timer(trio.current_time())
                self._after_input()

    def _after_input(self) -> None:
        """Send what the process wants sent and move its deliveries out, soon:
        a flusher task does it once the current task yields, so that what
        several inputs produce (broadcasts in a row, every frame of one
        received chunk) leaves together."""
        if self._flush_due:
            return  # the flusher is woken already
        self._flush_due = True
        if not self._flusher_started:
            self._flusher_started = True
            self._spawn(self._flusher)
        else:
            self._flush_lot.unpark_all()

    async def _flusher(self) -> None:
        while True:
            if not self._flush_due:
                await self._flush_lot.park()
            self._flush_due = False
            self._flush()

    def _flush(self) -> None:
        process = self._require_process()
        codec = self._codec
        assert codec is not None
        me = self.config.pid
        # Without a sealer a frame does not depend on its receiver: a message
        # sent to every member is encoded once.
        shared = codec.sealer is None
        encoded: dict[int, list[bytes] | None] = {}
        for dest, message in process.messages_to_send():
            if dest == me:
                continue
            frames = encoded.get(id(message)) if shared else None
            if frames is None:
                try:
                    frames = encode_split(codec, me, message, to=dest)
                except LocalProtocolError:
                    self._counts["encode_failures"] += 1
                    continue
                if shared:
                    encoded[id(message)] = frames
            queue = self._queue_for(dest)
            for frame in frames:
                try:
                    queue.send_nowait(frame)
                except (trio.WouldBlock, trio.ClosedResourceError):
                    self._counts["dropped"] += 1
        moved = False
        own = self._own_pending
        put = self._buffer.put
        for delivery in process.deliveries():
            event = delivery.event
            if event.source == me:
                own.discard((me, event.seq))
            if put(delivery):
                moved = True
        if moved or self._buffer.overflowed:
            self._readers.unpark_all()
        if self._buffer.overflowed:
            self.abort()
        self._wake.unpark_all()
        self._watch_view(process)

    def _queue_for(self, dest: ProcessId) -> trio.MemorySendChannel[bytes]:
        queue = self._queues.get(dest)
        if queue is None:
            send, receive = trio.open_memory_channel[bytes](self.config.send_queue)
            self._queues[dest] = queue = send
            self._spawn(self._peer_sender, dest, receive)
        return queue

    # -- links ----------------------------------------------------------------

    async def _peer_sender(self, dest: ProcessId, frames: trio.MemoryReceiveChannel[bytes]) -> None:
        """Owns the outgoing stream to ``dest``: connects on demand, sends in order."""
        stream: trio.SocketStream | None = None
        next_attempt = -math.inf
        try:
            while True:
                batch = [await frames.receive()]
                while True:
                    try:
                        batch.append(frames.receive_nowait())
                    except trio.WouldBlock:
                        break
                if stream is None:
                    stream = await self._connect(dest, next_attempt)
                    if stream is None:
                        # Peer unreachable: what was queued for it is lost.
                        self._counts["dropped"] += len(batch)
                        next_attempt = trio.current_time() + self.config.reconnect_interval
                        continue
                data = b"".join(_LENGTH.pack(len(f)) + f for f in batch)
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._counts["dropped"] += len(batch)
                    await _close_quietly(stream)
                    stream = None
                    next_attempt = trio.current_time() + self.config.reconnect_interval
                    continue
                self._counts["sent"] += len(batch)
        finally:
            if stream is not None:
                await _close_quietly(stream)

    async def _connect(self, dest: ProcessId, not_before: float) -> trio.SocketStream | None:
        if trio.current_time() < not_before:
            return None
        address = self._addresses.get(dest)
        if address is None:
            return None
        host, port = parse_host_port(address)
        try:
            with trio.fail_after(self.config.connect_timeout):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError):
            self._counts["connect_failures"] += 1
            return None
        self._counts["connects"] += 1
        hello = b"".join(_LENGTH.pack(len(f)) + f for f in self._book(dest))
        if hello:
            try:
                await stream.send_all(hello)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self._counts["connect_failures"] += 1
                await _close_quietly(stream)
                return None
        return stream

    # -- addresses ------------------------------------------------------------

    def _book(self, dest: ProcessId) -> list[bytes]:
        """The frames of this node's address book for ``dest``."""
        codec = self._codec
        assert codec is not None
        book = self._directory.book_for(dest, self._require_process().config.members)
        try:
            return codec.encode(self.config.pid, book, to=dest)
        except LocalProtocolError:
            self._counts["encode_failures"] += 1
            return []

    def _learn_addresses(
        self, sender: ProcessId, book: AddressBook, stream: trio.SocketStream
    ) -> None:
        self._directory.learn(sender, book, lambda: str(stream.socket.getpeername()[0]))
        self._watch_view(self._require_process())

    def _watch_view(self, process: TokenRingProcess) -> None:
        """After every input: send this node's address book when it can reach
        new members of the view (:meth:`Directory.to_tell`); stop the node
        once the process is excluded."""
        config = process.config
        for dest in self._directory.to_tell(config.instance, config.members):
            queue = self._queue_for(dest)
            for frame in self._book(dest):
                with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError):
                    queue.send_nowait(frame)
        if process.excluded and self._state != "closed":
            self._excluded = True
            self._readers.unpark_all()
            self.abort()

    async def _serve(self) -> None:
        await trio.serve_listeners(self._handle_stream, self._listeners)

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        """Read length-prefixed frames from one incoming stream until it ends
        or breaks the framing (then it is closed; the sender reconnects)."""
        codec = self._codec
        process = self._require_process()
        assert codec is not None
        max_frame = codec.limits.max_frame_size
        buffer = bytearray()
        try:
            async with stream:
                while True:
                    chunk = await stream.receive_some(_RECV_SIZE)
                    if not chunk:
                        return
                    buffer += chunk
                    pos = 0
                    fed = 0
                    while len(buffer) - pos >= _LENGTH.size:
                        (length,) = _LENGTH.unpack_from(buffer, pos)
                        if length > max_frame or length < HEADER_SIZE:
                            codec.rejected["bad-length"] += 1
                            return
                        if len(buffer) - pos - _LENGTH.size < length:
                            break
                        start = pos + _LENGTH.size
                        pos = start + length
                        now = trio.current_time()
                        frame = codec.receive(bytes(buffer[start:pos]), now)
                        if frame is None:
                            continue
                        if type(frame.message) is AddressBook:
                            self._learn_addresses(frame.sender, frame.message, stream)
                            continue
                        self._counts["received"] += 1
                        if self._state == "closed":
                            return
                        process.receive(frame.sender, frame.message, now)
                        fed += 1
                        if fed % _FRAMES_PER_TURN == 0:
                            # A long chunk: let the other tasks run (send
                            # what these frames produced, a token to pass on).
                            self._after_input()
                            await trio.lowlevel.checkpoint()
                    del buffer[:pos]
                    if fed:
                        self._after_input()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return


async def _close_quietly(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, OSError):
        await stream.aclose()
