"""The counters a token-ring process keeps, and what it reports
(:meth:`TokenRingProcess.statistics`).

Rules:

* :class:`Counters` is one small object shared by the parts of a process;
  each counter is raised by the one part that does what it counts
  (``broadcasts`` by the data path, ``tokens`` by the token path, ``light``,
  ``full`` and ``proposals`` by the view change, ``fetches`` by the fetcher,
  ``sent`` by the outbox, ``received`` by the process), only ever by adding.
* Reading them (building :class:`TokenRingStatistics`) changes nothing.
"""

from __future__ import annotations

import attrs

from .._event import ProcessId


class Counters:
    """What a process did, counted since it started."""

    __slots__ = (
        "broadcasts",
        "fetches",
        "full",
        "light",
        "payloads_carried",
        "proposals",
        "received",
        "sent",
        "token_resends",
        "tokens",
        "tokens_forwarded",
        "tokens_relayed",
    )

    def __init__(self) -> None:
        self.broadcasts = 0
        self.tokens = 0
        self.light = 0
        self.full = 0
        self.proposals = 0
        self.fetches = 0
        self.sent = 0
        self.received = 0
        self.token_resends = 0
        self.payloads_carried = 0
        self.tokens_relayed = 0
        self.tokens_forwarded = 0


@attrs.frozen(kw_only=True, slots=True)
class OptimisticStatistics:
    """What optimistic delivery did at one member (counted since it started)."""

    optimistic: int
    """Optimistic deliveries."""
    confirmed: int
    """Final deliveries that confirmed the oldest optimistic one (``reordered=False``)."""
    reordered: int
    """Final deliveries with ``reordered=True`` (``unannounced`` included)."""
    unannounced: int
    """Final deliveries of messages not delivered optimistically before."""
    plans: int
    """Plans (delay rows) taken from the coordinator."""
    plans_made: int
    """Plans this member computed as the coordinator."""
    delays: tuple[tuple[ProcessId, float], ...]
    """The delay this member adds to each sender's messages now."""
    latencies: tuple[tuple[ProcessId, float], ...]
    """This member's one-way latency estimate to each peer."""
    revoked: int = 0
    """Optimistic deliveries ended by a ``REVOKED`` delivery: their source
    left the view before the group sequenced them."""


@attrs.frozen(kw_only=True, slots=True)
class TokenRingStatistics:
    role: str
    instance: int
    view: int
    core: tuple[ProcessId, ...]
    members: tuple[ProcessId, ...]
    broadcasts: int
    delivered: int
    next_deliver: int
    stable: int
    tokens_accepted: int
    light_changes: int
    full_changes: int
    proposals: int
    fetches: int
    messages_sent: int
    messages_received: int
    messages_resent: int = 0
    """Messages sent again because a peer reported them lost (link sessions)."""
    link_gaps: int = 0
    """Losses found on incoming links (each one repaired by the peer)."""
    messages_let_go: int = 0
    """Messages dropped unacknowledged because a link's buffer was full or
    they waited four ``fetch_timeout`` s (the protocol's own repairs cover
    them)."""
    token_resends: int = 0
    """Tokens sent again because their receiver did not acknowledge them
    within the retransmission timeout (docs/token-ring.md, *Losses*)."""
    payloads_carried: int = 0
    """Payloads carried by the tokens this process sent while it saw losses
    (docs/token-ring.md, *Losses*, *the token on a lossy network*)."""
    tokens_relayed: int = 0
    """Copies of the token this process sent through other core members."""
    tokens_forwarded: int = 0
    """Copies of another holder's token this process passed on to their receiver."""
    exclusion: str | None = None
    """Why the process left the view for good (see ``TokenRingProcess.exclusion``)."""
    quorum: bool = False
    """This member is in a view and heard from a majority of its members
    (itself included) within ``suspect_timeout`` (``TokenRingProcess.quorum``):
    False within ``suspect_timeout`` of being cut off from the majority, which
    moves a member it does not hear out of the core after that long."""
    incarnation: int = 0
    """This start of the member (``epto._incarnation``)."""
    optimistic: OptimisticStatistics | None = None
    """With optimistic delivery: what it did (docs/optimistic.md)."""
