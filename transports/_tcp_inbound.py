"""The incoming TCP streams of a token-ring node: each one is admitted (or
refused) by :class:`InboundGate`, then read by its own task, cut into frames,
decoded and handed to the node, until it ends, breaks its framing or times
out (then it is closed; a member reconnects).

What an incoming connection may cost before it proved anything is bounded
(docs/token-ring.md, *Running on a network*):

* at most ``max_connections`` streams at once, ``max_connections_per_address``
  from one remote address: a connection beyond either is closed at once;
* its first frame must arrive within ``handshake_timeout`` and authenticate
  (with a group key) or decode (without), else the stream is closed;
* until then the reader buffers at most ``first_frame_limit`` bytes and a
  length prefix (it reads no more, and a longer announced length closes the
  stream); only after the first frame passed does it accept frames up to
  ``limits.max_frame_size``. Every stream of this driver opens with a small
  address frame (the hello's first frame), so members are not limited;
* a stream with no accepted frame for ``idle_timeout`` is closed.

Every refusal is counted by reason in :attr:`InboundGate.refused` (the
node's ``statistics().connections_refused``).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Protocol

import trio

from epto import FrameCodec, ProcessId
from epto._limits import HEADER_SIZE

from ._addresses import AddressBook
from ._tcp_config import TokenRingNodeConfig
from ._tcp_framing import FrameReader, FramingError

__all__ = ["Inbound", "InboundGate", "read_stream"]

_RECV_SIZE = 262_144
_FRAMES_PER_TURN = 16
"""Frames fed from one chunk before the reader lets the other tasks run."""

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Inbound(Protocol):
    """What a reader hands the decoded frames to (the node)."""

    def _learn_addresses(
        self, sender: ProcessId, book: AddressBook, stream: trio.SocketStream
    ) -> None: ...

    def _deliver_frame(self, sender: ProcessId, message: Any, now: float) -> bool:
        """Feed one message to the process; False once the node is closed
        (the reader stops)."""
        ...

    def _after_input(self) -> None:
        """What the fed frames produced is to be sent, soon."""
        ...


class InboundGate:
    """Admits, reads and accounts for the incoming streams of one node: the
    handler :func:`trio.serve_listeners` runs for each accepted connection."""

    def __init__(self, config: TokenRingNodeConfig, codec: FrameCodec, inbound: Inbound) -> None:
        self._config = config
        self._codec = codec
        self._inbound = inbound
        self._idle = config.idle_after()
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
            max_frame=self._codec.limits.max_frame_size,
            min_frame=HEADER_SIZE,
            first_frame=config.first_frame_limit,
        )
        self._readers.add(reader)
        try:
            reason = await read_stream(
                stream,
                self._codec,
                self._inbound,
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
    codec: FrameCodec,
    inbound: Inbound,
    *,
    reader: FrameReader | None = None,
    handshake_timeout: float = float("inf"),
    idle_timeout: float = float("inf"),
) -> str | None:
    """Read length-prefixed frames from one incoming stream until it ends,
    breaks the framing or times out; return why the node closed it (a key
    of ``connections_refused``), ``None`` when it ended otherwise.

    Until a frame passed ``codec`` (``reader`` not yet open) at most
    ``reader.room()`` bytes are read at a time, a first frame that does not
    pass closes the stream, and so does ``handshake_timeout`` (seconds from
    the start) without one. Then ``idle_timeout`` seconds without an accepted
    frame close it."""
    if reader is None:
        reader = FrameReader(max_frame=codec.limits.max_frame_size, min_frame=HEADER_SIZE)
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
                        if not HEADER_SIZE <= error.length <= codec.limits.max_frame_size:
                            codec.rejected["bad-length"] += 1
                        if reader.opened:
                            return None
                        if error.length > reader.limit:
                            return "first-frame-too-large"
                        return "handshake-rejected"
                    if data is None:
                        break
                    now = trio.current_time()
                    frame = codec.receive(data, now)
                    if frame is None:
                        if not reader.opened:
                            # The first frame must pass (counted by the codec too).
                            return "handshake-rejected"
                        continue
                    if not reader.opened:
                        reader.open()
                    deadline = now + idle_timeout
                    if type(frame.message) is AddressBook:
                        inbound._learn_addresses(frame.sender, frame.message, stream)
                        continue
                    if not inbound._deliver_frame(frame.sender, frame.message, now):
                        return None
                    fed += 1
                    if fed % _FRAMES_PER_TURN == 0:
                        # A long chunk: let the other tasks run (send what
                        # these frames produced, a token to pass on).
                        inbound._after_input()
                        await trio.lowlevel.checkpoint()
                if fed:
                    inbound._after_input()
    except _BROKEN:
        return None
