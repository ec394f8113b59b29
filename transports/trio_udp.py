"""EpTO over UDP datagrams with trio.

EpTO tolerates message loss by design (a ball reaches K peers and every event
is relayed for TTL rounds), so gossip uses plain datagrams: no connections, no
retransmission, no head-of-line blocking. Each node binds one UDP socket and
sends every ball from it; balls larger than ``limits.max_frame_size`` are split into several frames.

::

    config = NodeConfig(pid=1, bind="127.0.0.1:9001",
                        members={1: "127.0.0.1:9001", 2: "127.0.0.1:9002"})
    async with UdpNode(config) as node:
        node.broadcast(b"hello")
        async for delivery in node:
            print(delivery.event.payload)
"""

from __future__ import annotations

import socket as _stdlib_socket

import trio

from epto import LocalProtocolError
from epto.endpoint import Address, NodeConfig, Transmit, parse_host_port

from ._trio.epto_node import TrioEptoNode

__all__ = ["UdpNode"]

_RECV_SIZE = 65_536
_DRAIN_BATCH = 1024


class UdpNode(TrioEptoNode):
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

    def _start_receiving(self) -> None:
        self._spawn(self._receive_loop)

    async def _receive_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        loop = self._require_loop()
        while True:
            try:
                data, _ = await sock.recvfrom(_RECV_SIZE)
            except OSError:
                # ICMP errors surface here on some systems; a lost peer is not our fault.
                loop.refused("socket-error")
                continue
            self._arrived(data)
            self._drain_arrivals()

    def _drain_arrivals(self) -> None:
        raw = self._raw
        if raw is None:
            return
        loop = self._require_loop()
        for _ in range(_DRAIN_BATCH):
            try:
                data = raw.recv(_RECV_SIZE)
            except BlockingIOError:
                return
            except OSError:
                loop.refused("socket-error")
                return
            self._arrived(data)

    async def _send(self, out: list[Transmit]) -> None:
        sock = self._sock
        raw = self._raw
        if sock is None or raw is None:
            return
        loop = self._require_loop()
        resolved = self._resolved
        raw_sendto = raw.sendto
        for transmit in out:
            address = transmit.address
            target = resolved.get(address)
            if target is None:
                try:
                    target = parse_host_port(address)
                except LocalProtocolError:
                    # An address a peer advertised (Cyclon) that is not host:port.
                    loop.send_failures += 1
                    continue
                resolved[address] = target
            # Send without yielding to the scheduler per datagram (a round's
            # datagrams leave together, as in aioquic's transmit()); only a
            # full send buffer makes the round wait for the socket.
            try:
                raw_sendto(transmit.data, target)
            except BlockingIOError:
                try:
                    await sock.sendto(transmit.data, target)
                except OSError:
                    loop.send_failures += 1
                    continue
            except OSError:
                loop.send_failures += 1
                continue
            loop.datagrams_sent += 1

    def _close_link(self) -> None:
        if self._sock is not None:
            self._sock.close()
