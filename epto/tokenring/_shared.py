"""What every part of a token-ring process reads: who it is, the configuration
it is in and its role, its order book, its failure detector, its counters and
its refusals. One small object, built by :class:`TokenRingProcess` and passed
to each part.

Rules:

* ``pid`` never changes; ``settings`` is the engine's
  :class:`TokenRingConfig` with the timeouts in use (refitted by
  :class:`TokenRingProcess` only).
* ``ring`` (the installed :class:`RingConfig`: view and i-view) and
  ``role`` change only when a decided configuration is installed
  (``_change.ViewChange.install``) or when the process leaves the view for
  good (``TokenRingProcess._leave``, which also sets
  ``exclusion``, once); every other part only reads them.
* ``book`` (:class:`._sequencer.OrderBook`) and ``fd``
  (:class:`._membership.FailureDetector`) keep their own invariants; the parts
  call their methods.
* ``incarnation`` (this process's) never changes. ``incarnations`` holds,
  for each member of the view, the incarnation that is the member: the
  one the installed configuration lists, else the first one heard under
  its id; ``newer`` the members whose later incarnation was heard (a member
  restarted under its id, to be replaced by the next full change). Both
  hold members of the view only (:meth:`Shared.record`), so they stay as
  small as the view.
* ``voting`` holds, for a member of the view whose later incarnation asks
  in *with the member's durable state* (its join's ``resumes`` is the
  incarnation that is the member here), that later incarnation: its
  answers in a view change (promises, acceptances, nacks) count as the
  member's until the change that replaces the member is installed
  (docs/token-ring.md, *A majority restarted at once*). ``resumes`` is,
  for this process, the member's incarnation whose durable vote it
  restored (None: none), which its joins carry.
* ``fresh`` is True until the process installs its first decision: a
  bootstrap member that finds the group beyond its bootstrap view while
  fresh has just (re)started, and joins instead of taking the state it
  never held.
* ``restarted`` (fixed at start) is True for a start of a member that ran
  before (its data directory holds an earlier incarnation): it never founds
  a group; it joins, and only a configuration that lists this incarnation
  admits it.
* ``now`` is the latest time an input brought (statistics read it).
* An event enters (a payload, a catch-up entry, a reported one) only if
  :meth:`Shared.authentic` says so; a refusal is counted in ``rejected`` by
  reason, which only grows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .._event import Event, ProcessId
from ._config import TokenRingConfig
from ._membership import FailureDetector, Role
from ._messages import RingConfig
from ._roundtrips import PeerRoundTrips
from ._sequencer import OrderBook
from ._stats import Counters


class Shared:
    """The state every part of one process reads."""

    __slots__ = (
        "_verifier",
        "book",
        "counts",
        "exclusion",
        "fd",
        "fresh",
        "incarnation",
        "incarnations",
        "loss_seen",
        "newer",
        "now",
        "pid",
        "rejected",
        "restarted",
        "resumes",
        "ring",
        "role",
        "settings",
        "trips",
        "voting",
    )

    def __init__(
        self,
        pid: ProcessId,
        cfg: TokenRingConfig,
        *,
        config: RingConfig,
        role: Role,
        verifier: Callable[[Event], str | None] | None,
        incarnation: int = 0,
        now: float = 0.0,
        restarted: bool = False,
    ) -> None:
        self.pid = pid
        self.restarted = restarted
        self.incarnation = incarnation
        self.incarnations: dict[ProcessId, int] = {pid: incarnation}
        self.newer: dict[ProcessId, int] = {}
        self.voting: dict[ProcessId, int] = {}
        self.resumes: int | None = None
        self.fresh = True
        self.now = now
        self.settings = cfg
        self.ring = config
        self.role = role
        self.exclusion: str | None = None
        self.book = OrderBook(log_retention=cfg.log_retention)
        self.fd = FailureDetector()
        self.counts = Counters()
        self.rejected: dict[str, int] = {}
        self.loss_seen = -math.inf
        """When this member last saw a message lost: a gap on a link from a
        peer or a peer reporting ours missing (``Outbox.on_heartbeat``), or a
        token it sent again (``TokenPath``; undone when an earlier copy turns
        out to have arrived). The token's copies (:mod:`._tokencopies`) go while
        that is recent."""
        self.trips = PeerRoundTrips(2 * cfg.fetch_timeout)
        """The round trips this member measures to each member (a token
        acknowledged, a fetch answered): the fast repairs towards a member
        wait ``trips.rto(member)``."""
        self._verifier = verifier

    def authentic(self, event: Event) -> bool:
        """Whether ``event`` may enter (always, without a verifier)."""
        if self._verifier is None:
            return True
        reason = self._verifier(event)
        if reason is None:
            return True
        self.reject(reason)
        return False

    def record(self, pid: ProcessId, incarnation: int) -> str | None:
        """Take in that a message of ``pid`` came from ``incarnation``: None
        if it comes from the member (learning its incarnation if it was
        unknown), else why to refuse it (``stale-incarnation``: an earlier
        start of the member; ``restarted``: a later start, not admitted yet,
        noted in ``newer``)."""
        known = self.incarnations.get(pid)
        if known is None:
            if pid not in self.ring.members:
                return None
            self.incarnations[pid] = known = incarnation
        if incarnation == known:
            return None
        if incarnation < known:
            return "stale-incarnation"
        if pid in self.ring.members and pid != self.pid:
            self.newer[pid] = max(incarnation, self.newer.get(pid, incarnation))
        return "restarted"

    def adopt_incarnations(self, config: RingConfig) -> list[ProcessId]:
        """Install the incarnations ``config`` lists (keeping those learned
        for members it does not list); returns the members whose incarnation
        changed (their links start afresh)."""
        listed = {p: i for p, i in config.incarnations if p in config.members}
        old = self.incarnations
        new = {p: listed.get(p, old.get(p)) for p in config.members}
        self.incarnations = {p: i for p, i in new.items() if i is not None}
        self.incarnations.setdefault(self.pid, self.incarnation)
        now_in = self.incarnations
        self.newer = {
            p: i for p, i in self.newer.items() if p in config.members and i > now_in.get(p, -1)
        }
        self.voting = {p: i for p, i in self.voting.items() if self.newer.get(p) == i}
        return [p for p, i in self.incarnations.items() if p in old and old[p] != i]

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def k(self) -> int:
        """How many core members must hold a batch for it to become stable."""
        return self.settings.effective_k(len(self.ring.members), len(self.ring.core))
