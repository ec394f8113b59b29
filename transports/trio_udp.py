"""EpTO over UDP datagrams with trio.

EpTO tolerates message loss by design (a ball reaches K peers and every event
is relayed for TTL rounds), so gossip uses plain datagrams: no connections, no
retransmission, no head-of-line blocking. Each node binds one UDP socket and
sends every ball from it; balls larger than ``limits.max_frame_size`` are split into several frames.

::

    config = NodeConfig(pid=1, bind="127.0.0.1:9001",
                        members={1: "127.0.0.1:9001", 2: "127.0.0.1:9002"})
    async with TrioNode(config) as node:
        node.broadcast(b"hello")
        async for delivery in node:
            print(delivery.event.payload)
"""

from __future__ import annotations

import socket as _stdlib_socket

import trio

from epto import LocalProtocolError

from ._common import Address, NodeConfig, Outgoing, parse_host_port
from ._trio_base import TrioNodeBase

__all__ = ["TrioNode"]

_RECV_SIZE = 65_536
_DRAIN_BATCH = 1024


class TrioNode(TrioNodeBase):
    """One EpTO node on a UDP socket; an async context manager.

    ``node.address`` is the ``"host:port"`` actually bound (useful with port 0).
    """

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self._sock: trio.socket.SocketType | None = None
        self._raw: _stdlib_socket.socket | None = None
        self._resolved: dict[Address, tuple[str, int]] = {}
        self.address = ""

    async def _open_link(self) -> None:
        host, port = parse_host_port(self.config.bind)
        raw = _stdlib_socket.socket(_stdlib_socket.AF_INET, _stdlib_socket.SOCK_DGRAM)
        try:
            raw.setsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_RCVBUF, 4 << 20)
            raw.setblocking(False)
            sock = trio.socket.from_stdlib_socket(raw)
            await sock.bind((host, port))
        except BaseException:
            raw.close()
            raise
        self._raw = raw
        self._sock = sock
        bound_host, bound_port = sock.getsockname()[:2]
        self.address = f"{bound_host}:{bound_port}"

    async def _receive_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        core = self._require_core()
        while True:
            try:
                data, _ = await sock.recvfrom(_RECV_SIZE)
            except OSError:
                # ICMP errors surface here on some systems; a lost peer is not our fault.
                core.reject("socket-error")
                continue
            self._feed_datagram(data)
            self._drain_arrivals()

    def _drain_arrivals(self) -> None:
        raw = self._raw
        if raw is None:
            return
        core = self._require_core()
        for _ in range(_DRAIN_BATCH):
            try:
                data = raw.recv(_RECV_SIZE)
            except BlockingIOError:
                return
            except OSError:
                core.reject("socket-error")
                return
            self._feed_datagram(data)

    async def _send(self, out: Outgoing) -> None:
        sock = self._sock
        if sock is None:
            return
        core = self._require_core()
        address = out.address
        target = self._resolved.get(address)
        if target is None:
            try:
                target = parse_host_port(address)
            except LocalProtocolError:
                # An address a peer advertised (Cyclon) that is not host:port.
                core.send_failures += 1
                return
            self._resolved[address] = target
        assert self._raw is not None
        raw_sendto = self._raw.sendto
        for datagram in core.encode(out.message, to=out.dest):
            # Send without yielding to the scheduler per datagram (a round's
            # datagrams leave together, as in aioquic's transmit()); only a
            # full send buffer makes the round wait for the socket.
            try:
                raw_sendto(datagram, target)
            except BlockingIOError:
                try:
                    await sock.sendto(datagram, target)
                except OSError:
                    core.send_failures += 1
                    continue
            except OSError:
                core.send_failures += 1
                continue
            core.datagrams_sent += 1

    def _close_link(self) -> None:
        if self._sock is not None:
            self._sock.close()

    async def send_raw(self, address: Address, data: bytes) -> None:
        """Send bytes as they are (for tests of hostile input)."""
        if self._sock is not None:
            await self._sock.sendto(data, parse_host_port(address))
