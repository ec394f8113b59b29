"""Fetching what a token-ring process misses, and serving others' fetches.

Rules:

* A process *wants* when it has not delivered up to what it knows to be
  final (:meth:`Fetcher.known_end`: its stability mark, or what a member's
  heartbeat says it delivered), or when a token waits here for messages it
  lacks. ``since`` is when it started to want; None when it wants nothing.
* While it wants, it sends one ``Fetch`` per ``fetch_timeout`` (counted from
  ``since`` and the last one sent), to the member whose notice it last
  heard, or the holder of the token waiting here; else (or if that member
  said it no longer keeps what we miss) to a member drawn with the process's
  ``rng`` among those ahead of us (those that did not say so first), else
  among the core and the members the token names as holders of the first
  payload we miss (one that left the core since may be the only one that
  holds it), else among the members. A token that waits here for
  messages makes the first fetch go at once (a negative acknowledgement to
  its sender, which holds them), and a fetch due while the last one is
  unanswered goes to another member than that one (its link may be down).
* A catch-up that answers the last fetch, sent once to that member, is a
  round-trip sample (``Shared.trips``).
* A fetch spans at most :data:`FETCH_SPAN` positions whatever a token or a
  heartbeat claims, and a catch-up answers at most as many, with final
  assignments only (below the stability mark; see :mod:`._sequencer`).
* ``too_old`` remembers, per member, the position we missed when it said it
  no longer keeps it; once every member ahead of us said so for the same
  position, nobody will serve it (:meth:`Fetcher.nobody_keeps`).
"""

from __future__ import annotations

import math
import random

from .._event import ProcessId
from ._messages import Catchup, Fetch, TokenState
from ._outbox import Outbox
from ._shared import Shared

FETCH_SPAN = 4096
"""Most positions one fetch asks for and one catch-up answers."""


class Fetcher:
    """When and whom one process asks for what it misses."""

    __slots__ = (
        "_asked",
        "_due",
        "_fast_for",
        "_order_from",
        "_out",
        "_rng",
        "_s",
        "_sent",
        "_too_old",
        "since",
    )

    def __init__(self, shared: Shared, out: Outbox, rng: random.Random) -> None:
        self._s = shared
        self._out = out
        self._rng = rng
        self.since: float | None = None
        """When this process started to want something (read by others,
        written only here)."""
        self._sent = -math.inf
        self._order_from: ProcessId | None = None
        self._too_old: dict[ProcessId, int] = {}
        """Members that said they no longer keep what we miss, and the
        position we missed then."""
        self._fast_for: tuple[int, int] | None = None
        """The key of the last fetch sent at once (see :meth:`start`)."""
        self._due = math.inf
        """When a fetch is due at once (a token waits here for messages it
        lacks), whatever ``fetch_timeout`` says."""
        self._asked: tuple[ProcessId, float, bool] | None = None
        """The last fetch not answered yet: (to whom, when, whether a fetch
        went to the same member before it): its answer is a round-trip
        sample unless it was asked twice; a fetch due while it is unanswered
        goes to another member."""

    def start(self, now: float, at_once: tuple[int, int] | None = None) -> None:
        """This process wants something (from ``now`` unless it already did).
        ``at_once``: a fetch goes now, not ``fetch_timeout`` later, once per
        key: the (configuration, hop) of a token that waits here for messages
        (its sender holds what we lack), or ``(-1, stable)`` for positions
        final here whose payloads are missing (the member whose notice made
        them final holds them)."""
        if self.since is None:
            self.since = now
        if at_once is not None and at_once != self._fast_for:
            self._fast_for = at_once
            self._due = now

    def stop(self) -> None:
        self.since = None
        self._due = math.inf

    def answered(self, sender: ProcessId, now: float) -> None:
        """A catch-up came from ``sender``: a round trip, if it answers the
        last fetch, sent to it once."""
        asked = self._asked
        if asked is not None and asked[0] == sender:
            self._asked = None
            if not asked[2]:
                s = self._s
                s.trips.sample(sender, now - asked[1], len(s.ring.members))

    def heard_order(self, sender: ProcessId) -> None:
        """``sender``'s notice told of a newer token: ask it first."""
        self._order_from = sender

    def timer(self) -> float:
        if self.since is None:
            return math.inf
        return min(self._due, max(self.since, self._sent) + self._s.settings.fetch_timeout)

    def check(
        self,
        now: float,
        pending: tuple[ProcessId, TokenState] | None,
        snap: TokenState | None = None,
    ) -> None:
        """Send a fetch if one is due; ``pending`` is the token waiting here,
        ``snap`` the most advanced state of the token known here (its batches
        name who holds a payload missing here)."""
        if self.since is None:
            return
        s = self._s
        if now < self._due and now < max(self.since, self._sent) + s.settings.fetch_timeout:
            return
        self._due = math.inf
        self._sent = now
        book = s.book
        end = self.known_end()
        target = self._order_from
        if pending is not None:
            end = max(end, pending[1].next_seq)
            target = pending[0]
        need = book.next_deliver
        too_old = self._too_old
        asked = self._asked
        unanswered = None if asked is None else asked[0]
        if target is not None and target == unanswered:
            # The last fetch to it went unanswered (its link may be down):
            # ask another member that can serve it.
            target = None
        if target is None or target == s.pid or too_old.get(target) == need:
            # Members that delivered past what we miss can serve it (those that
            # did not say they no longer keep it first); others may miss it too.
            ahead = self._ahead()
            others = [m for m in ahead if too_old.get(m) != need and m != unanswered] or [
                m for m in ahead if m != unanswered
            ]
            if not others:
                # The core, and the token's holders of the first payload we
                # miss: a member that sequenced a message and left the core
                # since may be the only one that holds it.
                holders = self._holders(pending, snap)
                mine = (s.pid, unanswered)
                core = s.ring.core
                others = (
                    [m for m in core if m not in mine]
                    + sorted(m for m in holders if m not in mine and m not in core)
                    or [m for m in s.ring.members if m not in mine]
                    or [m for m in s.ring.members if m != s.pid]
                )
            if not others:
                return
            target = self._rng.choice(others)
        # A fetch covers at most FETCH_SPAN positions (what one catch-up carries),
        # whatever a token or a heartbeat claims: the walk below is bounded.
        end = min(end, book.next_deliver + FETCH_SPAN)
        gaps, ids = book.missing(end)
        # Positions others have delivered but that are not final here need the
        # group's assignments even where we hold tentative ones (a token of ours
        # the group may have replaced): ask from our stability mark on.
        final_end = min(self.known_end(), book.next_deliver + FETCH_SPAN)
        unconfirmed = book.stable < final_end
        if not gaps and not ids and not unconfirmed:
            self.since = None
            return
        start = max(book.stable, book.next_deliver) if unconfirmed else end
        if gaps:
            start = min(start, gaps[0])
        if ids:
            # A payload the others may have delivered already is served from
            # their logs, by position.
            start = book.next_deliver
        self._out.send(target, Fetch(start=start, end=end, ids=tuple(ids[:1024])))
        self._asked = (target, now, unanswered == target)
        self._sent = now
        s.counts.fetches += 1
        self._order_from = None

    def _holders(
        self, pending: tuple[ProcessId, TokenState] | None, snap: TokenState | None
    ) -> frozenset[ProcessId]:
        """The holders, in the token (``pending``'s, else ``snap``), of the
        first batch with a payload missing here; empty if none is known. The
        walk is bounded by the token's window."""
        book = self._s.book
        need = book.next_deliver
        for state in (pending[1] if pending is not None else None, snap):
            if state is None:
                continue
            for b in state.batches:
                if b.end <= need:
                    continue
                start = max(0, need - b.first)
                if any(book.payload(eid) is None for eid in b.ids[start:]):
                    return b.holders
        return frozenset()

    def known_end(self) -> int:
        """How far this process knows the order to be final: its stability mark,
        or further if a member's heartbeat says it delivered further (a member
        that missed the notices, with no configuration change to come, must
        still deliver what the others did)."""
        s = self._s
        reported = s.fd.reported_delivered
        me = s.pid
        ahead = max((reported.get(m, 0) for m in s.ring.members if m != me), default=0)
        return max(s.book.stable, ahead)

    def _ahead(self) -> list[ProcessId]:
        """The other members whose heartbeats say they delivered past our watermark."""
        s = self._s
        need = s.book.next_deliver
        reported = s.fd.reported_delivered
        return [m for m in s.ring.members if m != s.pid and reported.get(m, -1) > need]

    def nobody_keeps(self, sender: ProcessId, need: int) -> bool:
        """``sender`` no longer keeps position ``need``, which we miss: True
        once every member ahead of us said so."""
        self._too_old[sender] = need
        ahead = self._ahead()
        return bool(ahead) and all(self._too_old.get(m) == need for m in ahead)

    def on_fetch(self, sender: ProcessId, msg: Fetch, now: float) -> None:
        book = self._s.book
        # Final assignments only (below our stable watermark): a tentative one
        # may belong to a token the group has replaced (see _sequencer).
        end = min(msg.end, msg.start + FETCH_SPAN, book.stable)
        entries = tuple(book.entries(msg.start, end))
        events = tuple(e for e in (book.payload(i) for i in msg.ids) if e is not None)
        self._out.send(
            sender,
            Catchup(entries=entries, events=events, stable=book.stable, oldest=book.log_start),
        )
