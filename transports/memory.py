"""An in-process, real-time network on trio: a hub that connects nodes running
in one trio event loop (tests, single-process applications, notebooks).

Every message goes through the nodes' endpoints as bytes (frame codecs and
group keys), as on a socket. The hub can drop a fraction of them (seeded).
A node's inbox is bounded; a full inbox drops the message, as a full UDP
receive buffer would.

Nodes use real time (``trio.current_time()``), so a hub under trio's
``MockClock(autojump_threshold=0)`` runs a group in virtual time too. For the
deterministic, seeded simulation network see ``epto.transports.simulation``.
"""

from __future__ import annotations

import random

import trio

from epto.endpoint import Address, NodeConfig, Transmit

from ._trio.epto_node import TrioEptoNode

__all__ = ["MemoryHub", "MemoryNode"]


class MemoryHub:
    """Connects :class:`MemoryNode` objects by address (any name)."""

    def __init__(
        self,
        *,
        loss: float = 0.0,
        seed: int = 0,
        inbox: int = 10_000,
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss!r}")
        self.loss = loss
        self.inbox = inbox
        self._rng = random.Random(seed)
        self._inboxes: dict[Address, trio.MemorySendChannel[object]] = {}
        self.sent = 0
        self.dropped = 0

    def _attach(self, address: Address) -> trio.MemoryReceiveChannel[object]:
        if address in self._inboxes:
            raise ValueError(f"address {address!r} is already attached to the hub")
        send, receive = trio.open_memory_channel[object](self.inbox)
        self._inboxes[address] = send
        return receive

    def _detach(self, address: Address) -> None:
        send = self._inboxes.pop(address, None)
        if send is not None:
            send.close()

    def deliver(self, address: Address, item: object) -> bool:
        """Put ``item`` (the bytes of a frame, or anything hostile) in the
        inbox of ``address``."""
        self.sent += 1
        inbox = self._inboxes.get(address)
        if inbox is None or (self.loss and self._rng.random() < self.loss):
            self.dropped += 1
            return False
        try:
            inbox.send_nowait(item)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped += 1
            return False
        return True


class MemoryNode(TrioEptoNode):
    """One EpTO node attached to a :class:`MemoryHub` under ``config.bind``."""

    def __init__(self, hub: MemoryHub, config: NodeConfig) -> None:
        super().__init__(config)
        self.hub = hub
        self.address: Address = config.bind
        self._inbox: trio.MemoryReceiveChannel[object] | None = None

    async def _open_link(self) -> None:
        self._inbox = self.hub._attach(self.address)

    def _start_receiving(self) -> None:
        self._spawn(self._receive_loop)

    async def _receive_loop(self) -> None:
        inbox = self._inbox
        assert inbox is not None
        async for item in inbox:
            self._accept(item)
            self._drain_arrivals()

    def _drain_arrivals(self) -> None:
        inbox = self._inbox
        if inbox is None:
            return
        while True:
            try:
                item = inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            self._accept(item)

    def _accept(self, item: object) -> None:
        if isinstance(item, bytes | bytearray):
            self._arrived(bytes(item))
        else:
            self._require_loop().refused("not-a-message")

    async def _send(self, out: list[Transmit]) -> None:
        loop = self._require_loop()
        deliver = self.hub.deliver
        for transmit in out:
            if deliver(transmit.address, transmit.data):
                loop.datagrams_sent += 1
            else:
                loop.send_failures += 1

    def _close_link(self) -> None:
        self.hub._detach(self.address)
