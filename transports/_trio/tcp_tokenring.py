"""The settings and the statistics of a token-ring node on TCP
(:class:`~epto.transports.trio_tcp.TokenRingNode`), and the error its
deliveries end with once the member is excluded.

A token-ring node is configured like every node, by one
:class:`epto.endpoint.NodeConfig` (``mode="token-ring"``, the token ring's
parameters in ``tokenring``), with the transport's settings beside it (a
:class:`~.tcp_config.TcpNodeConfig`); :func:`ring_limits` gives the frame
bounds it runs with.
"""

from __future__ import annotations

import attrs

from epto import Limits, LocalProtocolError, ProcessId
from epto.endpoint import NodeConfig

from .tcp_config import TcpNodeStatistics

__all__ = ["MemberExcludedError", "TokenRingNodeStatistics", "ring_limits"]


def _stream_limits() -> Limits:
    # A catch-up carries up to 4096 sequenced messages (TokenRingProcess); a
    # payload is at most the default window budget (TokenRingConfig.check_limits).
    return Limits.for_frame_size(1 << 20, max_events_per_ball=4096, max_payload_size=524_224)


def ring_limits(config: NodeConfig) -> Limits:
    """The frame bounds a token-ring node on TCP runs with: ``config.limits``,
    or, when it is left at its default (``epto.Limits()``, sized for one UDP
    datagram), the token ring's stream limits: 1 MiB frames, since token
    states and catch-ups grow with the unstable messages, catch-ups of up to
    4096 messages, payloads up to the default window budget."""
    return _stream_limits() if config.limits == Limits() else config.limits


class MemberExcludedError(LocalProtocolError):
    """This process is out of the group's view for good (excluded by a view
    change, its delivered prefix diverged, or it fell too far behind). The node
    has stopped; to take part again, start the member again (the same id, a
    new process: a later incarnation, which the group admits back; see
    docs/token-ring.md, *Restart*). :attr:`reason` is the process's
    ``exclusion``: ``"removed from the view"``, ``"diverged"`` or ``"too far
    behind"``. A process whose member runs again in a later incarnation stops
    with :class:`epto.SupersededError` instead."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


@attrs.frozen(kw_only=True, slots=True)
class TokenRingNodeStatistics(TcpNodeStatistics):
    """The process's counters and the transport's (:class:`~.tcp_config.TcpNodeStatistics`)."""

    role: str
    view: int
    instance: int
    core: tuple[ProcessId, ...]
    members: tuple[ProcessId, ...]
    holds_token: bool
    """This member holds the token now."""
    quorum: bool = False
    """This member is in a view and heard from a majority of its members
    (itself included) within ``tokenring.suspect_timeout``: a member cut
    off from the majority reports False within that time, before the
    majority can have moved it out of the core (and long before it excludes
    it, ``exclude_timeout``); True again once it hears them."""
    incarnation: int = 0
    """This start of the member."""
