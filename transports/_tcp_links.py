"""The outgoing TCP streams of a token-ring node, one per peer.

A peer's frames go through a bounded queue to a task that owns the stream to
that peer: it connects on demand (at most one attempt per
``reconnect_interval``), starts every new stream with this node's address book
(the hello), and writes the frames in the order queued. A broken or absent
stream loses what was queued for the peer; the protocol repairs such losses.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import trio

from epto import ProcessId

from ._common import Address, parse_host_port
from ._tcp_config import TokenRingNodeConfig
from ._tcp_framing import pack_frames

__all__ = ["PeerLinks", "close_quietly"]


class PeerLinks:
    """The senders of one node: ``queue_for(dest)`` and the tasks behind it.

    ``addresses`` is the node's live address table, ``counts`` its transport
    counters (``sent``, ``dropped``, ``connects``, ``connect_failures``),
    ``hello(dest)`` the frames that start a stream to ``dest``, and ``spawn``
    starts a task owned by the node.
    """

    def __init__(
        self,
        config: TokenRingNodeConfig,
        addresses: dict[ProcessId, Address],
        counts: dict[str, int],
        hello: Callable[[ProcessId], list[bytes]],
        spawn: Callable[..., None],
    ) -> None:
        self._config = config
        self._addresses = addresses
        self._counts = counts
        self._hello = hello
        self._spawn = spawn
        self._queues: dict[ProcessId, trio.MemorySendChannel[bytes]] = {}

    def queue_for(self, dest: ProcessId) -> trio.MemorySendChannel[bytes]:
        queue = self._queues.get(dest)
        if queue is None:
            send, receive = trio.open_memory_channel[bytes](self._config.send_queue)
            self._queues[dest] = queue = send
            self._spawn(self._peer_sender, dest, receive)
        return queue

    def send(self, dest: ProcessId, frames: list[bytes], *, count_drops: bool = True) -> None:
        """Queue ``frames`` for ``dest``; dropped (and counted in ``dropped``
        unless ``count_drops`` is false) when its queue is full."""
        queue = self.queue_for(dest)
        for frame in frames:
            try:
                queue.send_nowait(frame)
            except (trio.WouldBlock, trio.ClosedResourceError):
                if count_drops:
                    self._counts["dropped"] += 1

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
                        next_attempt = trio.current_time() + self._config.reconnect_interval
                        continue
                try:
                    await stream.send_all(pack_frames(batch))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._counts["dropped"] += len(batch)
                    await close_quietly(stream)
                    stream = None
                    next_attempt = trio.current_time() + self._config.reconnect_interval
                    continue
                self._counts["sent"] += len(batch)
        finally:
            if stream is not None:
                await close_quietly(stream)

    async def _connect(self, dest: ProcessId, not_before: float) -> trio.SocketStream | None:
        if trio.current_time() < not_before:
            return None
        address = self._addresses.get(dest)
        if address is None:
            return None
        host, port = parse_host_port(address)
        try:
            with trio.fail_after(self._config.connect_timeout):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError):
            self._counts["connect_failures"] += 1
            return None
        self._counts["connects"] += 1
        hello = pack_frames(self._hello(dest))
        if hello:
            try:
                await stream.send_all(hello)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self._counts["connect_failures"] += 1
                await close_quietly(stream)
                return None
        return stream


async def close_quietly(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, OSError):
        await stream.aclose()
