"""The counters a token-ring process reports (:meth:`TokenRingProcess.statistics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._event import ProcessId

if TYPE_CHECKING:
    from ._process import TokenRingProcess


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
    """Messages dropped unacknowledged because a link's buffer was full (the
    protocol's own repairs cover them)."""
    exclusion: str | None = None
    """Why the process left the view for good (see ``TokenRingProcess.exclusion``)."""


def statistics_of(p: TokenRingProcess) -> TokenRingStatistics:
    c = p._counts
    links = p._links.statistics()
    return TokenRingStatistics(
        role=p.role.value,
        instance=p.config.instance,
        view=p.config.view,
        core=p.config.core,
        members=p.config.members,
        broadcasts=c["broadcasts"],
        delivered=p._book.delivered_count,
        next_deliver=p._book.next_deliver,
        stable=p._book.stable,
        tokens_accepted=c["tokens"],
        light_changes=c["light"],
        full_changes=c["full"],
        proposals=c["proposals"],
        fetches=c["fetches"],
        messages_sent=c["sent"],
        messages_received=c["received"],
        messages_resent=links.resent,
        link_gaps=links.gaps,
        messages_let_go=links.let_go,
        exclusion=p.exclusion,
    )
