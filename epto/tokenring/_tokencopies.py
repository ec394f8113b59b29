"""The token on a lossy network: its window's payloads travel with it, and
copies of it go round a broken link through other core members.

What a lost message costs the token ring is mostly the token's: a token
lost with its link waits for a resend, and a token that reaches a member
lacking a payload waits there for a fetch. In the simulator's setting
(docs/token-ring.md, *Under loss*: PlanetLab latencies, 5 members, a send
breaking its link for a round trip with probability 5%), a token path that
loses nothing and never waits for a payload would bring the p99 delivery
delay from about 6.5 s to 1.3 s (``scripts/token_ring_loss_bounds.py``).
This object buys most of that back with sends, and only while this member
saw a loss lately, so that a network that loses nothing pays nothing:

* **lossy** means this member saw evidence of a lost message within
  :data:`LOSS_MEMORY` suspicion timeouts (``Shared.loss_seen``: a gap on a
  link, a peer reporting ours missing, a token sent again);
* while lossy, a token passed (or sent again) carries the payloads of its
  window (positions ``low`` to ``next_seq``, the receiver's own left out,
  at most :data:`MAX_CARRIED` and :data:`MAX_CARRIED_BYTES`): what the
  receiver must hold before it may accept, so a broadcast lost on its way
  there costs no fetch;
* and the holder sends the same token, with ``forward_to`` naming its
  receiver, to up to :data:`RELAYS` other core members, those with the
  shortest measured round trip first; each passes it on once (per hop, and
  again for a resend at most once per ``fetch_timeout``). A break of one
  link then leaves the token other paths. The receiver takes the first
  copy and acknowledges each to whoever sent it; the holder's resends and
  round-trip samples stay those of the direct link.

A copy is the token itself: the same state, accepted at most once per hop
(``TokenPath``), so relaying adds no token. A copy whose ``forward_to``
names the relay, its sender or no member is dropped and counted
(``bad-relay``); one of another configuration, to a member outside the
core, or received outside the core is dropped (views differ for a moment
around a change). What a relay remembers is one hop per core member.
"""

from __future__ import annotations

import math

import attrs

from .._event import Event, ProcessId
from ._membership import Role
from ._messages import Token, TokenState
from ._outbox import Outbox
from ._shared import Shared

RELAYS = 3
"""Most core members a lossy holder sends a copy of the token through."""

LOSS_MEMORY = 4
"""Suspicion timeouts a loss keeps this member lossy."""

MAX_CARRIED = 64
"""Most payloads one token carries (the rest are fetched, as without): the
window of a ring at a few messages per visit fits; a saturated ring's
window (thousands) would make every copy of a resend, spurious or not,
cost what the window weighs (docs/token-ring.md, *Losses*)."""

MAX_CARRIED_BYTES = 1 << 16
"""Most payload and signature bytes one token carries (one payload at least)."""

MAX_COPY = 255
"""The largest :attr:`Token.copy` (one byte): later resends of a hop say 255."""


class TokenCopies:
    """One process's copies of the token: carried payloads, relays, forwards."""

    __slots__ = ("_forwarded", "_out", "_s")

    def __init__(self, shared: Shared, out: Outbox) -> None:
        self._s = shared
        self._out = out
        self._forwarded: dict[ProcessId, tuple[int, int, float]] = {}
        """Per receiver: the (instance, hop) last passed on to it, and when."""

    def lossy(self, now: float) -> bool:
        s = self._s
        return now - s.loss_seen < LOSS_MEMORY * s.settings.suspect_timeout

    def send(self, dest: ProcessId, state: TokenState, now: float, *, copy: int = 0) -> None:
        """Send the token ``state`` to ``dest`` (``copy``: 0 the first send of
        its hop, ``n`` the ``n``-th resend, :attr:`Token.copy`): alone, or,
        while lossy, with its window's payloads and copies through other
        core members."""
        if not self.lossy(now):
            self._out.send(dest, Token(state=state, copy=copy))
            return
        counts = self._s.counts
        events = self._window(dest, state)
        counts.payloads_carried += len(events)
        self._out.send(dest, Token(state=state, events=events, copy=copy))
        for via in self._relays(dest):
            self._out.send(via, Token(state=state, events=events, forward_to=dest))
            counts.tokens_relayed += 1

    def _window(self, dest: ProcessId, state: TokenState) -> tuple[Event, ...]:
        """The payloads of ``state``'s window held here, but ``dest``'s own,
        as their sources broadcast them (unstamped)."""
        out: list[Event] = []
        room = MAX_CARRIED_BYTES
        # A bounded walk: the receiver's own events are skipped, the rest
        # fill the token up to MAX_CARRIED.
        end = min(state.next_seq, state.low + 4 * MAX_CARRIED)
        for _, event in self._s.book.entries(state.low, end):
            if event.source == dest:
                continue
            room -= len(event.payload) + len(event.signature)
            if out and room < 0:
                break
            out.append(event if event.ts == 0 else attrs.evolve(event, ts=0))
            if len(out) >= MAX_CARRIED:
                break
        return tuple(out)

    def _relays(self, dest: ProcessId) -> list[ProcessId]:
        s = self._s
        others = [p for p in s.ring.core if p != s.pid and p != dest]
        trips = s.trips

        def measured(p: ProcessId) -> float:
            srtt = trips.srtt(p)
            return math.inf if srtt is None else srtt

        return sorted(others, key=measured)[:RELAYS]

    def forward(self, sender: ProcessId, msg: Token, now: float) -> None:
        """A copy from ``sender`` to pass on to ``msg.forward_to``."""
        s = self._s
        dest = msg.forward_to
        state = msg.state
        if dest is None or dest in (s.pid, sender) or dest not in s.ring.members:
            s.reject("bad-relay")  # no honest holder sends that
            return
        if s.role is not Role.CORE or dest not in s.ring.core or state.instance != s.ring.instance:
            return  # views that differ for a moment around a change
        last = self._forwarded.get(dest)
        key = (state.instance, state.hop)
        if last is not None and (
            key < last[:2] or (key == last[:2] and now - last[2] < s.settings.fetch_timeout)
        ):
            return  # passed on already (a resend is passed on once per fetch_timeout)
        if last is None and len(self._forwarded) >= len(s.ring.core):
            core = s.ring.core
            self._forwarded = {p: v for p, v in self._forwarded.items() if p in core}
        self._forwarded[dest] = (*key, now)
        self._out.send(dest, Token(state=state, events=msg.events))
        s.counts.tokens_forwarded += 1
