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

from ._common import Address, NodeConfig, parse_host_port
from ._trio_base import TrioNodeBase

__all__ = ["TrioNode"]

_RECV_SIZE = 65_536


class TrioNode(TrioNodeBase):
    """One EpTO node on a UDP socket; an async context manager.

    ``node.address`` is the ``"host:port"`` actually bound (useful with port 0).
    """

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self._sock: trio.socket.SocketType | None = None
        self._resolved: dict[Address, tuple[str, int]] = {}
        self.address = ""

    async def _open_link(self) -> None:
        host, port = parse_host_port(self.config.bind)
        sock = trio.socket.socket(_stdlib_socket.AF_INET, _stdlib_socket.SOCK_DGRAM)
        try:
            sock.setsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_RCVBUF, 4 << 20)
            await sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
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

    async def _send(self, address: Address, message: object) -> None:
        sock = self._sock
        if sock is None:
            return
        core = self._require_core()
        target = self._resolved.get(address)
        if target is None:
            target = self._resolved[address] = parse_host_port(address)
        for datagram in core.encode(message):
            try:
                await sock.sendto(datagram, target)
                core.datagrams_sent += 1
            except OSError:
                core.send_failures += 1

    def _close_link(self) -> None:
        if self._sock is not None:
            self._sock.close()

    async def send_raw(self, address: Address, data: bytes) -> None:
        """Send bytes as they are (for tests of hostile input)."""
        if self._sock is not None:
            await self._sock.sendto(data, parse_host_port(address))
