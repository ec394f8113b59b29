"""An in-process, real-time network on trio: a hub that connects nodes running
in one trio event loop (tests, single-process applications, notebooks).

The hub hands messages to the receiver by reference (no encoding) unless it
is built with ``encode=True``, in which case every message goes through the
nodes' frame codecs (and group keys) as on a socket. It
can drop a fraction of messages (seeded). A node's inbox is bounded; a full
inbox drops the message, as a full UDP receive buffer would.

Nodes use real time (``trio.current_time()``), so a hub under trio's
``MockClock(autojump_threshold=0)`` runs a group in virtual time too. For the
deterministic, seeded simulation network see ``epto.transports.virtual``.
"""

from __future__ import annotations

import random

import trio

from epto import ProcessId

from ._common import Address, NodeConfig, Outgoing
from ._trio_base import TrioNodeBase

__all__ = ["MemoryHub", "MemoryNode"]

_Item = tuple[ProcessId, object] | bytes | object


class MemoryHub:
    """Connects :class:`MemoryNode` objects by address (any hashable name)."""

    def __init__(
        self,
        *,
        encode: bool = False,
        loss: float = 0.0,
        seed: int = 0,
        inbox: int = 10_000,
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss!r}")
        self.encode = encode
        self.loss = loss
        self.inbox = inbox
        self._rng = random.Random(seed)
        self._inboxes: dict[Address, trio.MemorySendChannel[_Item]] = {}
        self.sent = 0
        self.dropped = 0

    def _attach(self, address: Address) -> trio.MemoryReceiveChannel[_Item]:
        if address in self._inboxes:
            raise ValueError(f"address {address!r} is already attached to the hub")
        send, receive = trio.open_memory_channel[_Item](self.inbox)
        self._inboxes[address] = send
        return receive

    def _detach(self, address: Address) -> None:
        send = self._inboxes.pop(address, None)
        if send is not None:
            send.close()

    def deliver(self, address: Address, item: _Item) -> bool:
        """Put ``item`` (a ``(sender, message)`` pair, or the bytes of a frame,
        or anything hostile) in the inbox of ``address``."""
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


class MemoryNode(TrioNodeBase):
    """One EpTO node attached to a :class:`MemoryHub` under ``config.bind``."""

    def __init__(self, hub: MemoryHub, config: NodeConfig) -> None:
        super().__init__(config)
        self.hub = hub
        self.address: Address = config.bind
        self._inbox: trio.MemoryReceiveChannel[_Item] | None = None

    async def _open_link(self) -> None:
        self._inbox = self.hub._attach(self.address)

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
            self._feed_datagram(bytes(item))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
            self._feed(item[0], item[1])
        else:
            core = self._require_core()
            core.datagrams_received += 1
            core.reject("not-a-message")

    async def _send(self, out: Outgoing) -> None:
        core = self._require_core()
        items: list[_Item] = (
            list(core.encode(out.message, to=out.dest))
            if self.hub.encode
            else [(core.pid, out.message)]
        )
        for item in items:
            if self.hub.deliver(out.address, item):
                core.datagrams_sent += 1
            else:
                core.send_failures += 1

    def _close_link(self) -> None:
        self.hub._detach(self.address)
