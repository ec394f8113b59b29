"""The token ring over TCP with trio: reliable FIFO links, as the protocol assumes.

Each node listens on one TCP port and opens one outgoing stream to every peer
it sends to; a stream carries frames in one direction only, each prefixed by
its length (uint32, big-endian, at most ``limits.max_frame_size``), so frames
from one sender to one receiver arrive in the order sent while the stream is
up. What the process sends a peer whose stream is not up yet (it does not
listen yet, or its stream broke) waits for the stream, in order, up to
``send_queue`` frames (beyond that frames are dropped and counted in
``frames_dropped``); connection attempts repeat at most once per
``reconnect_interval``, until the peer leaves the group's view. A broken
stream loses only what was in flight (also counted), which the protocol
repairs (retransmission of the token and of unsequenced messages, fetches,
token regeneration); the driver never sends a frame twice.

The node is in this module; its configuration and statistics are in
:mod:`._tcp_config`, the stream framing in :mod:`._tcp_framing`, the incoming
streams in :mod:`._tcp_inbound`, the outgoing ones in :mod:`._tcp_links`.

::

    config = TokenRingNodeConfig(pid=1, bind="127.0.0.1:9001",
                                 members={1: "127.0.0.1:9001", 2: "127.0.0.1:9002"})
    async with TokenRingNode(config) as node:
        node.broadcast(b"hello")
        async for delivery in node:
            print(delivery.event.payload)
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Self

import attrs
import trio

from epto import (
    Delivery,
    EventId,
    EventSigner,
    FrameCodec,
    GroupSealer,
    LocalProtocolError,
    ProcessId,
    SignatureVerifier,
)
from epto.tokenring import TokenRingConfig, TokenRingProcess, token_ring_registry

from ._addresses import AddressBook, Directory, join_host_port, with_addresses
from ._common import Address, DeliveryBuffer, DeliveryOverflowError, parse_host_port
from ._tasks import TaskOwner
from ._tcp_config import MemberExcludedError, TokenRingNodeConfig, TokenRingNodeStatistics
from ._tcp_framing import encode_split
from ._tcp_inbound import InboundGate
from ._tcp_links import PeerLinks

__all__ = [
    "MemberExcludedError",
    "TokenRingNode",
    "TokenRingNodeConfig",
    "TokenRingNodeStatistics",
    "encode_split",
]


class TokenRingNode(TaskOwner):
    """One token-ring member on TCP; an async context manager owning its tasks."""

    mode = "token-ring"
    """The ordering engine this node runs."""

    def __init__(self, config: TokenRingNodeConfig) -> None:
        super().__init__()
        self.config = config
        self.address = ""
        self._process: TokenRingProcess | None = None
        self._codec: FrameCodec | None = None
        self._buffer = DeliveryBuffer(config.delivery_buffer, config.overflow)
        self._addresses: dict[ProcessId, Address] = {**config.members, **config.contacts}
        self._directory = Directory(config.pid, self._addresses)
        self._excluded = False
        self._listeners: list[trio.SocketListener] = []
        self._readers = trio.lowlevel.ParkingLot()
        self._flushed = trio.lowlevel.ParkingLot()
        self._timer_lot = trio.lowlevel.ParkingLot()
        self._armed = -math.inf
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
        self._links = PeerLinks(config, self._addresses, self._counts, self._hello, self._spawn)
        self._gate: InboundGate | None = None
        self._view = -1
        self._view_members: frozenset[ProcessId] = frozenset()

    # -- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._check_new()
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
                cfg.pid,
                self._ring_config(),
                rng=rng,
                now=now,
                contacts=sorted(cfg.contacts),
                **self._signing(),
            )
        else:
            members = sorted(set(cfg.members) | {cfg.pid})
            self._process = TokenRingProcess(
                cfg.pid,
                self._ring_config(),
                rng=rng,
                now=now,
                members=members,
                **self._signing(),
            )
        self._gate = InboundGate(cfg, self._codec, self)
        host, port = parse_host_port(cfg.bind)
        self._listeners = await trio.open_tcp_listeners(port, host=host)
        bound = self._listeners[0].socket.getsockname()
        self.address = join_host_port(bound[0], bound[1])
        self._directory.advertised = cfg.advertise or self.address
        await self._open_tasks()
        self._spawn(self._serve)
        self._spawn(self._timer_loop)
        return self

    async def aclose(self) -> None:
        """Stop broadcasting, wait (at most ``flush_timeout``) until this node's
        own broadcasts are delivered here, so the group has sequenced them, then stop."""
        if self._state != "running":
            self.abort()
            return
        self._state = "closing"
        with trio.move_on_after(self.config.flush_timeout):
            while self._own_pending:
                await self._flushed.park()
        self.abort()

    def abort(self) -> None:
        """Stop at once (what a crash looks like to the group)."""
        if not self._cancel_tasks():
            return
        for listener in self._listeners:
            listener.socket.close()
        self._readers.unpark_all()
        self._flushed.unpark_all()
        self._timer_lot.unpark_all()

    # -- application API ----------------------------------------------------

    def broadcast(self, payload: bytes) -> EventId:
        """Broadcast ``payload``; it is delivered in the group's total order."""
        if self._state != "running":
            raise LocalProtocolError(f"cannot broadcast on a node that is {self._state}")
        limit = self.config.limits.max_payload_size
        if len(payload) > limit:
            # It could never be framed for the others: refuse it here rather
            # than sequence a message nobody else can receive.
            raise LocalProtocolError(
                f"payload of {len(payload)} bytes exceeds limits.max_payload_size={limit}"
            )
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
                    why = self._process.exclusion if self._process is not None else None
                    raise MemberExcludedError(
                        f"member {self.config.pid} left the group's view for good "
                        f"({why or 'excluded'}); rejoin with a new process id through contacts",
                        reason=why,
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
        gate = self._gate
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
            connections_refused=dict(gate.refused) if gate is not None else {},
            inbound_streams=gate.open if gate is not None else 0,
            inbound_buffered=gate.buffered() if gate is not None else 0,
            inbound_buffer_peak=gate.peak() if gate is not None else 0,
        )

    def _rejected(self) -> dict[str, int]:
        rejected = dict(self._codec.rejected) if self._codec is not None else {}
        if self._directory.rejected:
            rejected["bad-address"] = rejected.get("bad-address", 0) + self._directory.rejected
        if self._process is not None:
            for reason, count in self._process.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + count
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
                # Woken early only when an input moves the timer before
                # ``deadline`` (see _flush), not by every input.
                self._armed = deadline
                with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf):
                    await self._timer_lot.park()
                self._armed = -math.inf
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
        received chunk, the chunks of every stream that were ready together)
        leaves together: fewer and fuller frames."""
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
            while not self._flush_due:
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
            self._links.send(dest, frames)
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
        self._flushed.unpark_all()
        if process.get_timer() < self._armed:
            self._timer_lot.unpark_all()
        self._watch_view(process)

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

    def _hello(self, dest: ProcessId) -> list[bytes]:
        """The frames that open a stream to ``dest``: first a small address
        frame with this node's own entry only (at most ``OPENER_MAX`` bytes,
        an empty book if that entry cannot be encoded), which ``dest`` accepts
        within its ``first_frame_limit`` before it buffers larger frames from
        the stream; then the addresses of the other members."""
        codec = self._codec
        assert codec is not None
        entries = self._directory.book_for(dest, self._require_process().config.members).entries
        try:
            opener = codec.encode(self.config.pid, AddressBook(entries=entries[:1]), to=dest)
        except LocalProtocolError:
            self._counts["encode_failures"] += 1
            opener = codec.encode(self.config.pid, AddressBook(entries=()), to=dest)
        if len(entries) < 2:
            return opener
        try:
            rest = codec.encode(self.config.pid, AddressBook(entries=entries[1:]), to=dest)
        except LocalProtocolError:
            self._counts["encode_failures"] += 1
            rest = []
        return opener + rest

    def _learn_addresses(
        self, sender: ProcessId, book: AddressBook, stream: trio.SocketStream
    ) -> None:
        self._directory.learn(sender, book, lambda: str(stream.socket.getpeername()[0]))
        self._watch_view(self._require_process())

    def _ring_config(self) -> TokenRingConfig:
        """The process's configuration: a signed group admits its roster only
        (unless ``tokenring.allowed_joiners`` says otherwise)."""
        ring = self.config.tokenring
        if self.config.roster is not None and ring.allowed_joiners is None:
            allowed: frozenset[ProcessId] = frozenset(self.config.roster)
            ring = attrs.evolve(ring, allowed_joiners=allowed)
        return ring

    def _signing(self) -> dict[str, Any]:
        """The process's signing hooks for a signed group (docs/security.md)."""
        cfg = self.config
        hooks: dict[str, Any] = {}
        if cfg.signing_key is not None:
            hooks["signer"] = EventSigner(cfg.pid, cfg.signing_key).signature
        if cfg.roster is not None:
            hooks["verifier"] = SignatureVerifier(cfg.roster).check
        return hooks

    def _watch_view(self, process: TokenRingProcess) -> None:
        """After every input: send this node's address book when it can reach
        new members of the view (:meth:`Directory.to_tell`); forget the links
        to members that left the view; stop the node once the process is
        excluded."""
        config = process.config
        for dest in self._directory.to_tell(config.instance, config.members):
            self._links.send(dest, self._book(dest), count_drops=False)
        if config.view != self._view:
            # Members that left the view (excluded, or rejoining under a new
            # identity) are never sent to again: their links stop waiting.
            members = frozenset(config.members)
            for gone in self._view_members - members:
                self._links.forget(gone)
            self._view, self._view_members = config.view, members
        if process.excluded and self._state != "closed":
            self._excluded = True
            self._readers.unpark_all()
            self.abort()

    async def _serve(self) -> None:
        gate = self._gate
        assert gate is not None
        await trio.serve_listeners(gate, self._listeners)

    def _deliver_frame(self, sender: ProcessId, message: Any, now: float) -> bool:
        """One decoded message from a stream (:func:`read_stream`)."""
        self._counts["received"] += 1
        if self._state == "closed":
            return False
        self._require_process().receive(sender, message, now)
        return True
