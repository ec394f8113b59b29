"""The trio driver loop shared by the UDP node and the in-memory hub node.

A node is an async context manager that owns its tasks (a nursery, see
:mod:`._tasks`): one task
receives and feeds the core, one runs rounds when the core's timer is due and
sends what the core wants sent. Deliveries come out through an async iterator
fed from a bounded buffer; the round task never waits for the application.

Time: the round timer follows ``trio.current_time()`` (so trio's test clocks
work); the ``now`` handed to the core is that clock shifted to wall time at the
node's start, which makes the global clock's timestamps comparable across
machines (as comparable as their wall clocks) while the rounds stay monotonic.
"""

from __future__ import annotations

import math
import time
from typing import Self

import trio

from epto import Delivery, EventId, LocalProtocolError, ProcessId

from ._common import (
    Address,
    CoreAdapter,
    DeliveryOverflowError,
    NodeConfig,
    Outgoing,
    TransportStatistics,
    require_epto,
)
from ._tasks import TaskOwner


class TrioNodeBase(TaskOwner):
    """Shared body of :class:`TrioNode` and :class:`MemoryNode`."""

    mode = "epto"
    """The ordering engine this node runs."""

    def __init__(self, config: NodeConfig) -> None:
        require_epto(
            config,
            type(self).__name__,
            "open the node with epto.transports.trio_node.open_node(config) (TCP, trio)",
        )
        super().__init__()
        self.config = config
        self._core: CoreAdapter | None = None
        self._offset = 0.0
        self._readers = trio.lowlevel.ParkingLot()
        self._round_done = trio.lowlevel.ParkingLot()

    # -- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._check_new()
        self._offset = time.time() - trio.current_time()
        self._core = CoreAdapter(self.config, self._now())
        await self._open_link()
        await self._open_tasks()
        self._spawn(self._receive_loop)
        self._spawn(self._round_loop)
        return self

    async def aclose(self) -> None:
        """Stop broadcasting, keep running rounds until this node's events have
        been gossiped TTL rounds (at most ``flush_timeout`` seconds), then stop."""
        if self._state != "running":
            self.abort()
            return
        self._state = "closing"
        core = self._require_core()
        try:
            with trio.move_on_after(self.config.flush_timeout):
                while not core.flushed():
                    await self._round_done.park()
                core.leave(self._now())
                for out in core.outgoing():
                    await self._send(out)
        finally:
            # Also when the code that entered the node is cancelled meanwhile:
            # the tasks stop and the socket is closed.
            self.abort()

    def abort(self) -> None:
        """Stop at once (what a crash looks like to the group)."""
        if not self._cancel_tasks():
            return
        self._close_link()
        self._readers.unpark_all()
        self._round_done.unpark_all()

    # -- application API ----------------------------------------------------

    def broadcast(self, payload: bytes) -> EventId:
        """Broadcast ``payload``; it leaves with the next round."""
        if self._state != "running":
            raise LocalProtocolError(f"cannot broadcast on a node that is {self._state}")
        return self._require_core().broadcast(payload, self._now())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Delivery:
        core = self._require_core()
        while True:
            delivery = core.buffer.get()
            if delivery is not None:
                return delivery
            if core.buffer.overflowed:
                raise DeliveryOverflowError(
                    f"more than {core.buffer.capacity} deliveries waited for the application"
                )
            if self._state == "closed":
                raise StopAsyncIteration
            await self._readers.park()

    def add_member(self, pid: ProcessId, address: Address) -> None:
        self._require_core().add_member(pid, address)

    def remove_member(self, pid: ProcessId) -> None:
        self._require_core().remove_member(pid)

    def statistics(self) -> TransportStatistics:
        return self._require_core().statistics()

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    # -- the loop -----------------------------------------------------------

    def _now(self) -> float:
        return self._offset + trio.current_time()

    def _require_core(self) -> CoreAdapter:
        if self._core is None:
            raise LocalProtocolError("the node is not started; use 'async with node:'")
        return self._core

    async def _round_loop(self) -> None:
        core = self._require_core()
        while True:
            deadline = core.timer() - self._offset
            await trio.sleep_until(deadline if math.isfinite(deadline) else math.inf)
            # Feed what has arrived before the round runs: a copy waiting in a
            # socket buffer while the round ages the others can turn into a hole.
            self._drain_arrivals()
            core.handle_timer(self._now())
            for out in core.outgoing():
                await self._send(out)
            if core.pump():
                self._readers.unpark_all()
            if core.buffer.overflowed:
                self._readers.unpark_all()
                self.abort()
                return
            self._round_done.unpark_all()

    def _feed(self, sender: ProcessId, message: object) -> None:
        self._require_core().receive(sender, message, self._now())

    def _feed_datagram(self, data: bytes) -> None:
        self._require_core().receive_datagram(data, self._now())

    # -- what a link provides -----------------------------------------------

    async def _open_link(self) -> None:
        raise NotImplementedError

    async def _receive_loop(self) -> None:
        raise NotImplementedError

    def _drain_arrivals(self) -> None:
        """Feed every arrival that can be read without waiting."""
        raise NotImplementedError

    async def _send(self, out: Outgoing) -> None:
        """Send ``out.message`` to process ``out.dest`` at ``out.address``;
        failures are counted, never raised (the round loop must go on)."""
        raise NotImplementedError

    def _close_link(self) -> None:
        raise NotImplementedError
