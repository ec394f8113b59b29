"""The token path of a token-ring process: accepting the token (once every
message sequenced before is here), acknowledging it, sequencing and passing
it, sending it again until acknowledged, and the order notices that carry
its state to every member.

Rules:

* One token per configuration, its states a chain ordered by ``hop``
  (:mod:`._sequencer`). ``snap`` is the most advanced state of the current
  configuration's token known here; it only moves forward within a
  configuration, and restarts from the decided state at each install.
* A core member acknowledges a token when it arrives, and accepts it
  (``pending``, with its sender) only when it holds every message sequenced
  before it (``OrderBook.holds_through``); until then the fetcher wants, and
  its first fetch goes at once, to the token's sender. It accepts a hop at
  most once (``accepted_hop``), acknowledging a retransmission of one it
  accepted or holds pending.
* The holder keeps the token ``token_hold`` (``pass_at``), longer on a busy
  ring (``token_hold`` times the messages its window carries, sequenced in
  about the last round, at most ``max_hold`` and ``token_timeout / (2 *
  core size)``: :meth:`TokenPath.busy_hold`), or passes it at
  once when a full batch is waiting that this visit could sequence and the
  window has room for it or can drain (:meth:`TokenPath.hurry`). An idle
  token (nothing to sequence, everything sequenced deliverable) is kept up
  to ``token_timeout / (2 * core size)`` (an eighth of it while this member
  saw losses lately), and leaves the busy hold after a message arrives
  (:meth:`TokenPath.hold`). Either way each core member
  sees the token at least every ``token_timeout / 2`` (plus the links'
  delays), which tells its loss from a quiet ring. A visit
  sequences what the window allows: at most ``max_unstable_messages`` and
  ``max_unstable_bytes`` (:meth:`TokenPath.window_room`).
* A token passed (``passed``) is sent again to the same member until it is
  acknowledged or a later hop is known here: after the measured
  retransmission timeout (``Shared.trips``), doubled at each resend, at most
  ``max(fetch_timeout, suspect_timeout / 2)``; or at once when another
  message comes from that member ``1.25 x srtt`` or more after the last
  send (:meth:`TokenPath.heard_from`: the link works now, and the copy was
  lost). Each send of a hop is numbered (``Token.copy``) and its receiver
  names the copy it acknowledges: a token sent again counts as a loss
  (``Shared.loss_seen``) until an earlier copy is acknowledged, and every
  acknowledgement is a round trip from the send of its copy. While losses
  are recent, every token sent
  carries its window's payloads and goes through other core members too
  (:mod:`._tokencopies`).
* A fenced process (it promised in a view change, ``fenced_since``) takes no
  part in the token: it drops what it holds and ignores tokens and notices
  until a decision is installed.
* Only this object writes its state; the other parts read ``token``,
  ``pending``, ``snap``, ``token_seen`` (when a token was last accepted or
  heard of), ``fenced_since`` and ``vouched``.

Size: one object owns the token's state along its whole path (accept, hold,
sequence, pass, resend); the hold decisions read that state and move its
``pass_at``, so they stay with it. The sequencing and the order book
(:mod:`._sequencer`) and the outbox (:mod:`._outbox`) are modules of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .._event import EventId, ProcessId
from . import _sequencer as seqr
from ._fetch import Fetcher
from ._membership import Input, Role
from ._messages import ConfigRequest, Order, Token, TokenAck, TokenState
from ._outbox import Outbox
from ._shared import Shared
from ._tokencopies import MAX_COPY, TokenCopies

if TYPE_CHECKING:
    from ._optimistic import OptimisticPath


LOSSY_IDLE_DIVISOR = 8
"""While a member saw losses lately, it keeps an idle token this many times
shorter (:meth:`TokenPath.hold`)."""


def batch_bytes(members: int) -> int:
    """What one batch of the window counts against ``max_unstable_bytes``
    besides its messages: its first position, run and holder counts, and a
    holder id per member of the view (its holders are members of the view).
    Charged to the budget so that a window of many small batches fits the
    frame as well as one of a few large ones."""
    return 16 + 8 * members


class TokenPath:
    """The token as one process sees it."""

    __slots__ = (
        "_accepted_hop",
        "_copies",
        "_doubt",
        "_fetch",
        "_leave",
        "_optimistic",
        "_out",
        "_passed",
        "_s",
        "_window_bytes",
        "fenced_since",
        "pass_at",
        "pending",
        "snap",
        "token",
        "token_seen",
        "vouched",
    )

    def __init__(
        self,
        shared: Shared,
        out: Outbox,
        fetch: Fetcher,
        leave: Callable[[Input], None],
        now: float,
        optimistic: OptimisticPath | None = None,
    ) -> None:
        self._s = shared
        self._copies = TokenCopies(shared, out)
        """Payloads carried and copies relayed while the network loses messages."""
        self._optimistic = optimistic
        """With optimistic delivery, the holder sequences in its optimistic order."""
        self._out = out
        self._fetch = fetch
        self._leave = leave
        self.snap: TokenState = shared.ring.state
        self.token: TokenState | None = None
        self.pending: tuple[ProcessId, TokenState] | None = None
        self._passed: tuple[ProcessId, TokenState, float, int] | None = None
        """The token passed and not acknowledged yet: (to, state, when last
        sent, how many times sent again)."""
        self._accepted_hop = -1
        """Hop of the last token of the current configuration accepted here."""
        self._doubt: tuple[ProcessId, int, int, float, dict[int, float]] | None = None
        """The resends of the last hop sent again, taken as a loss
        (``Shared.loss_seen``): its receiver, instance, hop, when it was
        last sent again, and each resend's copy number with ``loss_seen``
        before it; undone back to the first resend that was not needed
        once an earlier copy turns out to have arrived (:meth:`on_token_ack`)."""
        self.vouched = 0
        """Token states this process accepted or created (sequenced and
        passed on) since it started: each one is a state it vouches for
        (the order notices and the token it sends count it as a holder), so
        the member's durable vote is due again whenever this grows."""
        self._window_bytes: dict[int, tuple[tuple[EventId, ...], int]] = {}
        """Bytes of the token's batches (first position -> ids, bytes), see
        :meth:`window_room`."""
        self.pass_at = math.inf
        self.token_seen = now
        self.fenced_since: float | None = None

    # -- lifecycle ------------------------------------------------------------

    def stop(self) -> None:
        """Drop the token, the one waiting here and the one passed."""
        self.token = None
        self.pending = None
        self._passed = None

    def fence(self, now: float) -> None:
        """A promise was made: take no part in the current token."""
        if self.fenced_since is None:
            self.fenced_since = now
        self.token = None
        self.pending = None
        self._passed = None

    def restart(self, state: TokenState, now: float) -> None:
        """A configuration was installed: its token starts from ``state``."""
        self.snap = state
        self.fenced_since = None
        self.token = None
        self.pending = None
        self._passed = None
        self._accepted_hop = -1
        self.token_seen = now

    def wants_change(self, now: float) -> bool:
        """Whether the token is lost (a core member has not seen it for
        ``token_timeout``) or this process has been fenced too long."""
        s = self._s
        cfg = s.settings
        token_lost = (
            s.role is Role.CORE
            and self.token is None
            and self.pending is None
            and now - self.token_seen > cfg.token_timeout
        )
        stuck = self.fenced_since is not None and now - self.fenced_since > cfg.change_timeout
        return token_lost or stuck

    # -- timers ---------------------------------------------------------------

    def _resend_period(self, dest: ProcessId, tries: int) -> float:
        """How long after its last send a token not acknowledged is sent
        again: the measured retransmission timeout (``Shared.trips``),
        doubled at each resend, at most ``max(fetch_timeout, suspect_timeout
        / 2)``."""
        s = self._s
        cfg = s.settings
        ceiling = max(cfg.fetch_timeout, cfg.suspect_timeout / 2)
        backoff = float(2 ** min(tries, 16))
        return min(ceiling, max(s.trips.rto(dest), cfg.token_hold) * backoff)

    def timer(self) -> float:
        t = self.pass_at if self.token is not None else math.inf
        passed = self._passed
        if passed is not None:
            t = min(t, passed[2] + self._resend_period(passed[0], passed[3]))
        return t

    def tick(self, now: float) -> None:
        if self.token is not None and now >= self.pass_at:
            self.pass_token(now)
        passed = self._passed
        if passed is not None and now >= passed[2] + self._resend_period(passed[0], passed[3]):
            # No acknowledgement: the link may have broken with the token in
            # flight. Send the same token again, to the same member.
            self._resending(passed[0], passed[1], now, passed[3] + 1)
            self._passed = (passed[0], passed[1], now, passed[3] + 1)
            self._s.counts.token_resends += 1

    def heard_from(self, sender: ProcessId, now: float) -> None:
        """A message other than a token acknowledgement came from ``sender``.

        A break takes both directions of a link down, so the link was up
        when it was sent. If the token passed to ``sender`` is still not
        acknowledged ``1.25 x srtt`` of that link after its last send (its
        acknowledgement, sent on arrival, would have come first: links are
        FIFO), that copy was lost: send it again now, while the link is
        known to work, rather than at the resend timer, which knows nothing
        of the link and often sends onto a link still down (or breaks it
        under the copy in flight). No sample yet: the timer alone."""
        passed = self._passed
        if passed is None or passed[0] != sender:
            return
        s = self._s
        srtt = s.trips.srtt(sender)
        if srtt is None or now - passed[2] < max(s.settings.token_hold, 1.25 * srtt):
            return
        self._resending(sender, passed[1], now, passed[3] + 1)
        self._passed = (sender, passed[1], now, passed[3] + 1)
        s.counts.token_resends += 1

    def _resending(self, dest: ProcessId, state: TokenState, now: float, copy: int) -> None:
        """Send the token ``state`` to ``dest`` again (its ``copy``-th resend),
        taking that as a loss until an earlier copy turns out to have
        arrived (:meth:`on_token_ack`)."""
        s = self._s
        copy = min(copy, MAX_COPY)
        doubt = self._doubt
        key = (dest, state.instance, state.hop)
        if doubt is not None and doubt[:3] == key and s.loss_seen == doubt[3]:
            before = {**doubt[4], copy: s.loss_seen}
        else:
            before = {copy: s.loss_seen}
        self._doubt = (*key, now, before)
        s.loss_seen = now
        self._copies.send(dest, state, now, copy=copy)

    # -- receiving ------------------------------------------------------------

    def on_token(self, sender: ProcessId, msg: Token, now: float) -> None:
        s = self._s
        state = msg.state
        if msg.forward_to is not None:
            # A copy for another member, sent round a link that may be down.
            self._copies.forward(sender, msg, now)
            return
        if state.instance > s.ring.instance:
            self._out.send(sender, ConfigRequest())
            return
        if (
            state.instance < s.ring.instance
            or self.fenced_since is not None
            or s.role is not Role.CORE
        ):
            return
        # Every copy that arrives is acknowledged, naming the copy.
        ack = TokenAck(instance=state.instance, hop=state.hop, copy=msg.copy)
        if state.hop <= self._accepted_hop:
            # A retransmission of a token already accepted here.
            self._out.send(sender, ack)
            return
        if self.pending is not None and self.pending[1].hop >= state.hop:
            # A retransmission of the token waiting here: acknowledged already.
            if self.pending[1].hop == state.hop:
                self._out.send(sender, ack)
            return
        # Acknowledged on receipt, before the messages it waits for are here:
        # its sender stops sending it again (each send is one more chance for
        # a link that breaks to lose what is in flight), and the round trip
        # it measures is the link's, not the wait (``Shared.trips``).
        self._out.send(sender, ack)
        self.offer(sender, state, now)

    def on_token_ack(self, sender: ProcessId, msg: TokenAck, now: float) -> None:
        passed = self._passed
        if (
            passed is not None
            and passed[0] == sender
            and msg.instance == passed[1].instance
            and msg.hop >= passed[1].hop
        ):
            self._passed = None
        doubt = self._doubt
        if doubt is not None and doubt[:3] == (sender, msg.instance, msg.hop):
            later = [copy for copy in doubt[4] if copy > msg.copy]
            if later:
                # A copy sent before the resends in ``later`` arrived (its
                # receiver names the copy it acknowledges): they were not
                # needed, and nothing was lost (as TCP's timestamps tell a
                # spurious retransmission, at its first acknowledgement).
                # The copies are not worth sending for them.
                self._doubt = None
                s = self._s
                if s.loss_seen == doubt[3]:
                    s.loss_seen = doubt[4][min(later)]

    def on_order(self, sender: ProcessId, msg: Order, now: float) -> None:
        if msg.state.instance != self._s.ring.instance or self.fenced_since is not None:
            return
        if msg.state.hop > self.snap.hop:
            self.token_seen = now
            self._fetch.heard_order(sender)
        try:
            self._s.book.learn(msg.assigned, 0)
        except seqr.Divergence:
            self._leave(Input.DIVERGED)
            return
        self.learn(msg.state)

    def learn(self, state: TokenState) -> None:
        """Take in a snapshot of the current instance's token."""
        book = self._s.book
        try:
            book.learn_batches(state.batches, state.stable)
            book.check_digest(state.low, state.low_digest)
        except seqr.Divergence:
            self._leave(Input.DIVERGED)
            return
        book.keep_from(state.low)
        if state.hop > self.snap.hop:
            self.snap = state
        passed = self._passed
        if passed is not None and state.hop > passed[1].hop:
            self._passed = None

    # -- accepting, sequencing, passing ---------------------------------------

    def offer(self, sender: ProcessId, state: TokenState, now: float) -> None:
        """The token ``state`` from ``sender`` waits here until it can be accepted."""
        self.pending = (sender, state)
        self.try_accept(now)

    def try_accept(self, now: float) -> None:
        assert self.pending is not None
        s = self._s
        state = self.pending[1]
        self.learn(state)
        if s.role is not Role.CORE or not s.book.holds_through(state.next_seq):
            # Its sender holds what we lack: ask at once (a negative
            # acknowledgement), not a fetch timeout later.
            core = s.role is Role.CORE
            self._fetch.start(now, (state.instance, state.hop) if core else None)
            return
        self.pending = None
        self._accepted_hop = state.hop
        self.vouched += 1
        accepted = seqr.accept(state, s.pid, s.ring.core, s.k())
        s.counts.tokens += 1
        self.token_seen = now
        self._take(accepted, state.stable)
        self.token = accepted
        # With a full batch waiting, pass at once (see hurry_token).
        self.pass_at = now if self.hurry(accepted, now) else now + self.hold(accepted, now)

    def hold(self, token: TokenState, now: float) -> float:
        """How long the holder keeps ``token`` before passing it: ``token_hold``,
        or, while it is idle (nothing here to sequence and every message it
        sequenced may be delivered), up to ``token_timeout / (2 * core size)``:
        passing it would only carry the window's holders round, and a message
        that arrives meanwhile makes it leave ``token_hold`` later
        (:meth:`hurry_token`). Each core member still sees the token at least
        every ``token_timeout / 2``, so its loss is still told from an idle
        ring (:meth:`wants_change`). While this member saw losses lately
        (:mod:`._tokencopies`), an eighth of that: a broadcast lost on its
        way here but held by the others is sequenced when the token reaches
        one of them, which an idle token kept here would put off."""
        s = self._s
        cfg = s.settings
        if s.book.pool or token.stable < token.next_seq:
            return self.busy_hold(token)
        idle = cfg.token_timeout / (2 * len(s.ring.core))
        if self._copies.lossy(now):
            idle /= LOSSY_IDLE_DIVISOR
        return max(cfg.token_hold, idle)

    def busy_hold(self, token: TokenState) -> float:
        """How long the holder keeps ``token`` with something to sequence:
        ``token_hold``, or, when its window carries ``n`` messages, at least
        as many as the core has members (the window holds those sequenced in
        about the last round: a batch leaves it once every core member
        accepted it), ``n * token_hold``, at most ``max_hold`` and
        ``token_timeout / (2 * core size)``. A sequential caller (one message
        in flight, so at most one per visit, in the window for fewer visits
        than the core has members) is passed on at the floor; a steady stream
        makes every visit longer, so each token move, acknowledgement and
        order notice carries more messages, and the hold comes back to the
        floor within a round of the stream's end. Derived from the token
        alone: every holder computes it the same way."""
        cfg = self._s.settings
        floor = cfg.token_hold
        if cfg.max_hold <= floor or len(token.batches) == 0:
            return floor
        core = len(self._s.ring.core)
        n = sum(len(b.ids) for b in token.batches)
        if n < core:
            return floor
        bound = min(cfg.max_hold, cfg.token_timeout / (2 * core))
        return max(floor, min(bound, n * floor))

    def hurry_token(self, now: float) -> None:
        """A message arrived or was broadcast: pass sooner if that helps."""
        token = self.token
        if token is None or self.pass_at <= now:
            return
        if self.hurry(token, now):
            # A full batch is waiting: holding the token longer gains nothing.
            self.pass_at = min(self.pass_at, now)
        else:
            # An idle token (see hold) leaves the busy hold after the first
            # message.
            self.pass_at = min(self.pass_at, now + self.busy_hold(token))

    def _order(self, now: float) -> Iterable[EventId]:
        """The pool's messages in the order the holder sequences them."""
        if self._optimistic is None:
            return self._s.book.pool
        return self._optimistic.sequencing_order(now)

    def hurry(self, token: TokenState, now: float) -> bool:
        """Whether the holder of ``token`` passes it at once instead of holding it
        ``token_hold``: a full batch is waiting, and either the window has room
        for it or passing drains the window (the core has ``k`` members, so the
        batches it carries become stable and leave it once every core member
        accepted). A token whose window cannot drain (a core below ``k``) is held
        as usual instead of going round at the links' speed."""
        s = self._s
        want = min(s.settings.max_batch, seqr.BATCH_IDS)
        pool = s.book.pool
        optimistic = self._optimistic
        if optimistic is not None and optimistic.tentative_count() < want:
            return False  # not a full batch delivered optimistically: no pool scan
        if len(pool) < want or len(seqr.pick(token, self._order(now), want)) < want:
            # Not a full batch that this visit could sequence (a source's next
            # message may be missing): passing at once would send the token round
            # at the links' speed without sequencing anything.
            return False
        if len(s.ring.core) >= s.k():
            return True
        count, room = self.window_room(token)
        return count > 0 and room > 0

    def _take(self, state: TokenState, before: int) -> None:
        self.learn(state)
        if state.stable > before:
            book = self._s.book
            assigned = []
            # The notice carries the state, whose batches hold every assignment
            # from ``low`` on: list only the newly stable ones below it.
            for seq in range(before, min(state.stable, state.low)):
                eid = book.assignment(seq)
                if eid is not None:
                    assigned.append((seq, eid))
            self._out.send_all(Order(state=state, assigned=tuple(assigned)))

    def window_room(self, token: TokenState) -> tuple[int, int]:
        """How many messages, and how many bytes of them, the holder may still
        sequence without taking the token's window (what a full view change
        would exchange) beyond ``max_unstable_messages`` / ``max_unstable_bytes``.

        The bytes are the messages' payloads and signatures plus, per batch (the
        one this visit would add included), :func:`batch_bytes`. An empty window
        admits one message whatever its size; a window whose bytes are not all
        known here (a payload this member does not keep) counts as full, which
        only pauses sequencing until the token has gone round."""
        s = self._s
        cfg = s.settings
        per_batch = batch_bytes(len(s.ring.members))
        if not token.batches:
            return cfg.max_unstable_messages, max(0, cfg.max_unstable_bytes - per_batch)
        cache = self._window_bytes
        book = s.book
        used = 0
        for b in token.batches:
            known = cache.get(b.first)
            if known is not None and (known[0] is b.ids or known[0] == b.ids):
                used += known[1]
                continue
            size = book.window_bytes(b.first, b.ids)
            if size is None:
                return 0, 0
            cache[b.first] = (b.ids, size)
            used += size
        if len(cache) > 4 * len(token.batches) + 64:
            low = token.batches[0].first
            self._window_bytes = {f: v for f, v in cache.items() if f >= low}
        count = cfg.max_unstable_messages - sum(len(b.ids) for b in token.batches)
        room = cfg.max_unstable_bytes - used - per_batch * (len(token.batches) + 1)
        return max(0, count), max(0, room)

    def pass_token(self, now: float) -> None:
        token = self.token
        assert token is not None
        s = self._s
        book = s.book
        pool = book.pool
        counters = dict(token.sources)
        for eid in [e for e in pool if e[1] < counters.get(e[0], 0)]:
            del pool[eid]
        count_room, byte_room = self.window_room(token)
        ids = seqr.pick(
            token,
            self._order(now),
            min(s.settings.max_batch, count_room),
            room=byte_room,
            cost=lambda eid: seqr.event_bytes(pool[eid]),
            first_free=not token.batches,
            grouped=self._optimistic is None,
        )
        new = seqr.sequence(token, s.pid, ids, s.ring.core, s.k())
        self.vouched += 1
        # Record the new assignments: the batches the new state still carries are
        # learned as batches (a snapshot carrying them again is then skipped); the
        # first ones, if every core member already holds them (a core of one),
        # one by one.
        created = [b for b in new.batches if b.first >= token.next_seq]
        dropped = len(ids) - sum(len(b.ids) for b in created)
        if dropped:
            book.learn([(token.next_seq + i, ids[i]) for i in range(dropped)], 0)
        book.learn_batches(created, 0)
        self._take(new, token.stable)
        core = s.ring.core
        nxt = core[(core.index(s.pid) + 1) % len(core)]
        if nxt == s.pid:
            self.token = new
            self.token_seen = now
            busy = bool(book.pool)
            self.pass_at = now + (s.settings.token_hold if busy else s.settings.heartbeat_interval)
            return
        self.token = None
        self._copies.send(nxt, new, now)
        self._passed = (nxt, new, now, 0)
