"""Stream endpoints over TCP with trio: reliable FIFO links, as the token ring
(and any engine that assumes them) needs.

:class:`TcpNode` runs any :class:`epto.endpoint.StreamEndpoint`, built by a
factory ``make_endpoint(now)`` when the node starts, with the transport's
settings of a :class:`TcpNodeConfig`. :class:`TokenRingNode` is the token
ring's node: a :class:`TcpNode` over :class:`epto.endpoint.TokenRingEndpoint`,
configured by one flat :class:`TokenRingNodeConfig`.

Each node listens on one TCP port and opens one outgoing stream to every peer
it sends to; a stream carries frames in one direction only, each prefixed by
its length (uint32, big-endian, at most ``limits.max_frame_size``), so frames
from one sender to one receiver arrive in the order sent while the stream is
up. Every new stream starts with the endpoint's ``opening(dest)`` frames.
What the endpoint sends a peer whose stream is not up yet (it does not
listen yet, or its stream broke) waits for the stream, in order, up to
``send_queue`` frames (beyond that frames are dropped and counted in
``frames_dropped``); connection attempts repeat at most once per
``reconnect_interval``, until the peer is ``gone()`` from the endpoint's view.
A broken stream loses only what was in flight (also counted), which the
protocol repairs (the token ring: retransmission of the token and of
unsequenced messages, fetches, token regeneration); the driver never sends a
frame twice.

The nodes are in this module; the configuration and statistics are in
:mod:`._trio.tcp_config` (the transport's) and :mod:`._trio.tcp_tokenring`
(the token ring's), the stream framing in :mod:`._trio.tcp_framing`, the
incoming streams in :mod:`._trio.tcp_inbound`, the outgoing ones in
:mod:`._trio.tcp_links`.

::

    config = TokenRingNodeConfig(pid=1, bind="127.0.0.1:9001",
                                 members={1: "127.0.0.1:9001", 2: "127.0.0.1:9002"})
    async with TokenRingNode(config) as node:
        node.broadcast(b"hello")
        async for delivery in node:
            print(delivery.event.payload)

    # any stream endpoint:
    async with TcpNode(TcpNodeConfig(bind="127.0.0.1:9001"), make_endpoint) as node:
        ...
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs
import trio

from epto import ConfigurationError, ProcessId, SupersededError
from epto.endpoint import (
    Address,
    EndpointStatistics,
    StreamEndpoint,
    TokenRingEndpoint,
    TokenRingHandle,
    Transmit,
    join_host_port,
    parse_host_port,
)
from epto.tokenring import TokenRingProcess

from ._trio.loop import TrioDriver
from ._trio.tcp_config import TcpNodeConfig, TcpNodeStatistics
from ._trio.tcp_inbound import Inbound, InboundGate
from ._trio.tcp_links import PeerLinks
from ._trio.tcp_tokenring import MemberExcludedError, TokenRingNodeConfig, TokenRingNodeStatistics

__all__ = [
    "MemberExcludedError",
    "TcpNode",
    "TcpNodeConfig",
    "TcpNodeStatistics",
    "TokenRingNode",
    "TokenRingNodeConfig",
    "TokenRingNodeStatistics",
]

E = TypeVar("E", bound=StreamEndpoint)

if TYPE_CHECKING:

    def _the_ring_is_a_stream_endpoint(endpoint: TokenRingEndpoint) -> StreamEndpoint:
        return endpoint  # checked by mypy: TokenRingEndpoint has the protocol's surface


class TcpNode(TrioDriver, Generic[E]):
    """One member of a group on TCP, running the stream endpoint that
    ``make_endpoint(now)`` builds when the node starts (``now`` is the
    node's clock, trio's, in seconds); an async context manager owning its
    tasks.

    The endpoint's ``limits.max_frame_size`` must be the configuration's
    (``config.limits``): frames of that size are read from the streams.
    ``statistics()`` is a :class:`TcpNodeStatistics`. When the endpoint
    stops (``stopped``), the node stops, and iterating it raises
    :meth:`_stopped_error` (an :class:`epto.LocalProtocolError` unless a
    subclass says otherwise) after the deliveries already queued.
    """

    def __init__(self, config: TcpNodeConfig, make_endpoint: Callable[[float], E]) -> None:
        super().__init__(
            flush_timeout=config.flush_timeout,
            delivery_buffer=config.delivery_buffer,
            overflow=config.overflow,
        )
        self.tcp_config = config
        """The transport's settings."""
        self.address = ""
        """Where this node listens, once started (``"host:port"``)."""
        self._make_endpoint = make_endpoint
        self._stream: E | None = None
        self._listeners: list[trio.SocketListener] = []
        self._counts = dict.fromkeys(("sent", "dropped", "connects", "connect_failures"), 0)
        self._links = PeerLinks(config, self._address_of, self._counts, self._opening, self._spawn)
        self._gate = InboundGate(config, Inbound(self._feed_frame, self._refuse))

    # -- what the driver loop needs -----------------------------------------

    def _open_endpoint(self, now: float) -> E:
        endpoint = self._make_endpoint(now)
        frame = self.tcp_config.limits.max_frame_size
        if endpoint.limits.max_frame_size != frame:
            raise ConfigurationError(
                f"the endpoint's limits.max_frame_size={endpoint.limits.max_frame_size} "
                f"is not the node's (TcpNodeConfig.limits.max_frame_size={frame})"
            )
        self._stream = endpoint
        return endpoint

    async def _open_link(self) -> None:
        host, port = parse_host_port(self.tcp_config.bind)
        self._listeners = await trio.open_tcp_listeners(port, host=host)
        bound = self._listeners[0].socket.getsockname()
        self.address = join_host_port(bound[0], bound[1])
        self._require_endpoint().set_advertised(self.tcp_config.advertise or self.address)

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

    async def _sent(self) -> None:
        # Leaving: what the endpoint handed out last (its goodbyes) is written
        # on the streams that are up before they close.
        await self._links.drain()

    def _forget(self, gone: list[ProcessId]) -> None:
        # Members that left the view (excluded, or rejoining under a new
        # identity) are never sent to again: their links stop waiting.
        for pid in gone:
            self._links.forget(pid)

    def _close_link(self) -> None:
        for listener in self._listeners:
            listener.socket.close()

    def _address_of(self, pid: ProcessId) -> Address | None:
        return self._stream.address_of(pid) if self._stream is not None else None

    def _opening(self, dest: ProcessId) -> list[bytes]:
        return self._require_endpoint().opening(dest)

    def _require_endpoint(self) -> E:
        if self._stream is None:
            self._require_loop()
        assert self._stream is not None
        return self._stream

    # -- application API ----------------------------------------------------

    @property
    def endpoint(self) -> E:
        """The sans-IO stream endpoint this node runs (once started)."""
        return self._require_endpoint()

    @property
    def pid(self) -> ProcessId:
        """This member's process id (the endpoint's; once started)."""
        return self._require_endpoint().pid

    def statistics(self) -> TcpNodeStatistics:
        return self._tcp_statistics(self._require_endpoint().statistics())

    def _tcp_statistics(self, e: EndpointStatistics) -> TcpNodeStatistics:
        """The transport's counters, with the endpoint's common ones ``e``."""
        loop = self._require_loop()
        c = self._counts
        gate = self._gate
        return TcpNodeStatistics(
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


class TokenRingNode(TcpNode[TokenRingEndpoint]):
    """One token-ring member on TCP; an async context manager owning its tasks."""

    mode = "token-ring"

    def __init__(self, config: TokenRingNodeConfig) -> None:
        self.config = config
        """The configuration; once started, with its incarnation fixed."""
        super().__init__(config.tcp(), self._open_ring)

    def _open_ring(self, now: float) -> TokenRingEndpoint:
        cfg = self.config
        member = self._claim_member(cfg.pid, cfg.data_dir, cfg.incarnation)
        self.config = cfg = attrs.evolve(cfg, incarnation=member.incarnation)
        # A member that ran before (its directory held an earlier incarnation)
        # comes back into its group; it founds one only when told to, or when
        # it is the group's only member (nobody else could admit it).
        restarted = (
            member.previous is not None
            and not cfg.fresh_group
            and bool(set(cfg.members) - {cfg.pid})
        )
        return TokenRingEndpoint(
            cfg.node_config(),
            now,
            rng=random.Random(cfg.seed),
            wall=time.time(),
            restarted=restarted,
        )

    def _stopped_error(self, reason: str) -> Exception:
        stream = self._stream
        if stream is not None and stream.engine.process.superseded:
            return SupersededError(
                f"member {self.config.pid} runs again in a later incarnation, which the "
                f"group admitted in place of this one (incarnation {self.config.incarnation})"
            )
        return MemberExcludedError(
            f"member {self.config.pid} left the group's view for good ({reason}); "
            "start it again (the same id, a new process) to rejoin",
            reason=reason,
        )

    # -- application API ----------------------------------------------------

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    @property
    def incarnation(self) -> int:
        """This start of the member (once started)."""
        return self._require_endpoint().engine.process.incarnation

    @property
    def excluded(self) -> bool:
        """True once this member is out of the view for good (the node has
        stopped; iterating raises :class:`MemberExcludedError` after the
        deliveries already queued)."""
        return self._stream is not None and self._stream.stopped is not None

    @property
    def engine(self) -> TokenRingHandle:
        """The token ring's own operations (:class:`epto.endpoint.TokenRingHandle`:
        the members' addresses, the process inside), once started."""
        return self._require_endpoint().engine

    @property
    def process(self) -> TokenRingProcess:
        """The sans-IO token-ring process inside (``engine.process``), for inspection."""
        return self._require_endpoint().engine.process

    def statistics(self) -> TokenRingNodeStatistics:
        e = self._require_endpoint().statistics()
        s = e.process
        return TokenRingNodeStatistics(
            role=s.role,
            view=s.view,
            instance=s.instance,
            core=s.core,
            members=s.members,
            holds_token=e.holds_token,
            quorum=s.quorum,
            incarnation=s.incarnation,
            **attrs.asdict(self._tcp_statistics(e), recurse=False),
        )
