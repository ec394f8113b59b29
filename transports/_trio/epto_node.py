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

import attrs
import trio

from epto import LocalProtocolError, ProcessId, SupersededError
from epto.endpoint import EptoEndpoint, EptoHandle, NodeConfig

from .._loop import fresh_rng
from .._statistics import TransportStatistics, epto_statistics, require_epto
from .loop import TrioDriver


class TrioEptoNode(TrioDriver):
    """The shared body of :class:`~.trio_udp.UdpNode` and :class:`~.memory.MemoryNode`."""

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
        """The configuration; once started, with its incarnation fixed."""
        self._epto: EptoEndpoint | None = None

    def _clock_offset(self) -> float:
        return time.time() - trio.current_time()

    def _open_endpoint(self, now: float) -> EptoEndpoint:
        cfg = self.config
        member = self._claim_member(cfg.pid, cfg.data_dir, cfg.incarnation)
        self.config = attrs.evolve(cfg, incarnation=member.incarnation)
        self._epto = EptoEndpoint(self.config, now, rng=fresh_rng())
        return self._epto

    def _stopped_error(self, reason: str) -> Exception:
        epto = self._epto
        if epto is not None and epto.engine.superseded_by is not None:
            return SupersededError(f"the node stopped: {reason}")
        return LocalProtocolError(f"the node stopped: {reason}")

    def _require_epto(self) -> EptoEndpoint:
        self._require_loop()
        assert self._epto is not None
        return self._epto

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    @property
    def engine(self) -> EptoHandle:
        """EpTO's own operations (:class:`epto.endpoint.EptoHandle`: a full
        view's members, the clock, a restart's resumption), once started;
        each is refused unless the node runs."""
        return self._require_epto().engine

    @property
    def incarnation(self) -> int:
        """This start of the member (docs/node.md, *Restart*)."""
        return self._require_epto().incarnation

    def statistics(self) -> TransportStatistics:
        return epto_statistics(self._require_epto(), self._require_loop())
