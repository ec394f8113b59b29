"""A token-ring process: a moving sequencer over reliable FIFO links, with a
two-level membership (seed 004), sans-IO.

Inputs take ``now`` and return nothing but an event id (:meth:`broadcast`);
outputs are pulled (:meth:`messages_to_send`, :meth:`next_delivery`,
:meth:`get_timer`). Links must be reliable and FIFO while they are up (TCP);
a broken link may lose what was in flight, which the protocol repairs
(fetches, retransmission of unsequenced messages, token regeneration).

:class:`TokenRingProcess` is a thin coordinator: it checks what comes in,
routes it to the part that owns the state it concerns, and answers the
outputs from them. The parts, each with its rules at the top of its module:

* :class:`._shared.Shared`: identity, configuration, role, order book,
  failure detector, counters, refusals (what every part reads);
* :class:`._outbox.Outbox`: what leaves, link sessions, heartbeats;
* :class:`._fetch.Fetcher`: fetching what is missing, serving fetches;
* :class:`._tokenpath.TokenPath`: the token and its order notices;
* :class:`._datapath.DataPath`: own broadcasts, payloads, delivery, catch-ups;
* :class:`._joins.Joins`: joining, and telling others the view;
* :class:`._change.ViewChange`: consensus on view changes, installing them;
* :class:`._optimistic.OptimisticPath` and :class:`._delayplans.DelayPlans`
  (with ``TokenRingConfig.optimistic``): optimistic deliveries; latency
  probes and delay plans.

Leaving the view for good (:meth:`TokenRingProcess._leave`) is the one
action that spans every part; they call it through the callback they are
given.

Size: about 560 lines. Beside the routing of every message kind, the checks
every inbound message passes before any part sees it live here (which start
of a member sent it, whether a later start votes for it, docs/token-ring.md
*Restart*; refusals counted), since they gate every part alike, and the
durable vote's two entry points (:meth:`TokenRingProcess.take_durable`,
:meth:`TokenRingProcess.resume`); the state stays in the parts.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from .._errors import LocalProtocolError
from .._event import Delivery, Event, EventId, ProcessId
from .._incarnation import check_incarnation, incarnation_of
from . import _sequencer as seqr
from ._bounds import refusal
from ._change import ViewChange
from ._config import TokenRingConfig
from ._datapath import DELIVER_CHUNK as DELIVER_CHUNK
from ._datapath import DataPath
from ._delayplans import DelayPlans
from ._durable import DurableState
from ._fetch import Fetcher
from ._joins import Joins
from ._membership import Input, Role, Timing, transition
from ._messages import (
    Accept,
    Accepted,
    Catchup,
    ConfigRequest,
    Data,
    DataBatch,
    Decided,
    Delays,
    Fetch,
    Heartbeat,
    Join,
    Latencies,
    Message,
    Nack,
    Order,
    Prepare,
    Probe,
    Promise,
    RingConfig,
    Token,
    TokenAck,
)
from ._optimistic import OptimisticPath
from ._outbox import Outbox
from ._shared import Shared
from ._stats import TokenRingStatistics as TokenRingStatistics
from ._tokenpath import TokenPath
from ._viewchange import bootstrap

_EXCLUSIONS = {
    Input.INSTALL_NOT_MEMBER: "removed from the view",
    Input.DIVERGED: "diverged",
    Input.TOO_FAR_BEHIND: "too far behind",
    Input.SUPERSEDED: "superseded",
}
SUPERSEDED = _EXCLUSIONS[Input.SUPERSEDED]
"""The :attr:`TokenRingProcess.exclusion` of a process whose member runs
again in a later incarnation."""


_VOTES = (Promise, Accepted, Nack, ConfigRequest, Decided)
"""What a later incarnation that restored the member's durable vote may send
as the member before it is admitted (a decision: one the member had
installed, which it tells a member that missed it)."""


class TokenRingProcess:
    """One member of a token-ring group.

    Bootstrap members all pass the same ``members``; a new identity passes
    ``contacts`` instead and joins by a view change. ``incarnation``
    (:mod:`epto._incarnation`) tells this start of the member from every
    earlier one: a process started again under the same id with a higher
    incarnation (with ``members`` or ``contacts``) is admitted back as that
    member by a full view change, in place of the earlier incarnation, and
    numbers its broadcasts from ``first_seq(incarnation)``. ``excluded``
    becomes True when the process is out of the view for good (``exclusion``
    says why; ``"superseded"`` when a later incarnation of the member is in
    the view): start the member again to rejoin.

    ``restarted=True`` says that this start is not the member's first (its
    data directory held an earlier incarnation, ``MemberClaim.previous``):
    the process then never founds a group at position 0, even with
    ``members``; it asks the other members to admit this incarnation (role
    ``joining``) and counts itself a member only once a configuration lists
    this incarnation. ``incarnation`` must then be above 0.
    """

    def __init__(
        self,
        pid: ProcessId,
        config: TokenRingConfig,
        *,
        rng: random.Random,
        now: float,
        members: Sequence[ProcessId] | None = None,
        contacts: Sequence[ProcessId] = (),
        signer: Callable[[Event], bytes] | None = None,
        verifier: Callable[[Event], str | None] | None = None,
        incarnation: int = 0,
        restarted: bool = False,
    ) -> None:
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise LocalProtocolError(f"process id must be an integer in [0, 2**64), got {pid!r}")
        check_incarnation(incarnation)
        self.pid = pid
        self.cfg = config
        if restarted and not incarnation:
            raise LocalProtocolError("a restarted member needs an incarnation above 0")
        if restarted and members is not None:
            # A member that ran before never founds a group: the group it
            # belongs to may be past its bootstrap view, or run on without it.
            # It asks the other members to admit this incarnation.
            if pid not in members:
                raise LocalProtocolError("a bootstrap member must be in members")
            contacts = [m for m in members if m != pid]
            if not contacts:
                raise LocalProtocolError(
                    "a group of one member restarted: nobody can admit it back; start "
                    "it as a new group knowingly (restarted=False)"
                )
            members = None
        if members is not None:
            if pid not in members:
                raise LocalProtocolError("a bootstrap member must be in members")
            view = bootstrap(tuple(members))
            role = Role.CORE
        else:
            if not contacts:
                raise LocalProtocolError("a joining process needs contacts")
            view = bootstrap((pid,))
            view = attrs.evolve(view, instance=-1, members=(), core=())
            role = Role.JOINING
        # ``verifier(event)`` is None for an authentic event, else the reason
        # (``epto.SignatureVerifier.check``); events that fail are dropped
        # where they enter (payloads, catch-ups, reports).
        self._s = s = Shared(
            pid,
            config,
            config=view,
            role=role,
            verifier=verifier,
            incarnation=incarnation,
            now=now,
            restarted=restarted,
        )
        self._deliveries: deque[Delivery] = deque()
        self._out = out = Outbox(s, now)
        self._fetch = fetch = Fetcher(s, out, rng)
        optimistic = None
        if config.optimistic is not None:
            plans = DelayPlans(s, out, config.optimistic, now)
            optimistic = OptimisticPath(s, plans, self._deliveries)
        self._optimistic = optimistic
        self._tokens = tokens = TokenPath(s, out, fetch, self._leave, now, optimistic)
        self._data = data = DataPath(
            s,
            out,
            fetch,
            tokens,
            self._leave,
            deliveries=self._deliveries,
            signer=signer,
            now=now,
            optimistic=optimistic,
        )
        self._joins = joins = Joins(s, out, contacts, now)
        self._change = change = ViewChange(s, out, tokens, data, joins, self._leave)
        self._handlers: dict[type, Callable[[ProcessId, Any, float], None]] = {
            Data: data.on_data,
            DataBatch: data.on_data_batch,
            Token: data.on_token,
            TokenAck: tokens.on_token_ack,
            Order: tokens.on_order,
            Heartbeat: out.on_heartbeat,
            Fetch: fetch.on_fetch,
            Catchup: data.on_catchup,
            Join: joins.on_join,
            ConfigRequest: joins.on_config_request,
            Decided: change.on_decided,
            Prepare: change.on_prepare,
            Promise: change.on_promise,
            Accept: change.on_accept,
            Accepted: change.on_accepted,
            Nack: change.on_nack,
        }
        if optimistic is not None:
            self._handlers |= {
                Probe: optimistic.plans.on_probe,
                Latencies: optimistic.plans.on_latencies,
                Delays: optimistic.plans.on_delays,
            }
        self._durable_key: tuple[object, ...] | None = None
        """The key of the vote :meth:`take_durable` handed out last."""
        self._timing = Timing(config)
        """The timeouts in use (``Shared.settings``): ``config``'s, fitted to the
        round trips measured and the core, backed off while view changes
        bring no progress (:class:`._membership.Timing`)."""
        self._sent_token: tuple[ProcessId, int, int, dict[int, float]] | None = None
        """The token passed last: (to, instance, hop, when each copy was sent)."""
        self._changes_seen = 0
        self._fit_core = 0
        self._fit_timing(now)
        self._restarted = members is not None or restarted
        """Started as a bootstrap member, or as a restart of a member (it may
        be joining: see :meth:`broadcast`)."""
        if members is not None:
            out.track(view.members)
            s.fd.grace(members, now)
            if view.core[0] == pid:
                tokens.offer(pid, view.state, now)
            if incarnation:
                # The first message every member gets from this start says
                # which incarnation it is: after a restart, the members refuse
                # everything else it sends (a token, a promise of the fresh
                # acceptor it is) until they have admitted it.
                out.heartbeats_due(now)

    # -- state read from outside --------------------------------------------

    @property
    def config(self) -> RingConfig:
        """The configuration (view) this process is in."""
        return self._s.ring

    @property
    def role(self) -> Role:
        return self._s.role

    @property
    def rejected(self) -> dict[str, int]:
        """Events and messages refused, by reason (signatures; values out of
        bounds; member-only messages from non-members)."""
        return self._s.rejected

    @property
    def excluded(self) -> bool:
        return self._s.role is Role.EXCLUDED

    @property
    def incarnation(self) -> int:
        """This start of the member (:mod:`epto._incarnation`)."""
        return self._s.incarnation

    @property
    def superseded(self) -> bool:
        """True once a later incarnation of this member is in the view (the
        process is excluded for good)."""
        return self._s.exclusion == SUPERSEDED

    def quorum(self) -> bool:
        """Whether this process is in a view and heard from a majority of its
        members (itself included) within ``suspect_timeout`` of the latest
        input: the timeout after which the others suspect a member they do not
        hear, move it out of the core, and go on without it. A member cut off
        from the majority reports False within ``suspect_timeout``, before
        they can have moved it out of the core (and long before they exclude
        it, ``exclude_timeout``), and True again once it hears them."""
        s = self._s
        if s.role not in (Role.CORE, Role.EXTERNAL):
            return False
        members = s.ring.members
        gap = s.settings.suspect_timeout
        fd = s.fd
        heard = sum(1 for p in members if p == s.pid or fd.heard_within(p, s.now, gap))
        return 2 * heard > len(members)

    @property
    def exclusion(self) -> str | None:
        """Why this process is out of the view for good (``"removed from the
        view"``, ``"diverged"`` or ``"too far behind"``), or None."""
        return self._s.exclusion

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """Broadcast ``payload`` to the group; it is delivered in the total order.

        A member restarted under its id may find, after it started, that the
        group must admit it back first (it is ``joining`` meanwhile): what it
        broadcasts then leaves once it is admitted. A new identity that joins
        through contacts broadcasts once admitted."""
        role = self._s.role
        if role is Role.JOINING and self._s.fresh and self._restarted:
            role = Role.EXTERNAL
        if role not in (Role.CORE, Role.EXTERNAL):
            raise LocalProtocolError(f"cannot broadcast while {role.value}")
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise LocalProtocolError(f"payload must be bytes, got {type(payload).__name__}")
        return self._data.broadcast(payload, now)

    def receive(self, sender: ProcessId, message: Message, now: float) -> None:
        """Feed a message that arrived from ``sender``."""
        s = self._s
        if s.role is Role.EXCLUDED:
            return
        if now > s.now:
            s.now = now
        s.counts.received += 1
        handler = self._handlers.get(type(message))
        if handler is None:
            return
        why = refusal(s.settings, s.ring, self._joins.contacts, sender, message)
        if why is None:
            why = self._incarnation_refusal(sender, message, now)
        if why is not None:
            s.reject(why)
            if (
                isinstance(message, Heartbeat)
                and why == "not-a-member"
                and message.instance < s.ring.instance
                and s.role in (Role.CORE, Role.EXTERNAL)
            ):
                # A member removed while it was away learns it from us.
                self._out.rate_limited(sender, Decided(config=s.ring), now)
            return
        if sender not in s.newer:
            # (A later incarnation's vote, :meth:`_incarnation_refusal`, is
            # neither a sign of the member's life nor part of its links.)
            s.fd.heard(sender, now, s.settings.suspect_timeout)
            self._out.arrived(sender, message)
        if isinstance(message, TokenAck):
            self._token_acked(sender, message, now)
        else:
            self._tokens.heard_from(sender, now)
        try:
            handler(sender, message, now)
            self._data.deliver(now)
        except seqr.Divergence:
            self._diverged()
        self._watch_timing(now)

    def _incarnation_refusal(self, sender: ProcessId, message: Message, now: float) -> str | None:
        """Why ``message`` must be dropped because of the incarnation it comes
        from, or None. Heartbeats and joins carry the sender's incarnation,
        broadcasts carry it in their ``seq``; a message of an earlier
        incarnation than the member's is refused (``stale-incarnation``), one
        of a later incarnation not admitted yet too (``not-admitted``: the
        next full change replaces the member), and so is every message that
        carries none from a member whose later incarnation was heard. Both
        are answered, rate-limited, with our view: an earlier incarnation
        learns there that it is superseded, a later one that it must join."""
        s = self._s
        if sender == s.pid:
            return "own-id"
        if isinstance(message, Heartbeat | Join):
            claimed: int | None = message.incarnation
        elif isinstance(message, Data):
            claimed = incarnation_of(message.event.seq)
        elif isinstance(message, DataBatch) and message.events:
            claimed = incarnation_of(message.events[0].seq)
            if any(incarnation_of(e.seq) != claimed for e in message.events):
                return "stale-incarnation"
        else:
            claimed = None
        if claimed is None:
            if sender not in s.newer:
                return None
            if isinstance(message, _VOTES) and s.voting.get(sender) == s.newer[sender]:
                return None  # it answers for the member (its durable vote)
            return "not-admitted"
        why = s.record(sender, claimed)
        if why is None:
            return None
        if (
            why == "restarted"
            and isinstance(message, Join)
            and message.resumes is not None
            and message.resumes == s.incarnations.get(sender)
            and s.newer.get(sender) == claimed
        ):
            # A later start that restored the member's durable vote: its
            # answers in a view change count as the member's until the
            # change that replaces the member.
            s.voting[sender] = claimed
        if s.role in (Role.CORE, Role.EXTERNAL):
            self._out.rate_limited(sender, Decided(config=s.ring), now)
        return "not-admitted" if why == "restarted" else why

    def handle_timer(self, now: float) -> None:
        s = self._s
        if s.role is Role.EXCLUDED:
            return
        if now > s.now:
            s.now = now
        try:
            self._handle_timer(now)
        except seqr.Divergence:
            self._diverged()
        self._watch_timing(now)

    def _handle_timer(self, now: float) -> None:
        if self._s.role is Role.JOINING:
            self._joins.tick(now)
            return
        if self._out.heartbeats_due(now):
            self._data.resend_own(now)
        self._tokens.tick(now)
        self._out.flush_due(now)
        self._fetch.check(now, self._tokens.pending, self._tokens.snap)
        self._change.drive(now)
        if self._optimistic is not None:
            self._optimistic.plans.tick(now)
        self._data.deliver(now)

    # -- timeouts that fit (docs/token-ring.md, *Timing*) ---------------------

    def timeouts(self) -> dict[str, float]:
        """The timeouts in use now, by ``TokenRingConfig`` field name, with
        ``latency`` (the one-way delay they are fitted to) and ``backoff``."""
        cfg = self._s.settings
        out = {name: getattr(cfg, name) for name in cfg.timing_floors(1, 0.0)}
        out["latency"] = self._timing.latency()
        out["backoff"] = self._timing.backoff
        return out

    def _fit_timing(self, now: float) -> None:
        s = self._s
        self._fit_core = core = max(len(s.ring.core), 1)
        s.settings = self._timing.config(core)

    def _token_acked(self, sender: ProcessId, ack: TokenAck, now: float) -> None:
        """A round-trip sample: the token we passed came back acknowledged,
        timed from the send of the copy the acknowledgement names: a resend
        leaves it unambiguous, as TCP's timestamps do."""
        sent = self._sent_token
        if sent is None or sent[0] != sender or sent[1] != ack.instance or sent[2] != ack.hop:
            return
        self._sent_token = None
        at = sent[3].get(ack.copy)
        if at is not None:
            s = self._s
            s.trips.sample(sender, now - at, len(s.ring.members))
            if self._timing.sample(now - at):
                self._fit_timing(now)

    def _watch_timing(self, now: float) -> None:
        """After every input: note the token passed (for its round trip), a
        change installed (for the back-off), a core of another size."""
        s = self._s
        changes = s.counts.light + s.counts.full
        book = s.book
        refit = len(s.ring.core) != self._fit_core
        if changes != self._changes_seen:
            self._changes_seen = changes
            self._sent_token = None
            waiting = bool(book.pool) or book.next_deliver < self._tokens.snap.next_seq
            refit |= self._timing.changed(now, book.delivered_count, waiting)
        else:
            refit |= self._timing.quiet(now, book.delivered_count, s.settings.suspect_timeout)
        if refit:
            self._fit_timing(now)

    def _diverged(self) -> None:
        """Our delivered prefix differs from the group's order (possible only
        with a ``k`` below the majority, or a member that delivered what it
        never should have): stop delivering and leave the view; the host
        carries on and the application sees :attr:`exclusion`."""
        if self._s.role in (Role.CORE, Role.EXTERNAL):
            self._leave(Input.DIVERGED)

    def _leave(self, why: Input) -> None:
        """Out of the view for good: every part stops."""
        s = self._s
        s.role = transition(s.role, why)
        s.exclusion = _EXCLUSIONS[why]
        self._data.stop()
        self._fetch.stop()
        self._tokens.stop()
        self._change.stop()

    # -- the durable vote ---------------------------------------------------

    def take_durable(self) -> DurableState | None:
        """This member's vote (:mod:`._durable`) when it changed since the
        last call, else None. A driver that keeps it calls this after every
        input and timer, before :meth:`messages_to_send`, and writes what it
        returns before it sends those messages: then a restart that restores
        the latest record (:meth:`resume`) votes as the member would have."""
        key = self._change.durable_key()
        if key is None or key == self._durable_key:
            return None
        self._durable_key = key
        return self._change.durable()

    def resume(self, durable: DurableState) -> str | None:
        """Restore the member's vote kept by an earlier start; None when
        restored, else why not (the process then waits to be admitted
        without a vote, as without a record). Only a restart
        (``restarted=True``) that has done nothing yet resumes, and only a
        vote of an earlier incarnation of this member, in a configuration
        that lists it."""
        s = self._s
        if not (s.restarted and s.role is Role.JOINING and s.fresh and s.resumes is None):
            return "not a restart waiting to be admitted"
        if not 0 <= durable.incarnation < s.incarnation:
            return "not an earlier incarnation's"
        config = durable.config
        listed = config.incarnation_of(self.pid)
        if self.pid not in config.members or (listed is not None and listed != durable.incarnation):
            return "the member is not that incarnation in that configuration"
        if durable.state.instance != config.instance:
            return "a token state of another configuration"
        self._change.resume(durable)
        self._durable_key = self._change.durable_key()
        return None

    # -- outputs ------------------------------------------------------------

    def get_timer(self) -> float:
        role = self._s.role
        if role is Role.EXCLUDED:
            return math.inf
        if role is Role.JOINING:
            return self._joins.timer()
        out = self._out
        t = min(out.hb_at, out.timer(), self._data.deliver_at, self._tokens.timer())
        if self._optimistic is not None:
            t = min(t, self._optimistic.timer())
        if self._fetch.since is not None:
            t = min(t, self._fetch.timer())
        return min(t, self._change.timer())

    def messages_to_send(self) -> list[tuple[ProcessId, Message]]:
        out = self._out.take()
        for dest, message in out:
            # A copy sent through another member is no round trip to time.
            if isinstance(message, Token) and message.forward_to is None:
                self._token_sent(dest, message)
        return out

    def _token_sent(self, dest: ProcessId, token: Token) -> None:
        """Note when each copy of the token passed was sent (its
        acknowledgement names the copy: a round trip)."""
        state = token.state
        sent = self._sent_token
        if sent is not None and sent[:3] == (dest, state.instance, state.hop):
            sent[3][token.copy] = self._s.now
        else:
            self._sent_token = (dest, state.instance, state.hop, {token.copy: self._s.now})

    def output_ready(self) -> bool:
        """Whether :meth:`messages_to_send` or :meth:`deliveries` would hand
        out something now (held broadcasts leave by the timer)."""
        return bool(self._deliveries) or self._out.ready()

    def next_delivery(self) -> Delivery | None:
        return self._deliveries.popleft() if self._deliveries else None

    def deliveries(self) -> Iterator[Delivery]:
        while self._deliveries:
            yield self._deliveries.popleft()

    def holds_token(self) -> bool:
        return self._tokens.token is not None

    def statistics(self) -> TokenRingStatistics:
        """The counters so far (reading them changes nothing)."""
        s = self._s
        c = s.counts
        links = self._out.link_statistics()
        return TokenRingStatistics(
            role=s.role.value,
            instance=s.ring.instance,
            view=s.ring.view,
            core=s.ring.core,
            members=s.ring.members,
            broadcasts=c.broadcasts,
            delivered=s.book.delivered_count,
            next_deliver=s.book.next_deliver,
            stable=s.book.stable,
            tokens_accepted=c.tokens,
            light_changes=c.light,
            full_changes=c.full,
            proposals=c.proposals,
            fetches=c.fetches,
            messages_sent=c.sent,
            messages_received=c.received,
            messages_resent=links.resent,
            link_gaps=links.gaps,
            messages_let_go=links.let_go,
            token_resends=c.token_resends,
            payloads_carried=c.payloads_carried,
            tokens_relayed=c.tokens_relayed,
            tokens_forwarded=c.tokens_forwarded,
            exclusion=s.exclusion,
            quorum=self.quorum(),
            incarnation=s.incarnation,
            optimistic=None if self._optimistic is None else self._optimistic.statistics(),
        )

    def memory_sizes(self) -> dict[str, int]:
        sizes = self._s.book.sizes()
        sizes["own_unsequenced"] = self._data.own_count()
        sizes["outbox"] = self._out.waiting()
        sizes["kept_for_links"] = self._out.kept_for_links()
        if self._optimistic is not None:
            sizes |= self._optimistic.sizes()
        return sizes
