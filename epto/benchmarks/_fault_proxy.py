"""The fault suite's network: a proxy between every two members, which the
harness cuts and heals (``epto bench faults``, docs/faults.md).

Every member reaches every other member only through a port this proxy owns,
so a partition needs no root, no firewall and no network namespace:

* **gossip** (one proxy per destination member, UDP for EpTO, TCP for the
  token ring): every frame of the library names its sender in its header
  (bytes 8..16 of the 24-byte header, docs/wire-format.md), so one port per
  destination serves every source. A datagram from a source whose link to the
  destination is cut is dropped. A TCP stream is forwarded once its first
  frame's header (after the 4-byte length) names the source; while that
  link is cut the stream is closed with a reset instead, and streams already
  piped on a link are reset when it is cut. The token ring gossips addresses
  (a member's own entry replaces what others knew), so each member
  *advertises* its proxy port: every address any member learns is a proxy's.
* **transfer** (one TCP proxy per directed pair): the state-transfer protocol
  does not name its client, so each member's ``peers`` point at ports of its
  own, one per other member.

A proxy forwards to where its member listens now (:meth:`ProxyNet.set_target`;
a restarted worker binds new ports and reports them). With no target (the
member is down or not started) datagrams are dropped and streams reset.

Everything arriving here is treated as hostile: a datagram or a stream
whose header does not parse is dropped or reset and counted, a stream must
show its header within :data:`HEADER_TIMEOUT`, and reads are bounded.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections import Counter
from collections.abc import Iterable
from typing import Final

import trio

__all__ = ["HEADER_TIMEOUT", "Links", "ProxyNet", "frame_sender"]

MAGIC: Final = b"\xe7\x70"
HEADER: Final = 24
LENGTH: Final = 4
HEADER_TIMEOUT: Final = 5.0
"""Seconds a TCP stream may take to show its first frame's header."""
CONNECT_TIMEOUT: Final = 2.0
CHUNK: Final = 65536

_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
Pair = tuple[int, int]


def frame_sender(frame: bytes) -> int | None:
    """The sender named by a frame's header, or None when it is not one."""
    if len(frame) < HEADER or frame[:2] != MAGIC:
        return None
    sender: int = struct.unpack_from(">Q", frame, 8)[0]
    return sender


class Links:
    """Which directed links ``(source, destination)`` are cut."""

    def __init__(self) -> None:
        self._cut: set[Pair] = set()
        self._proxies: list[_TcpProxy] = []

    def is_cut(self, source: int, destination: int) -> bool:
        return (source, destination) in self._cut

    @property
    def cut_links(self) -> frozenset[Pair]:
        return frozenset(self._cut)

    def cut(self, pairs: Iterable[Pair]) -> None:
        new = {(int(a), int(b)) for a, b in pairs if a != b}
        self._cut |= new
        for proxy in self._proxies:
            proxy.sever(new)

    def heal(self, pairs: Iterable[Pair] | None = None) -> None:
        if pairs is None:
            self._cut.clear()
        else:
            self._cut -= set(pairs)

    def partition(self, side: Iterable[int], others: Iterable[int]) -> None:
        """Cut every link between ``side`` and ``others``, both directions."""
        a, b = set(side), set(others)
        self.cut([(x, y) for x in a for y in b] + [(y, x) for x in a for y in b])


def _reset(stream: trio.SocketStream) -> None:
    """Close with a reset (SO_LINGER 0): the peer's next write fails at once."""
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _TcpProxy:
    """A listening port forwarding to ``target``: one source (``source``), or
    any source named by the first frame's header (``source=None``)."""

    def __init__(self, links: Links, destination: int, source: int | None) -> None:
        self.links = links
        self.destination = destination
        self.source = source
        self.target: tuple[str, int] | None = None
        self.port = 0
        self.counts: Counter[str] = Counter()
        self._open: dict[Pair, set[trio.CancelScope]] = {}
        self._listener: trio.SocketListener | None = None
        links._proxies.append(self)

    async def bind(self) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self._listener = listeners[0]
        self.port = self._listener.socket.getsockname()[1]

    async def serve(self) -> None:
        listener = self._listener
        assert listener is not None
        try:
            await trio.serve_listeners(self._handle, [listener])
        finally:
            listener.socket.close()

    def sever(self, pairs: set[Pair]) -> None:
        for pair in pairs:
            for scope in self._open.get(pair, ()):
                scope.cancel()
                self.counts["severed"] += 1

    async def _handle(self, client: trio.SocketStream) -> None:
        scope = trio.CancelScope()
        pair: Pair | None = None
        try:
            with scope:
                head = b""
                source = self.source
                if source is None:
                    head = await self._read_head(client)
                    source = frame_sender(head[LENGTH:]) if head else None
                    if source is None:
                        self.counts["bad-header"] += 1
                        _reset(client)
                        return
                target = self.target
                if target is None or self.links.is_cut(source, self.destination):
                    self.counts["refused"] += 1
                    _reset(client)
                    return
                pair = (source, self.destination)
                self._open.setdefault(pair, set()).add(scope)
                with trio.move_on_after(CONNECT_TIMEOUT) as connecting:
                    upstream = await trio.open_tcp_stream(*target)
                if connecting.cancelled_caught:
                    self.counts["connect-failed"] += 1
                    _reset(client)
                    return
                self.counts["piped"] += 1
                async with upstream:
                    if head:
                        await upstream.send_all(head)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_pump, client, upstream, nursery.cancel_scope)
                        nursery.start_soon(_pump, upstream, client, nursery.cancel_scope)
            if scope.cancelled_caught:
                _reset(client)
        except _BROKEN:
            self.counts["broken"] += 1
            _reset(client)
        finally:
            if pair is not None:
                self._open.get(pair, set()).discard(scope)
            with contextlib.suppress(*_BROKEN):
                await trio.aclose_forcefully(client)

    async def _read_head(self, client: trio.SocketStream) -> bytes:
        """The length prefix and header of the first frame (exactly that many
        bytes, so that nothing else is read), or b"" if it does not come."""
        head = b""
        with trio.move_on_after(HEADER_TIMEOUT):
            while len(head) < LENGTH + HEADER:
                chunk = await client.receive_some(LENGTH + HEADER - len(head))
                if not chunk:
                    return b""
                head += chunk
            return head
        return b""


async def _pump(src: trio.SocketStream, dst: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while True:
            data = await src.receive_some(CHUNK)
            if not data:
                break
            await dst.send_all(data)
    except _BROKEN:
        pass
    finally:
        done.cancel()


class _UdpProxy:
    """A UDP port forwarding datagrams to ``target`` unless their sender's
    link to ``destination`` is cut."""

    def __init__(self, links: Links, destination: int) -> None:
        self.links = links
        self.destination = destination
        self.target: tuple[str, int] | None = None
        self.port = 0
        self.counts: Counter[str] = Counter()
        self._sock: trio.socket.SocketType | None = None

    async def bind(self) -> None:
        self._sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        await self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]

    async def serve(self) -> None:
        sock = self._sock
        assert sock is not None
        with sock:
            await self._forward(sock)

    async def _forward(self, sock: trio.socket.SocketType) -> None:
        counts = self.counts
        while True:
            try:
                data, _ = await sock.recvfrom(CHUNK)
            except OSError:  # e.g. ICMP port unreachable reported on this socket
                counts["recv-error"] += 1
                continue
            source = frame_sender(data)
            if source is None:
                counts["bad-header"] += 1
                continue
            target = self.target
            if target is None or self.links.is_cut(source, self.destination):
                counts["dropped"] += 1
                continue
            try:
                await sock.sendto(data, target)
                counts["forwarded"] += 1
            except OSError:
                counts["send-error"] += 1


class ProxyNet:
    """Every proxy of one run: a gossip proxy per member and a transfer proxy
    per ordered pair of members, all on 127.0.0.1 ports bound at once."""

    def __init__(self, links: Links, pids: Iterable[int], *, gossip: str) -> None:
        if gossip not in ("udp", "tcp"):
            raise ValueError("gossip is 'udp' or 'tcp'")
        self.links = links
        self.pids = sorted(set(pids))
        self.gossip: dict[int, _UdpProxy | _TcpProxy] = {
            p: _UdpProxy(links, p) if gossip == "udp" else _TcpProxy(links, p, None)
            for p in self.pids
        }
        self.transfer: dict[Pair, _TcpProxy] = {
            (a, b): _TcpProxy(links, b, a) for a in self.pids for b in self.pids if a != b
        }

    async def start(self, nursery: trio.Nursery) -> None:
        for proxy in [*self.gossip.values(), *self.transfer.values()]:
            await proxy.bind()
            nursery.start_soon(proxy.serve)

    def gossip_address(self, pid: int) -> str:
        return f"127.0.0.1:{self.gossip[pid].port}"

    def transfer_address(self, source: int, destination: int) -> str:
        return f"127.0.0.1:{self.transfer[source, destination].port}"

    def set_target(
        self, pid: int, gossip: tuple[str, int] | None, transfer: tuple[str, int] | None
    ) -> None:
        """Where ``pid`` listens now (None: down)."""
        self.gossip[pid].target = gossip
        for (_, b), proxy in self.transfer.items():
            if b == pid:
                proxy.target = transfer

    def counts(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for proxy in [*self.gossip.values(), *self.transfer.values()]:
            total.update(proxy.counts)
        return dict(total)
