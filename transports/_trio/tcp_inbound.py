"""The incoming TCP streams of a TCP node: each one is admitted (or
refused) by :class:`InboundGate`, then read by its own task, cut into frames,
decoded and handed to the node, until it ends, breaks its framing or times
out (then it is closed; a member reconnects).

What an incoming connection may cost before it proved anything is bounded
(docs/token-ring.md, *Running on a network*):

* at most ``max_connections`` streams at once, ``max_connections_per_address``
  from one remote address: a connection beyond either is closed at once;
* its first frame must arrive within ``handshake_timeout`` and be accepted
  by the endpoint (the token ring's: it authenticates with a group key, or
  decodes without), else the stream is closed;
* until then the reader buffers at most ``first_frame_limit`` bytes and a
  length prefix (it reads no more, and a longer announced length closes the
  stream); only after the first frame passed does it accept frames up to
  ``limits.max_frame_size``. Every stream of this driver opens with the
  endpoint's opening frames (the token ring's first one: a small address
  frame, the hello's), so members are not limited;
* a stream with no accepted frame for ``idle_timeout`` is closed.

Every refusal is counted by reason in :attr:`InboundGate.refused` (the
node's ``statistics().connections_refused``).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable

import attrs
import trio

from epto import Limits
from epto.wire import HEADER_SIZE

from .tcp_config import TcpNodeConfig
from .tcp_framing import FrameReader, FramingError

__all__ = ["Inbound", "InboundGate", "read_stream"]

_RECV_SIZE = 262_144
_FRAMES_PER_TURN = 16
"""Frames fed from one chunk before the reader lets the other tasks run."""

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


@attrs.frozen
class Inbound:
    """Where a reader hands what it cut out of a stream: the node's own
    methods, handed over when it builds its gate (so the gate calls nothing
    of the node but these two)."""

    feed_frame: Callable[[bytes, str], bool | None]
    """Feed one frame from ``peer_host``: True when the endpoint accepted it,
    False when it refused it, None once the node is closed (the reader stops)."""
    refuse: Callable[[str], None]
    """Count a frame the reader could not cut out of the stream (its fault)."""


class InboundGate:
    """Admits, reads and accounts for the incoming streams of one node: the
    handler :func:`trio.serve_listeners` runs for each accepted connection."""

    def __init__(self, config: TcpNodeConfig, inbound: Inbound) -> None:
        self._config = config
        self._limits = config.limits
        self._inbound = inbound
        self._idle = config.idle_timeout
        self.refused: Counter[str] = Counter()
        """Connections closed by the node, by reason."""
        self.open = 0
        """Incoming streams open now."""
        self._per_address: Counter[str] = Counter()
        self._readers: set[FrameReader] = set()
        self._peak = 0

    def buffered(self) -> int:
        """Bytes the open streams' readers hold now."""
        return sum(reader.pending() for reader in self._readers)

    def peak(self) -> int:
        """Most bytes one stream's reader held at once, over every stream."""
        return max([self._peak, *(reader.peak for reader in self._readers)])

    async def __call__(self, stream: trio.SocketStream) -> None:
        config = self._config
        try:
            address = str(stream.socket.getpeername()[0])
        except (OSError, IndexError):
            address = ""
        if self.open >= config.max_connections:
            await self._refuse(stream, "too-many-connections")
            return
        if self._per_address[address] >= config.max_connections_per_address:
            await self._refuse(stream, "too-many-from-address")
            return
        self.open += 1
        self._per_address[address] += 1
        reader = FrameReader(
            max_frame=self._limits.max_frame_size,
            min_frame=HEADER_SIZE,
            first_frame=config.first_frame_limit,
        )
        self._readers.add(reader)
        try:
            reason = await read_stream(
                stream,
                self._limits,
                self._inbound,
                peer_host=address,
                reader=reader,
                handshake_timeout=config.handshake_timeout,
                idle_timeout=self._idle,
            )
            if reason is not None:
                self.refused[reason] += 1
        finally:
            self._readers.discard(reader)
            self._peak = max(self._peak, reader.peak)
            self.open -= 1
            self._per_address[address] -= 1
            if not self._per_address[address]:
                del self._per_address[address]

    async def _refuse(self, stream: trio.SocketStream, reason: str) -> None:
        self.refused[reason] += 1
        with contextlib.suppress(*_BROKEN):
            await stream.aclose()


async def read_stream(
    stream: trio.SocketStream,
    limits: Limits,
    inbound: Inbound,
    *,
    peer_host: str = "",
    reader: FrameReader | None = None,
    handshake_timeout: float = float("inf"),
    idle_timeout: float = float("inf"),
) -> str | None:
    """Read length-prefixed frames from one incoming stream until it ends,
    breaks the framing or times out; return why the node closed it (a key
    of ``connections_refused``), ``None`` when it ended otherwise.

    Until a frame was accepted (``reader`` not yet open) at most
    ``reader.room()`` bytes are read at a time, a first frame that does not
    pass closes the stream, and so does ``handshake_timeout`` (seconds from
    the start) without one. Then ``idle_timeout`` seconds without an accepted
    frame close it."""
    if reader is None:
        reader = FrameReader(max_frame=limits.max_frame_size, min_frame=HEADER_SIZE)
    opened_before = reader.opened
    deadline = trio.current_time() + (idle_timeout if opened_before else handshake_timeout)
    try:
        async with stream:
            while True:
                room = reader.room()
                with trio.move_on_at(deadline) as waited:
                    chunk = await stream.receive_some(
                        _RECV_SIZE if room is None else min(room, _RECV_SIZE)
                    )
                if waited.cancelled_caught:
                    return "idle-timeout" if reader.opened else "handshake-timeout"
                if not chunk:
                    return None
                reader.feed(chunk)
                fed = 0
                while True:
                    try:
                        data = reader.next_frame()
                    except FramingError as error:
                        if not HEADER_SIZE <= error.length <= limits.max_frame_size:
                            inbound.refuse("bad-length")
                        if reader.opened:
                            return None
                        if error.length > reader.limit:
                            return "first-frame-too-large"
                        return "handshake-rejected"
                    if data is None:
                        break
                    accepted = inbound.feed_frame(data, peer_host)
                    if accepted is None:
                        return None
                    if not accepted:
                        if not reader.opened:
                            # The first frame must pass (counted by the endpoint too).
                            return "handshake-rejected"
                        continue
                    if not reader.opened:
                        reader.open()
                    deadline = trio.current_time() + idle_timeout
                    fed += 1
                    if fed % _FRAMES_PER_TURN == 0:
                        # A long chunk: let the other tasks run (send what
                        # these frames produced, a token to pass on).
                        await trio.lowlevel.checkpoint()
    except _BROKEN:
        return None
