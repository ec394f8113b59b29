"""Byte endpoints in the simulator (``Simulation(wire=True)``): each process
runs as a full endpoint (framing, sealing with a group key, signatures,
splitting), and what travels on the simulated links is the bytes of its
frames.

* EpTO (:class:`EptoWireProcess`): a full :class:`epto.endpoint.EptoEndpoint`;
  its frames are datagrams, each independently delayed and lost.
* The token ring and sequencing atoms (:class:`StreamWireProcess`): a full
  :class:`epto.endpoint.TokenRingEndpoint` or
  :class:`epto.endpoint.AtomsEndpoint`, a stream endpoint
  (:class:`epto.endpoint.StreamEndpoint`); its frames travel on simulated
  streams (``_network.py``, :meth:`VirtualNetwork._send_streams`): one
  stream per directed link, opened with the endpoint's ``opening(dest)``
  frames, frames in order while it is up. The receiving side applies the
  TCP driver's rules for an incoming stream (``transports/_trio/tcp_inbound.py``):
  a frame outside ``[HEADER_SIZE, limits.max_frame_size]`` is counted
  (``bad-length``) and closes the stream; the first frame of a stream must
  be at most :data:`FIRST_FRAME_LIMIT` bytes and accepted by the endpoint,
  or the stream is closed; a later refused frame is only counted.

A message-level simulation encodes nothing (the same adapter, without the
framing); a wire simulation makes the endpoint's own decisions too (a frame
too large, forged or bound to another receiver is refused and counted in the
endpoint's statistics), at the cost of encoding every message: meant for
small groups, off by default.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from epto import Config, Delivery, EventId, GroupKey, Limits, ProcessId
from epto.atoms import AtomsProcess
from epto.endpoint import (
    AtomsAdapter,
    AtomsEndpoint,
    EptoAdapter,
    EptoEndpoint,
    NodeConfig,
    TokenRingAdapter,
    TokenRingEndpoint,
    ViewAware,
)
from epto.epidemic import Node, Process
from epto.tokenring import TokenRingProcess
from epto.wire import HEADER_SIZE

FIRST_FRAME_LIMIT = 4096
"""The largest first frame a simulated stream accepts: the TCP driver's
default ``TcpNodeConfig.first_frame_limit`` (a test keeps them equal)."""

StreamId = tuple[int, int, int, int]
"""One stream of a directed link: the link's epoch when it was opened
(``VirtualNetwork._link_epoch``); a break or a close starts a new one."""


class StreamWrite(NamedTuple):
    """What one turn of a process hands one peer's stream: its frames, in
    order, on ``stream``. A write arrives whole or not at all (a stream that
    broke loses what was in flight on it)."""

    frames: tuple[object, ...]
    stream: StreamId


def address(pid: ProcessId) -> str:
    """The simulated address of ``pid`` (never dialled: the simulator routes by id)."""
    return f"sim:{pid}"


class WireProcess:
    """A process behind its full endpoint, driven by the simulator as it
    drives an adapter: inputs are frames (bytes), outputs are
    ``(destination, frame)``; everything else is the endpoint's adapter's.
    :class:`EptoWireProcess` and :class:`StreamWireProcess` add what their
    engine's driver does."""

    __slots__ = ("_now", "adapter", "endpoint", "engine", "pid")

    def __init__(
        self, endpoint: EptoEndpoint | TokenRingEndpoint | AtomsEndpoint, now: float
    ) -> None:
        self.endpoint = endpoint
        self.adapter: EptoAdapter | TokenRingAdapter | AtomsAdapter = endpoint.adapter
        self.pid = endpoint.pid
        self._now = now

    # The simulator's message path: the frame names its sender.

    def receive(self, sender: ProcessId, data: Any, now: float) -> None:
        self._now = now
        if isinstance(data, bytes):
            self.endpoint.receive(data, now)
        else:
            self.endpoint.reject("not-a-frame")

    def handle_timer(self, now: float) -> None:
        self._now = now
        self.endpoint.handle_timer(now)

    def get_timer(self) -> float:
        return self.endpoint.get_timer()

    def messages_to_send(self) -> list[tuple[ProcessId, Any]]:
        return [(t.dest, t.data) for t in self.endpoint.frames_to_send(self._now)]

    def broadcast(self, payload: bytes, now: float) -> EventId:
        self._now = now
        return self.endpoint.broadcast(payload, now)

    def next_delivery(self) -> Delivery | None:
        return self.adapter.next_delivery()

    def deliveries(self) -> Iterator[Delivery]:
        return self.adapter.deliveries()

    def can_broadcast(self) -> bool:
        return self.adapter.can_broadcast()

    def busy(self) -> bool:
        return self.adapter.busy()

    def flushed(self) -> bool:
        return self.adapter.flushed()

    def rejected(self) -> dict[str, int]:
        """Frames this endpoint refused, by fault."""
        return dict(self.endpoint.statistics().rejected)


class EptoWireProcess(WireProcess):
    """An EpTO process behind its full endpoint; frames are datagrams."""

    __slots__ = ("_handle", "process")

    def __init__(
        self,
        pid: ProcessId,
        config: Config,
        *,
        now: float,
        seed: int,
        limits: Limits,
        members: list[ProcessId],
        group_key: GroupKey | None,
    ) -> None:
        node_config = NodeConfig(
            pid=pid,
            bind=address(pid),
            members={p: address(p) for p in members if p != pid},
            epto=config,
            limits=limits,
            group_key=group_key,
            seed=seed,
            incarnation=0,
        )
        endpoint = EptoEndpoint(node_config, now, rng=random.Random(seed), wall=max(0.0, now))
        super().__init__(endpoint, now)
        self.engine: Node | Process = endpoint.adapter.engine
        self.process: Process = endpoint.adapter.process
        self._handle = endpoint.engine

    # Membership: the simulator tells every endpoint of joins and crashes.

    def add_member(self, pid: ProcessId) -> None:
        self._handle.add_member(pid, address(pid))

    def remove_member(self, pid: ProcessId) -> None:
        self._handle.remove_member(pid)


def stream_process(
    config: NodeConfig,
    *,
    now: float,
    rng: random.Random,
    close_stream: Callable[[ProcessId, ProcessId], None],
) -> StreamWireProcess:
    """The stream endpoint of ``config`` (the token ring's, or sequencing
    atoms'), built as a node builds it, behind its wire process."""
    wall = max(0.0, now)
    endpoint: TokenRingEndpoint | AtomsEndpoint
    if config.resolved_mode() == "atoms":
        endpoint = AtomsEndpoint(config, now, rng=rng, wall=wall)
    else:
        endpoint = TokenRingEndpoint(config, now, rng=rng, wall=wall)
    endpoint.set_advertised(address(config.pid))  # what a driver does once it listens
    return StreamWireProcess(endpoint, now, close_stream=close_stream)


class StreamWireProcess(WireProcess):
    """A stream endpoint (the token ring's, sequencing atoms') behind its
    wire process: it receives :class:`StreamWrite` items and checks each
    incoming stream as the TCP driver does (see the module docstring);
    ``close_stream(src, dest)`` closes one in the network."""

    __slots__ = ("_close", "_inbound", "_stream", "streams_closed")

    def __init__(
        self,
        endpoint: TokenRingEndpoint | AtomsEndpoint,
        now: float,
        *,
        close_stream: Callable[[ProcessId, ProcessId], None],
    ) -> None:
        super().__init__(endpoint, now)
        self._stream = endpoint
        self.engine: TokenRingProcess | AtomsProcess = endpoint.adapter.engine
        self._close = close_stream
        self._inbound: dict[ProcessId, tuple[StreamId, bool]] = {}
        """Per sender: the stream last seen from it, and whether its first
        frame passed."""
        self.streams_closed: Counter[str] = Counter()
        """Incoming streams this process closed, by reason (the TCP
        driver's ``connections_refused``)."""

    def broadcast(self, payload: bytes, now: float) -> EventId:
        # The adapter's: an atoms node in several groups publishes to each in
        # turn, as at the message level (the endpoint's own broadcast needs
        # a node of one group); the token ring's endpoint does just this.
        self._now = now
        return self.adapter.broadcast(payload, now)

    def opening(self, dest: ProcessId) -> list[bytes]:
        """The frames a new stream to ``dest`` starts with."""
        return self._stream.opening(dest)

    def messages_to_send(self) -> list[tuple[ProcessId, Any]]:
        endpoint = self.endpoint
        if isinstance(endpoint, ViewAware):
            endpoint.gone()  # a driver lets their links go; the simulator keeps none
        return super().messages_to_send()

    def receive(self, sender: ProcessId, data: Any, now: float) -> None:
        if not isinstance(data, StreamWrite):
            super().receive(sender, data, now)
            return
        self._now = now
        endpoint = self._stream
        max_frame = endpoint.limits.max_frame_size
        seen = self._inbound.get(sender)
        opened = seen is not None and seen[0] == data.stream and seen[1]
        close: str | None = None  # why the stream is closed ("": uncounted)
        for frame in data.frames:
            if not isinstance(frame, bytes):
                endpoint.reject("not-a-frame")
                continue
            size = len(frame)
            if not HEADER_SIZE <= size <= max_frame:
                # The length prefix breaks the framing: the stream ends.
                endpoint.reject("bad-length")
                close = "" if opened else _refusal(size)
                break
            if not opened and size > FIRST_FRAME_LIMIT:
                close = "first-frame-too-large"
                break
            if endpoint.receive(frame, now):
                opened = True
            elif not opened:
                close = "handshake-rejected"  # the first frame must pass
                break
        self._inbound[sender] = (data.stream, opened)
        if close is not None:
            if close:
                self.streams_closed[close] += 1
            self._close(sender, self.pid)


def _refusal(size: int) -> str:
    """Why the TCP driver closes a stream whose first frame has ``size`` bytes
    outside the frame bounds."""
    return "first-frame-too-large" if size > FIRST_FRAME_LIMIT else "handshake-rejected"
