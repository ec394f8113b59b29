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
:mod:`._trio.tcp_config`, the stream framing in :mod:`._trio.tcp_framing`, the incoming
streams in :mod:`._trio.tcp_inbound`, the outgoing ones in :mod:`._trio.tcp_links`.

::

    config = TokenRingNodeConfig(pid=1, bind="127.0.0.1:9001",
                                 members={1: "127.0.0.1:9001", 2: "127.0.0.1:9002"})
    async with TokenRingNode(config) as node:
        node.broadcast(b"hello")
        async for delivery in node:
            print(delivery.event.payload)
"""

from __future__ import annotations

import time

import trio

from epto import ProcessId
from epto.endpoint import Address, TokenRingEndpoint, Transmit, join_host_port, parse_host_port
from epto.tokenring import TokenRingProcess

from ._trio.loop import TrioDriver
from ._trio.tcp_config import MemberExcludedError, TokenRingNodeConfig, TokenRingNodeStatistics
from ._trio.tcp_inbound import InboundGate
from ._trio.tcp_links import PeerLinks

__all__ = [
    "MemberExcludedError",
    "TokenRingNode",
    "TokenRingNodeConfig",
    "TokenRingNodeStatistics",
]


class TokenRingNode(TrioDriver):
    """One token-ring member on TCP; an async context manager owning its tasks."""

    mode = "token-ring"

    def __init__(self, config: TokenRingNodeConfig) -> None:
        super().__init__(
            flush_timeout=config.flush_timeout,
            delivery_buffer=config.delivery_buffer,
            overflow=config.overflow,
        )
        self.config = config
        self.address = ""
        self._ring: TokenRingEndpoint | None = None
        self._listeners: list[trio.SocketListener] = []
        self._counts = dict.fromkeys(("sent", "dropped", "connects", "connect_failures"), 0)
        self._links = PeerLinks(config, self._address_of, self._counts, self._opening, self._spawn)
        self._gate = InboundGate(config, self)

    # -- what the driver loop needs -----------------------------------------

    def _open_endpoint(self, now: float) -> TokenRingEndpoint:
        cfg = self.config
        self._ring = TokenRingEndpoint(
            cfg.pid,
            cfg.tokenring,
            now=now,
            wall=time.time(),
            members=cfg.members,
            contacts=cfg.contacts,
            group=cfg.group,
            group_key=cfg.group_key,
            limits=cfg.limits,
            signing_key=cfg.signing_key,
            roster=cfg.roster,
            seed=cfg.seed,
        )
        return self._ring

    async def _open_link(self) -> None:
        host, port = parse_host_port(self.config.bind)
        self._listeners = await trio.open_tcp_listeners(port, host=host)
        bound = self._listeners[0].socket.getsockname()
        self.address = join_host_port(bound[0], bound[1])
        self._require_ring().set_advertised(self.config.advertise or self.address)

    def _start_receiving(self) -> None:
        self._spawn(self._serve)

    async def _serve(self) -> None:
        await trio.serve_listeners(self._gate, self._listeners)

    def _feed_frame(self, data: bytes, peer_host: str) -> bool | None:
        """One frame from an incoming stream (:func:`._trio.tcp_inbound.read_stream`)."""
        if self._state == "closed":
            return None
        return self._arrived(data, peer_host)

    def _refuse(self, fault: str) -> None:
        self._require_loop().refused(fault)

    async def _send(self, out: list[Transmit]) -> None:
        # One queue entry per peer and turn: what a turn produced for a peer
        # leaves in one write.
        by_dest: dict[ProcessId, list[bytes]] = {}
        for transmit in out:
            frames = by_dest.get(transmit.dest)
            if frames is None:
                by_dest[transmit.dest] = frames = []
            frames.append(transmit.data)
        send = self._links.send
        for dest, frames in by_dest.items():
            send(dest, frames)

    def _forget(self, gone: list[ProcessId]) -> None:
        # Members that left the view (excluded, or rejoining under a new
        # identity) are never sent to again: their links stop waiting.
        for pid in gone:
            self._links.forget(pid)

    def _close_link(self) -> None:
        for listener in self._listeners:
            listener.socket.close()

    def _stopped_error(self, reason: str) -> Exception:
        return MemberExcludedError(
            f"member {self.config.pid} left the group's view for good "
            f"({reason}); rejoin with a new process id through contacts",
            reason=reason,
        )

    def _address_of(self, pid: ProcessId) -> Address | None:
        return self._ring.address_of(pid) if self._ring is not None else None

    def _opening(self, dest: ProcessId) -> list[bytes]:
        return self._require_ring().opening(dest)

    def _require_ring(self) -> TokenRingEndpoint:
        if self._ring is None:
            self._require_loop()
        assert self._ring is not None
        return self._ring

    # -- application API ----------------------------------------------------

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    @property
    def excluded(self) -> bool:
        """True once this member is out of the view for good (the node has
        stopped; iterating raises :class:`MemberExcludedError` after the
        deliveries already queued)."""
        return self._ring is not None and self._ring.stopped is not None

    def set_address(self, pid: ProcessId, address: Address) -> None:
        """Where ``pid`` is reached from now on (the next connection uses it)."""
        self._require_ring().set_address(pid, address)

    def addresses(self) -> dict[ProcessId, Address]:
        """Where this node reaches each process it knows of."""
        return self._require_ring().addresses()

    @property
    def process(self) -> TokenRingProcess:
        return self._require_ring().process

    def statistics(self) -> TokenRingNodeStatistics:
        ring = self._require_ring()
        loop = self._require_loop()
        e = ring.statistics()
        s = e.process
        c = self._counts
        gate = self._gate
        return TokenRingNodeStatistics(
            role=s.role,
            view=s.view,
            instance=s.instance,
            core=s.core,
            members=s.members,
            holds_token=e.holds_token,
            broadcasts=e.broadcasts,
            delivered=e.delivered,
            frames_sent=c["sent"],
            frames_received=loop.datagrams_received,
            frames_dropped=c["dropped"],
            connects=c["connects"],
            connect_failures=c["connect_failures"],
            encode_failures=e.encode_failures,
            rejected=e.rejected,
            delivery_queue=len(loop.buffer),
            deliveries_dropped=loop.buffer.dropped,
            connections_refused=dict(gate.refused),
            inbound_streams=gate.open,
            inbound_buffered=gate.buffered(),
            inbound_buffer_peak=gate.peak(),
        )
