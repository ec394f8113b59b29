"""The EpTO nodes on trio (UDP datagrams, the in-process hub): the driver
loop's trio shell with an :class:`epto.endpoint.EptoEndpoint` from a
:class:`NodeConfig`.

Time: the turn task follows ``trio.current_time()`` (so trio's test clocks
work); the ``now`` handed to the endpoint is that clock shifted to wall time
at the node's start, which makes the global clock's timestamps comparable
across machines (as comparable as their wall clocks) while rounds stay
monotonic.
"""

from __future__ import annotations

import time

import trio

from epto import ProcessId
from epto.endpoint import Address, EptoEndpoint, NodeConfig

from .._loop import fresh_rng
from .._statistics import TransportStatistics, epto_statistics, require_epto
from .loop import TrioDriver


class TrioEptoNode(TrioDriver):
    """The shared body of :class:`~.trio_udp.TrioNode` and :class:`~.memory.MemoryNode`."""

    mode = "epto"

    def __init__(self, config: NodeConfig) -> None:
        require_epto(
            config,
            type(self).__name__,
            "open the node with epto.transports.trio_node.open_node(config) (TCP, trio)",
        )
        super().__init__(
            flush_timeout=config.flush_timeout,
            delivery_buffer=config.delivery_buffer,
            overflow=config.overflow,
        )
        self.config = config
        self._epto: EptoEndpoint | None = None

    def _clock_offset(self) -> float:
        return time.time() - trio.current_time()

    def _open_endpoint(self, now: float) -> EptoEndpoint:
        self._epto = EptoEndpoint(self.config, now, rng=fresh_rng())
        return self._epto

    def _require_epto(self) -> EptoEndpoint:
        self._require_loop()
        assert self._epto is not None
        return self._epto

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    def add_member(self, pid: ProcessId, address: Address) -> None:
        """Add a member to a full view (Cyclon learns members by itself)."""
        self._require_epto().add_member(pid, address)

    def remove_member(self, pid: ProcessId) -> None:
        self._require_epto().remove_member(pid)

    def advance_clock(self, ts: int) -> None:
        """Move the EpTO clock to at least ``ts`` (:meth:`epto.Process.advance_clock`)."""
        self._require_epto().advance_clock(ts)

    def statistics(self) -> TransportStatistics:
        return epto_statistics(self._require_epto(), self._require_loop())
