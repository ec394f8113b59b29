"""The outgoing TCP streams of a TCP node, one per peer.

A peer's stream is owned by a task: it connects on demand (at most one
attempt per ``reconnect_interval``), starts every new stream with the
endpoint's opening frames (``opening(dest)``; the token ring's: its address
book, the hello), and writes what is queued for the peer, in order:
everything queued since its last write goes out in one write. What a turn
hands over for a peer whose stream is up and idle (nothing queued, no write
under way, no emulated delay) is written at once, without blocking, by the
turn itself: a paced node then spends no task wake-ups on its writes (two
per peer and turn otherwise: the sender's step and trio's yield after a
write); whatever the socket does not take at once waits in the queue for
the task. Under saturation the stream is seldom idle, and the task gathers
what several turns queued into one write, as before.

What the node hands over for a peer waits in its queue until the peer's
stream is up, however many connection attempts that takes (a peer that has
not started listening yet, one restarting): the queue is bounded by
``send_queue`` frames, and frames beyond it are dropped and counted. A
stream that breaks loses what it was writing (counted too); the frames
queued after that write go out on the next stream, and nothing is written
twice. The protocol repairs what a broken stream lost. Only once a peer has
left the group's view (the endpoint's ``gone()``) is what waits for it
dropped (:meth:`PeerLinks.forget`, counted), so that a crashed member's link
stops retrying.

Connection attempts back off, as TCP's own SYN retransmissions do. After
``n`` failed attempts in a row the next one waits ``reconnect_interval *
2**n`` (at most :data:`MAX_RECONNECT_BACKOFF` intervals; a success resets
it), so many members started one after the other in one process do not
spend their event loop on attempts to peers that are not listening yet
(what each member sends waits in its queue meanwhile). And after ``n``
attempts in a row that ran out of time, the next one may take
``connect_timeout * 2**n`` (at most :data:`MAX_CONNECT_BACKOFF` times): the
deadline of an attempt also counts the time the node's own event loop takes
to run it, and in a crowded loop (tens of members in one process, or a
process starved of CPU) a loopback connection that the kernel completed at
once can take longer than ``connect_timeout`` to be seen. With a fixed
deadline every attempt was cancelled, the streams never came up, and the
members never heard of each other (docs/token-ring.md, *Limits*). Numeric
addresses are connected with one socket call (no resolution, no
happy-eyeballs task), which costs the loop fewer steps.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import socket
from collections import deque
from collections.abc import Callable

import trio

from epto import ProcessId
from epto.endpoint import Address, parse_host_port

from .tcp_config import TcpNodeConfig
from .tcp_framing import pack_frames

__all__ = ["MAX_CONNECT_BACKOFF", "MAX_RECONNECT_BACKOFF", "PeerLinks", "close_quietly"]

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

MAX_RECONNECT_BACKOFF = 16
"""Most multiples of ``reconnect_interval`` between two attempts to one peer (after
failures in a row)."""
MAX_CONNECT_BACKOFF = 16
"""Most multiples of ``connect_timeout`` one attempt may take (after attempts in a row
that ran out of time)."""


class _Link:
    """The state of the stream to one peer."""

    __slots__ = ("failures", "frames", "lot", "queue", "stream", "timeouts", "writing")

    def __init__(self) -> None:
        self.stream: trio.SocketStream | None = None
        self.queue: deque[tuple[bytes, int, float]] = deque()
        """Bytes to write in order, each with the number of frames it
        completes and when it may be written (``link_delays``; else 0)."""
        self.frames = 0
        """Frames in ``queue``."""
        self.writing = False
        """A write to ``stream`` is under way."""
        self.lot = trio.lowlevel.ParkingLot()
        self.failures = 0
        """Connection attempts in a row that failed (reset by a success)."""
        self.timeouts = 0
        """Connection attempts in a row that ran out of time."""


class PeerLinks:
    """The senders of one node: :meth:`send` and the tasks behind it.

    ``address_of(pid)`` says where a peer listens now, ``counts`` its transport
    counters (``sent``, ``dropped``, ``connects``, ``connect_failures``),
    ``hello(dest)`` the frames that start a stream to ``dest``, and ``spawn``
    starts a task owned by the node.
    """

    def __init__(
        self,
        config: TcpNodeConfig,
        address_of: Callable[[ProcessId], Address | None],
        counts: dict[str, int],
        hello: Callable[[ProcessId], list[bytes]],
        spawn: Callable[..., None],
    ) -> None:
        self._config = config
        self._address_of = address_of
        self._counts = counts
        self._hello = hello
        self._spawn = spawn
        self._links: dict[ProcessId, _Link] = {}
        self._written = trio.lowlevel.ParkingLot()

    def send(self, dest: ProcessId, frames: list[bytes], *, count_drops: bool = True) -> None:
        """Send ``frames`` to ``dest``, in order after what was sent before,
        as soon as a stream to ``dest`` is up. Frames beyond ``send_queue``
        waiting for the peer are dropped (and counted in ``dropped`` unless
        ``count_drops`` is false)."""
        if not frames:
            return
        link = self._links.get(dest)
        if link is None:
            self._links[dest] = link = _Link()
            self._spawn(self._peer_sender, dest, link)
        room = self._config.send_queue - link.frames
        if room < len(frames):
            if count_drops:
                self._counts["dropped"] += len(frames) - max(room, 0)
            frames = frames[: max(room, 0)]
            if not frames:
                return
        delay = self._config.link_delays.get(dest)
        due = 0.0
        data = pack_frames(frames)
        if not delay and link.stream is not None and not link.writing and not link.queue:
            written = _write_now(link.stream, data)
            if written == len(data):
                self._counts["sent"] += len(frames)
                return
            data = data[written:]  # the rest is written first, by the task
        if delay:
            due = trio.current_time() + delay
            if link.queue:
                due = max(due, link.queue[-1][2])  # in order, whatever the delay
        link.queue.append((data, len(frames), due))
        link.frames += len(frames)
        link.lot.unpark_all()

    def forget(self, dest: ProcessId) -> None:
        """``dest`` left the group's view: what waits for a stream to it that
        is not up is dropped (and counted), and no more attempts are made
        until something is sent to it again. A stream that is up drains."""
        link = self._links.get(dest)
        if link is None or link.stream is not None or not link.frames:
            return
        self._counts["dropped"] += link.frames
        link.queue.clear()
        link.frames = 0

    async def drain(self) -> None:
        """Wait until every stream that is up has written what is queued for
        it (a node leaving: what its endpoint handed out last goes out before
        the streams close). Peers whose stream is not up are not waited for;
        the caller bounds the wait."""
        while any(
            link.stream is not None and (link.frames or link.writing)
            for link in self._links.values()
        ):
            await self._written.park()

    async def _peer_sender(self, dest: ProcessId, link: _Link) -> None:
        """Owns the outgoing stream to ``dest``: connects on demand (again
        after ``reconnect_interval`` while attempts fail), writes what is
        queued, in order."""
        next_attempt = -math.inf
        try:
            while True:
                if not link.queue:
                    await link.lot.park()
                    continue
                if link.stream is None:
                    # What is queued waits for the stream (bounded by send()):
                    # a peer that does not listen yet must still get it.
                    await trio.sleep_until(next_attempt)
                    if not link.queue:
                        continue  # forgotten meanwhile
                    if not await self._connect(dest, link):
                        backoff = 2 ** min(link.failures, 30)
                        wait = self._config.reconnect_interval * min(backoff, MAX_RECONNECT_BACKOFF)
                        next_attempt = trio.current_time() + wait
                        continue
                    if not link.queue:
                        continue  # forgotten while connecting: wait for the next
                if link.queue[0][2] > trio.current_time():
                    # An emulated link delay (link_delays): wait for the oldest.
                    await trio.sleep_until(link.queue[0][2])
                    continue
                data, count = self._take_due(link)
                assert link.stream is not None
                link.writing = True
                try:
                    await link.stream.send_all(data)
                except _BROKEN:
                    # Written in part at most: lost (the protocol repairs it),
                    # never written again. What was queued since waits.
                    self._counts["dropped"] += count
                    await self._drop_stream(link)
                    continue
                finally:
                    link.writing = False
                    self._written.unpark_all()
                self._counts["sent"] += count
        finally:
            await self._drop_stream(link)

    @staticmethod
    def _take_due(link: _Link) -> tuple[bytes, int]:
        """What may be written now (everything, without ``link_delays``), and
        how many frames it completes; taken off the queue."""
        queue = link.queue
        now = trio.current_time() if queue[-1][2] else 0.0
        chunks: list[bytes] = []
        count = 0
        while queue and queue[0][2] <= now:
            chunk, frames, _ = queue.popleft()
            chunks.append(chunk)
            count += frames
        link.frames -= count
        return b"".join(chunks), count

    async def _drop_stream(self, link: _Link) -> None:
        if link.stream is not None:
            stream, link.stream = link.stream, None
            await close_quietly(stream)

    async def _connect(self, dest: ProcessId, link: _Link) -> bool:
        address = self._address_of(dest)
        if address is None:
            return False
        host, port = parse_host_port(address)
        timeout = self._config.connect_timeout * min(
            2 ** min(link.timeouts, 30), MAX_CONNECT_BACKOFF
        )
        try:
            with trio.fail_after(timeout):
                stream = await _open_stream(host, port)
        except trio.TooSlowError:
            link.timeouts += 1
            link.failures += 1
            self._counts["connect_failures"] += 1
            return False
        except OSError:
            link.failures += 1
            self._counts["connect_failures"] += 1
            return False
        link.failures = link.timeouts = 0
        self._counts["connects"] += 1
        hello = pack_frames(self._hello(dest))
        if hello:
            try:
                await stream.send_all(hello)
            except _BROKEN:
                self._counts["connect_failures"] += 1
                await close_quietly(stream)
                return False
        link.stream = stream
        return True


async def _open_stream(host: str, port: int) -> trio.SocketStream:
    """A TCP stream to ``host:port``: a numeric address with one socket and
    one connect (the fewest steps of the event loop), a name through
    :func:`trio.open_tcp_stream`."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return await trio.open_tcp_stream(host, port)
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


def _write_now(stream: trio.SocketStream, data: bytes) -> int:
    """Write what the socket takes of ``data`` without blocking; how much.
    An error is left to the stream's task, whose write fails the same way
    (the stream is dropped and what it was writing counted)."""
    try:
        return os.write(stream.socket.fileno(), data)
    except OSError:  # BlockingIOError included: the task waits for room
        return 0


async def close_quietly(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, OSError):
        await stream.aclose()
