"""Stream endpoints over TCP with trio: reliable FIFO links, as the token ring
(and any engine that assumes them) needs.

:class:`TcpNode` runs any :class:`epto.endpoint.StreamEndpoint`, built by a
factory ``make_endpoint(now)`` when the node starts, with the transport's
settings of a :class:`TcpNodeConfig`. :class:`TokenRingNode` is the token
ring's node: a :class:`TcpNode` over :class:`epto.endpoint.TokenRingEndpoint`,
configured like every node by one :class:`epto.endpoint.NodeConfig`
(``mode="token-ring"``), the transport's settings derived from it unless
given beside it.

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

    config = NodeConfig(pid=1, bind="127.0.0.1:9001", mode="token-ring",
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

from epto import ConfigurationError, Limits, ProcessId, SupersededError
from epto.endpoint import (
    Address,
    EndpointStatistics,
    NodeConfig,
    StreamEndpoint,
    TokenRingEndpoint,
    TokenRingHandle,
    Transmit,
    join_host_port,
    parse_host_port,
)
from epto.tokenring import TokenRingProcess

from ._trio.loop import TrioDriver
from ._trio.tcp_config import TCP_DEFAULTS, TcpNodeConfig, TcpNodeStatistics, node_transport
from ._trio.tcp_inbound import Inbound, InboundGate
from ._trio.tcp_links import PeerLinks
from ._trio.tcp_tokenring import MemberExcludedError, TokenRingNodeStatistics, ring_limits

__all__ = [
    "MemberExcludedError",
    "TcpNode",
    "TcpNodeConfig",
    "TcpNodeStatistics",
    "TokenRingNode",
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
    """One token-ring member on TCP; an async context manager owning its tasks.

    Built from one :class:`epto.endpoint.NodeConfig` with
    ``mode="token-ring"`` (or ``"auto"`` resolving to it), like every node;
    ``config.tokenring`` holds the token ring's parameters. Every
    ``"host:port"`` of the configuration is a TCP address; the node listens
    on ``bind`` (port 0 picks a free port, see ``address``). Bootstrap
    members all pass the same ``members`` (pid to address, this node
    included); a new identity joining a running group passes ``contacts``
    instead (some current members); it learns the other members' addresses
    from them, and they learn its address from the hello at the start of its
    streams (see :mod:`epto.transports._addresses`).

    ``data_dir`` keeps the member's last incarnation (``NodeConfig.data_dir``)
    and its vote (``tokenring.durability``, ``"fsync"`` by default). A start
    that finds an earlier incarnation there is a *restart*: the member asks
    the other members to admit it back instead of founding a group at
    position 0 (unless ``fresh_group``, or it is the group's only member),
    and a majority restarted at once comes back on its own
    (docs/token-ring.md, *Restart*, *A majority restarted at once*).

    ``tcp`` (:class:`TcpNodeConfig`) holds the transport's other settings
    (queues, retries, what an incoming connection may cost, link delays).
    By default they derive from the configuration: its ``bind``,
    ``advertise``, ``delivery_buffer``, ``overflow``, ``flush_timeout`` and
    limits (:meth:`stream_limits`), and the idle timeout ``max(30, 2 *
    tokenring.exclude_timeout)``: every member sends every other member a
    heartbeat each ``tokenring.heartbeat_interval`` (a joining process a join
    each ``change_timeout``), so a live member's stream is never idle that
    long. In a given ``tcp``, the fields it shares with the configuration
    and ``limits`` must be left at their defaults or agree with it (they are
    set in the configuration), and an ``idle_timeout`` other than the default
    must be at least ``3 * max(tokenring.suspect_timeout,
    tokenring.change_timeout)`` (at the default, it is derived as above).

    Raises :class:`epto.ConfigurationError` for a configuration the node
    cannot run: another engine's mode, a window budget that a full view
    change could not send in one frame (``TokenRingConfig.check_limits``), a
    node that is its own contact, a ``tcp`` that contradicts the
    configuration or an idle timeout too short for the heartbeats.
    """

    mode = "token-ring"

    def __init__(self, config: NodeConfig, *, tcp: TcpNodeConfig | None = None) -> None:
        if config.resolved_mode() != "token-ring":
            raise ConfigurationError(
                "TokenRingNode runs the token ring: it needs NodeConfig(mode='token-ring') "
                f"(or 'auto' resolving to it), got mode={config.mode!r}, which resolves to "
                f"{config.resolved_mode()!r} (open_node picks the node for a mode)"
            )
        for book in (config.members, config.contacts):
            for address in book.values():
                parse_host_port(address)
        if config.pid in config.contacts:
            raise ConfigurationError("NodeConfig.contacts: a node cannot be its own contact")
        limits = self.stream_limits(config)
        # A full view change sends the unstable window in one frame.
        config.tokenring.check_limits(limits)
        idle = max(30.0, 2 * config.tokenring.exclude_timeout)
        if tcp is not None and tcp.idle_timeout != TCP_DEFAULTS.idle_timeout:
            ring = config.tokenring
            least = 3 * max(ring.suspect_timeout, ring.change_timeout)
            if not tcp.idle_timeout >= least:
                raise ConfigurationError(
                    "TokenRingNode: tcp.idle_timeout must be at least 3 * max("
                    f"tokenring.suspect_timeout, tokenring.change_timeout) = {least!r} "
                    f"(live members send heartbeats more often), got {tcp.idle_timeout!r}"
                )
            idle = tcp.idle_timeout
        tcp = node_transport(
            "TokenRingNode", config, tcp, bind=config.bind, limits=limits, idle_timeout=idle
        )
        self.config = attrs.evolve(config, limits=limits)
        """The configuration (with the limits in effect); once started, with
        its incarnation fixed."""
        super().__init__(tcp, self._open_ring)

    @staticmethod
    def stream_limits(config: NodeConfig) -> Limits:
        """The frame bounds a token-ring node runs with: ``config.limits``,
        or, when it is left at its default (``epto.Limits()``, sized for one
        UDP datagram), the token ring's stream limits (1 MiB frames, since
        token states and catch-ups grow with the unstable messages)."""
        return ring_limits(config)

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
            cfg,
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
