"""The outgoing TCP streams of a token-ring node, one per peer.

A peer's stream is owned by a task: it connects on demand (at most one
attempt per ``reconnect_interval``), starts every new stream with this node's
address book (the hello), and writes what is queued for the peer, in order.
While the stream is up and nothing waits in the queue, :meth:`PeerLinks.send`
writes the frames at once, without waking the task (a non-blocking send into
the kernel's socket buffer); what the buffer does not take is queued behind,
for the task. A broken or absent stream loses what was queued for the peer;
the protocol repairs such losses.
"""

from __future__ import annotations

import contextlib
import math
import socket
from collections import deque
from collections.abc import Callable

import trio

from epto import ProcessId

from ._common import Address, parse_host_port
from ._tcp_config import TokenRingNodeConfig
from ._tcp_framing import pack_frames

__all__ = ["PeerLinks", "close_quietly"]

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Link:
    """The state of the stream to one peer."""

    __slots__ = ("busy", "frames", "lot", "queue", "raw", "stream")

    def __init__(self) -> None:
        self.stream: trio.SocketStream | None = None
        self.raw: socket.socket | None = None
        """A duplicate of the stream's descriptor, for sends that never wait."""
        self.queue: deque[tuple[bytes, int]] = deque()
        """Bytes to write in order, each with the number of frames it completes."""
        self.frames = 0
        """Frames in ``queue``."""
        self.busy = False
        """The task is connecting or writing: new frames go behind the queue."""
        self.lot = trio.lowlevel.ParkingLot()


class PeerLinks:
    """The senders of one node: :meth:`send` and the tasks behind it.

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
        self._links: dict[ProcessId, _Link] = {}

    def send(self, dest: ProcessId, frames: list[bytes], *, count_drops: bool = True) -> None:
        """Send ``frames`` to ``dest``, in order after what was sent before.
        Frames beyond ``send_queue`` waiting for the peer are dropped (and
        counted in ``dropped`` unless ``count_drops`` is false)."""
        if not frames:
            return
        link = self._links.get(dest)
        if link is None:
            self._links[dest] = link = _Link()
            self._spawn(self._peer_sender, dest, link)
        raw = link.raw
        if raw is not None and not link.busy and not link.queue:
            data = pack_frames(frames)
            try:
                written = raw.send(data)
            except BlockingIOError:
                written = 0
            except OSError:
                # Broken: the task closes the stream; the frames are lost.
                self._counts["dropped"] += len(frames)
                link.raw = None
                raw.close()
                link.lot.unpark_all()
                return
            if written == len(data):
                self._counts["sent"] += len(frames)
                return
            # The socket buffer is full: the rest goes to the task.
            link.queue.append((data[written:], len(frames)))
            link.frames += len(frames)
            link.lot.unpark_all()
            return
        room = self._config.send_queue - link.frames
        if room < len(frames):
            if count_drops:
                self._counts["dropped"] += len(frames) - max(room, 0)
            frames = frames[: max(room, 0)]
            if not frames:
                return
        link.queue.append((pack_frames(frames), len(frames)))
        link.frames += len(frames)
        link.lot.unpark_all()

    async def _peer_sender(self, dest: ProcessId, link: _Link) -> None:
        """Owns the outgoing stream to ``dest``: connects on demand, writes
        what is queued, in order."""
        next_attempt = -math.inf
        try:
            while True:
                if link.stream is not None and link.raw is None:
                    await self._drop_stream(link)  # broken during a direct send
                    next_attempt = trio.current_time() + self._config.reconnect_interval
                if not link.queue:
                    await link.lot.park()
                    continue
                link.busy = True
                try:
                    if link.stream is None and not await self._connect(dest, link, next_attempt):
                        # Peer unreachable: what was queued for it is lost.
                        self._counts["dropped"] += link.frames
                        link.queue.clear()
                        link.frames = 0
                        next_attempt = trio.current_time() + self._config.reconnect_interval
                        continue
                    assert link.stream is not None
                    data = b"".join(chunk for chunk, _ in link.queue)
                    count = link.frames
                    link.queue.clear()
                    link.frames = 0
                    try:
                        await link.stream.send_all(data)
                    except _BROKEN:
                        self._counts["dropped"] += count
                        await self._drop_stream(link)
                        next_attempt = trio.current_time() + self._config.reconnect_interval
                        continue
                    self._counts["sent"] += count
                finally:
                    link.busy = False
        finally:
            if link.raw is not None:
                link.raw.close()
                link.raw = None
            if link.stream is not None:
                stream, link.stream = link.stream, None
                await close_quietly(stream)

    async def _drop_stream(self, link: _Link) -> None:
        if link.raw is not None:
            link.raw.close()
            link.raw = None
        if link.stream is not None:
            stream, link.stream = link.stream, None
            await close_quietly(stream)

    async def _connect(self, dest: ProcessId, link: _Link, not_before: float) -> bool:
        if trio.current_time() < not_before:
            return False
        address = self._addresses.get(dest)
        if address is None:
            return False
        host, port = parse_host_port(address)
        try:
            with trio.fail_after(self._config.connect_timeout):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError):
            self._counts["connect_failures"] += 1
            return False
        self._counts["connects"] += 1
        hello = pack_frames(self._hello(dest))
        if hello:
            try:
                await stream.send_all(hello)
            except _BROKEN:
                self._counts["connect_failures"] += 1
                await close_quietly(stream)
                return False
        sock = stream.socket
        try:
            raw = socket.fromfd(sock.fileno(), sock.family, sock.type)
        except OSError:
            self._counts["connect_failures"] += 1
            await close_quietly(stream)
            return False
        raw.setblocking(False)
        link.stream, link.raw = stream, raw
        return True


async def close_quietly(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, OSError):
        await stream.aclose()
