"""The configuration and the statistics of a TCP node
(:class:`~epto.transports.trio_tcp.TcpNode`), whichever stream endpoint it runs.

:class:`TcpNodeConfig` holds the transport's settings only: where to listen,
the frame bounds, the delivery buffer, the outgoing streams' queues and
retries, and what an incoming connection may cost before its first frame is
accepted. The engine's own settings are its endpoint's, in the node's
:class:`epto.endpoint.NodeConfig` (a token-ring or atoms node derives its
``TcpNodeConfig`` from it unless given one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from epto import ConfigurationError, Limits, ProcessId
from epto.endpoint import OPENER_MAX, Address, NodeConfig, OverflowPolicy, parse_host_port

__all__ = [
    "MIN_FIRST_FRAME",
    "TCP_DEFAULTS",
    "TcpNodeConfig",
    "TcpNodeStatistics",
    "node_transport",
]

MIN_FIRST_FRAME = 512
"""Least ``first_frame_limit`` (above :data:`epto.endpoint.OPENER_MAX`, the
token ring's largest opening frame)."""


def _stream_limits() -> Limits:
    return Limits.for_frame_size(1 << 20)


@attrs.frozen(kw_only=True)
class TcpNodeConfig:
    """How to run one node on TCP, whatever its engine. Times are in seconds.

    Every stream carries frames in one direction, each after its length; a
    node opens one outgoing stream to every peer it sends to and reads one
    incoming stream from every peer that sends to it.
    """

    bind: Address = "127.0.0.1:0"
    """Where this node listens; port 0 picks a free port (see ``node.address``)."""
    advertise: Address | None = None
    """The address the endpoint announces to the others
    (``StreamEndpoint.set_advertised``); default the bound address."""
    limits: Limits = attrs.field(factory=_stream_limits)
    """Frame bounds: the largest frame read from a stream is
    ``limits.max_frame_size`` (every member must use the same, and the
    endpoint's ``limits`` must have it too). Default 1 MiB frames."""
    delivery_buffer: int = 100_000
    """Deliveries waiting for the application, at most."""
    overflow: OverflowPolicy = "fail"
    """What a full delivery buffer does (docs/transports.md)."""
    flush_timeout: float = 5.0
    """Seconds ``aclose()`` waits for the endpoint to say that this node's
    own broadcasts are safe (``Endpoint.flushed``)."""
    reconnect_interval: float = 0.05
    """Least time between two connection attempts to one peer."""
    connect_timeout: float = 1.0
    send_queue: int = 10_000
    """Frames queued for one peer (waiting for the stream to write them, or
    for a stream to the peer to be up); beyond that new frames for it are
    dropped and counted in ``frames_dropped``."""
    max_connections: int = 256
    """Incoming streams open at once (authenticated or not). A connection
    beyond it is closed at once and counted in
    ``statistics().connections_refused["too-many-connections"]``."""
    max_connections_per_address: int = 64
    """Incoming streams open at once from one remote IP address; beyond it a
    new connection is closed at once (``"too-many-from-address"``)."""
    handshake_timeout: float = 5.0
    """Seconds a new incoming stream has to deliver its first frame, which
    the endpoint must accept (``Endpoint.receive`` true), else it is closed
    (``"handshake-timeout"``; a first frame refused is ``"handshake-rejected"``)."""
    first_frame_limit: int = 4096
    """Largest first frame of an incoming stream, in bytes: before a frame of
    the stream was accepted, at most this much (and its length prefix) is
    buffered for it; a longer announced length closes the stream
    (``"first-frame-too-large"``). A stream's first frame is the first of the
    endpoint's ``opening(dest)``, which must therefore fit; after it, frames
    up to ``limits.max_frame_size``."""
    link_delays: Mapping[ProcessId, float] = attrs.field(factory=dict)
    """Seconds every frame to a peer waits before it is written (peer id to
    delay; absent: none): emulates a wide-area link on one machine, for
    measurements and tests. Frames keep their order."""
    idle_timeout: float = 30.0
    """Seconds an incoming stream may go without an accepted frame before it
    is closed (``"idle-timeout"``); ``inf``: never. The engine must send
    every peer something more often (a heartbeat)."""

    def __attrs_post_init__(self) -> None:
        self._check_fields()
        if not self.idle_timeout > 0:
            raise ConfigurationError(
                f"TcpNodeConfig.idle_timeout must be > 0, got {self.idle_timeout!r}"
            )

    def _check_fields(self) -> None:
        """Raise :class:`epto.ConfigurationError`, naming the field, unless the
        transport's fields are valid (the idle timeout aside: who sets it
        checks it)."""
        if self.advertise is not None:
            parse_host_port(self.advertise)
        for name in ("max_connections", "max_connections_per_address"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"TcpNodeConfig.{name} must be an int >= 1, got {value!r}")
        for pid, delay in self.link_delays.items():
            if not (isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0):
                raise ConfigurationError(
                    f"TcpNodeConfig.link_delays[{pid!r}] must be a finite number >= 0, "
                    f"got {delay!r}"
                )
        if not self.handshake_timeout > 0:
            raise ConfigurationError(
                f"TcpNodeConfig.handshake_timeout must be > 0, got {self.handshake_timeout!r}"
            )
        limit = self.first_frame_limit
        frame = self.limits.max_frame_size
        if not isinstance(limit, int) or not MIN_FIRST_FRAME <= limit <= frame:
            raise ConfigurationError(
                f"TcpNodeConfig.first_frame_limit must be an int in [{MIN_FIRST_FRAME}, "
                f"limits.max_frame_size={frame}] (a stream's opening address frame "
                f"takes up to {OPENER_MAX} bytes), got {limit!r}"
            )


@attrs.frozen(kw_only=True, slots=True)
class TcpNodeStatistics:
    """The endpoint's common counters and the transport's."""

    broadcasts: int
    delivered: int
    frames_sent: int
    frames_received: int
    """Frames read from incoming streams (opening frames and refused ones included)."""
    frames_dropped: int
    """Frames lost in a stream that broke while writing them, or refused by a
    full send queue (frames for a peer not reachable yet wait instead)."""
    connects: int
    connect_failures: int
    encode_failures: int
    rejected: Mapping[str, int]
    delivery_queue: int
    deliveries_dropped: int
    connections_refused: Mapping[str, int] = attrs.field(factory=dict)
    """Incoming connections closed by the node, by reason:
    ``too-many-connections``, ``too-many-from-address`` (refused at once),
    ``first-frame-too-large``, ``handshake-rejected``, ``handshake-timeout``
    (before their first frame was accepted), ``idle-timeout`` (after)."""
    inbound_streams: int = 0
    """Incoming streams open now (any stage)."""
    inbound_buffered: int = 0
    """Bytes the incoming streams' readers hold now (partial frames)."""
    inbound_buffer_peak: int = 0
    """Most bytes one incoming stream's reader held at once since the start."""


TCP_DEFAULTS = TcpNodeConfig()
"""The transport's settings left at their defaults (what a given setting is
compared with)."""

_SHARED = ("bind", "advertise", "delivery_buffer", "overflow", "flush_timeout")
"""The fields both :class:`NodeConfig` and :class:`TcpNodeConfig` have: the
node configuration's values are the ones in effect."""


def node_transport(
    owner: str,
    config: NodeConfig,
    tcp: TcpNodeConfig | None,
    *,
    bind: str,
    limits: Limits,
    idle_timeout: float | None = None,
) -> TcpNodeConfig:
    """The transport settings of a TCP node built from ``config``: derived
    from it when ``tcp`` is None (``bind`` and ``limits`` as the node
    computed them, the other shared fields as configured); else ``tcp``,
    whose shared fields and limits must be left at their defaults or agree
    with the configuration (they are set there), or
    :class:`epto.ConfigurationError` names the field. ``idle_timeout``, when
    given, replaces the transport's."""
    shared: dict[str, Any] = {name: getattr(config, name) for name in _SHARED}
    shared["bind"] = bind
    shared["limits"] = limits
    if idle_timeout is not None:
        shared["idle_timeout"] = idle_timeout
    if tcp is None:
        return TcpNodeConfig(**shared)
    for name, ours in shared.items():
        given = getattr(tcp, name)
        if name != "idle_timeout" and given != getattr(TCP_DEFAULTS, name) and given != ours:
            raise ConfigurationError(
                f"{owner}: tcp.{name}={given!r} is not the configuration's ({ours!r}); "
                "set it in the NodeConfig"
            )
    return attrs.evolve(tcp, **shared)
