"""What the EpTO nodes share (trio UDP, the in-process hub, ZeroMQ): the
statistics they report and the check that their configuration runs EpTO.

The configuration itself (:class:`NodeConfig`) is the endpoints'
(:mod:`epto.endpoint`); it is re-exported here and from ``epto.transports``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from epto import ConfigurationError
from epto.endpoint import EptoEndpoint, NodeConfig

from ._loop import DriverLoop


@attrs.frozen(kw_only=True, slots=True)
class TransportStatistics:
    """Counters of one EpTO node (every EpTO driver reports the same fields)."""

    rounds: int
    broadcasts: int
    delivered: int
    delivered_out_of_order: int
    holes_detected: int
    """Sequence numbers skipped in some source's delivered events: events this
    node knows it will never deliver in order."""
    late_rejected: int
    """Copies that arrived after the order had passed them (``rejected_stale``)."""
    balls_received: int
    balls_sent: int
    datagrams_sent: int
    datagrams_received: int
    send_failures: int
    """Frames the driver could not send, and messages for a process whose
    address the node does not know."""
    rejected: Mapping[str, int]
    """Frames refused, by fault (``"truncated"``, ``"bad-magic"``, ...)."""
    delivery_queue: int
    """Deliveries waiting for the application."""
    deliveries_dropped: int
    pending: int
    """Events received and not yet delivered by the core."""
    members: int
    """Members known: the full view (this node included), or the Cyclon view plus one."""
    encode_failures: int = 0
    """Messages the core wanted sent that the codec could not encode (they
    are dropped and counted; the node goes on)."""


def epto_statistics(endpoint: EptoEndpoint, loop: DriverLoop) -> TransportStatistics:
    """The statistics of an EpTO node: its endpoint's and its loop's counters."""
    s = endpoint.statistics()
    return TransportStatistics(
        rounds=s.rounds,
        broadcasts=s.broadcasts,
        delivered=s.delivered,
        delivered_out_of_order=s.delivered_out_of_order,
        holes_detected=s.holes_detected,
        late_rejected=s.late_rejected,
        balls_received=s.balls_received,
        balls_sent=s.balls_sent,
        datagrams_sent=loop.datagrams_sent,
        datagrams_received=loop.datagrams_received,
        send_failures=loop.send_failures + s.unaddressed,
        rejected=s.rejected,
        delivery_queue=len(loop.buffer),
        deliveries_dropped=loop.buffer.dropped,
        pending=s.pending,
        members=s.members,
        encode_failures=s.encode_failures,
    )


def require_epto(config: NodeConfig, node: str, hint: str) -> None:
    """Raise :class:`epto.ConfigurationError` unless ``config`` runs EpTO: a
    datagram transport cannot carry the token ring, which needs reliable FIFO
    links (the one place a driver looks at the engine, to refuse it)."""
    mode = config.resolved_mode()
    if mode == "token-ring":
        raise ConfigurationError(
            f"{node} runs EpTO, and this configuration (mode={config.mode!r}) resolves "
            f"to the token ring; {hint}"
        )
    if mode != "epto":
        raise ConfigurationError(
            f"{node} runs EpTO, and this configuration asks for mode={mode!r}; sequencing "
            "atoms run over TCP with trio (epto.transports.trio_atoms.AtomsNode)"
        )
