"""A token-ring process: a moving sequencer over reliable FIFO links, with a
two-level membership (seed 004), sans-IO.

Inputs take ``now`` and return nothing but an event id (:meth:`broadcast`);
outputs are pulled (:meth:`messages_to_send`, :meth:`next_delivery`,
:meth:`get_timer`). Links must be reliable and FIFO while they are up (TCP);
a broken link may lose what was in flight, which the protocol repairs
(fetches, retransmission of unsequenced messages, token regeneration).
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
from . import _bounds, _change, _datapath, _stats, _tokenpath
from . import _sequencer as seqr
from ._config import TokenRingConfig
from ._consensus import Acceptor, Proposer
from ._links import LinkSessions
from ._membership import FailureDetector, Input, Role, transition
from ._messages import (
    Accept,
    Accepted,
    Catchup,
    ConfigRequest,
    Data,
    DataBatch,
    Decided,
    Fetch,
    Heartbeat,
    Join,
    Message,
    Nack,
    Order,
    Prepare,
    Promise,
    RingConfig,
    Token,
    TokenAck,
    TokenState,
)
from ._stats import TokenRingStatistics as TokenRingStatistics
from ._viewchange import bootstrap

DELIVER_CHUNK = _datapath.DELIVER_CHUNK


class TokenRingProcess:
    """One member of a token-ring group.

    Bootstrap members all pass the same ``members``; a new identity passes
    ``contacts`` instead and joins by a view change. ``excluded`` becomes True
    when the process is out of the view for good: start a new process with a
    new identity to rejoin.
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
    ) -> None:
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise LocalProtocolError(f"process id must be an integer in [0, 2**64), got {pid!r}")
        self.pid = pid
        self.cfg = config
        self._rng = rng
        self._signer = signer
        self._verifier = verifier
        """Signed groups: ``verifier(event)`` is None for an authentic event,
        else the reason (``epto.SignatureVerifier.check``); events that fail
        are dropped where they enter (payloads, catch-ups, reports)."""
        self.rejected: dict[str, int] = {}
        """Events and messages refused, by reason (signatures; values out of
        bounds; member-only messages from non-members)."""
        self._fd = FailureDetector()
        self._book = seqr.OrderBook(log_retention=config.log_retention)
        self._links = LinkSessions(
            capacity=config.max_unstable_messages, repair_interval=config.fetch_timeout
        )
        self._outbox: list[tuple[ProcessId, Message]] = []
        self._deliveries: deque[Delivery] = deque()
        self._next_seq = 0
        self._own: dict[int, tuple[Event, float]] = {}
        self._unsent: list[Event] = []
        """Own broadcasts not handed out yet: they leave as one message."""
        self._own_progress = (0, now)
        """(the token's counter of our messages, when it last moved)."""
        self._joiners: dict[ProcessId, float] = {}
        self._contacts = tuple(contacts)
        self._initial_contacts = self._contacts
        self._view_hint = -1
        self._token: TokenState | None = None
        self._pending: tuple[ProcessId, TokenState] | None = None
        self._passed: tuple[ProcessId, TokenState, float] | None = None
        self._accepted_hop = -1
        """Hop of the last token of the current configuration accepted here."""
        self._window_bytes: dict[int, tuple[tuple[EventId, ...], int]] = {}
        """Bytes of the token's batches (first position -> ids, bytes), see
        ``_tokenpath.window_room``."""
        self._pass_at = math.inf
        self._deliver_at = math.inf
        """Due when a delivery was cut at DELIVER_CHUNK messages."""
        self._token_seen = now
        self._fetch_since: float | None = None
        self._fetch_sent = -math.inf
        self._hb_at = now
        self._join_at = now
        self._round = 0
        self._proposer: Proposer | None = None
        self._change_at = math.inf
        self._proposal_full = False
        self._fenced_since: float | None = None
        self._want_since: float | None = None
        self._replied: dict[ProcessId, float] = {}
        self._order_from: ProcessId | None = None
        self._too_old: dict[ProcessId, int] = {}
        """Members that said they no longer keep what we miss, and the
        position we missed then."""
        self._exclusion: str | None = None
        self._counts = dict.fromkeys(
            (
                "broadcasts",
                "tokens",
                "light",
                "full",
                "proposals",
                "fetches",
                "sent",
                "received",
            ),
            0,
        )
        if members is not None:
            if pid not in members:
                raise LocalProtocolError("a bootstrap member must be in members")
            self.config = bootstrap(tuple(members))
            self._links.track(self.config.members)
            self.role = Role.CORE
            self._fd.grace(members, now)
            self._snap = self.config.state
            self._acceptor = Acceptor(0)
            if self.config.core[0] == pid:
                self._pending = (pid, self._snap)
                self._try_accept(now)
        else:
            if not contacts:
                raise LocalProtocolError("a joining process needs contacts")
            self.config = bootstrap((pid,))
            self.config = attrs.evolve(self.config, instance=-1, members=(), core=())
            self.role = Role.JOINING
            self._snap = self.config.state
            self._acceptor = Acceptor(-1)

    # -- inputs -------------------------------------------------------------

    @property
    def excluded(self) -> bool:
        return self.role is Role.EXCLUDED

    @property
    def exclusion(self) -> str | None:
        """Why this process is out of the view for good (``"removed from the
        view"``, ``"diverged"`` or ``"too far behind"``), or None."""
        return self._exclusion

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """Broadcast ``payload`` to the group; it is delivered in the total order."""
        if self.role not in (Role.CORE, Role.EXTERNAL):
            raise LocalProtocolError(f"cannot broadcast while {self.role.value}")
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise LocalProtocolError(f"payload must be bytes, got {type(payload).__name__}")
        seq = self._next_seq
        self._next_seq += 1
        event = Event(source=self.pid, seq=seq, ts=0, payload=bytes(payload))
        if self._signer is not None:
            event = attrs.evolve(event, signature=self._signer(event))
        self._own[seq] = (event, now)
        self._book.add_event(event)
        self._unsent.append(event)
        if len(self._unsent) >= seqr.BATCH_IDS:
            self._flush_data()
        self._counts["broadcasts"] += 1
        self._hurry_token(now)
        return event.id

    def receive(self, sender: ProcessId, message: Message, now: float) -> None:
        """Feed a message that arrived from ``sender``."""
        if self.role is Role.EXCLUDED:
            return
        self._counts["received"] += 1
        handler = _HANDLERS.get(type(message))
        if handler is None:
            return
        why = _bounds.refusal(self, sender, message)
        if why is not None:
            self._reject(why)
            if (
                isinstance(message, Heartbeat)
                and why == "not-a-member"
                and message.instance < self.config.instance
                and self.role in (Role.CORE, Role.EXTERNAL)
            ):
                # A member removed while it was away learns it from us.
                self._rate_limited(sender, Decided(config=self.config), now)
            return
        self._fd.heard(sender, now, self.cfg.suspect_timeout)
        self._links.arrived(sender, message)
        try:
            handler(self, sender, message, now)
            self._deliver(now)
        except seqr.Divergence:
            self._diverged()

    def handle_timer(self, now: float) -> None:
        if self.role is Role.EXCLUDED:
            return
        try:
            self._handle_timer(now)
        except seqr.Divergence:
            self._diverged()

    def _diverged(self) -> None:
        """Our delivered prefix differs from the group's order (possible only
        with a ``k`` below the majority, or a member that delivered what it
        never should have): stop delivering and leave the view; the host
        carries on and the application sees :attr:`exclusion`."""
        if self.role in (Role.CORE, Role.EXTERNAL):
            self._leave(Input.DIVERGED)

    def _handle_timer(self, now: float) -> None:
        if self.role is Role.JOINING:
            if now >= self._join_at:
                for contact in self._contacts:
                    self._send(contact, Join())
                self._join_at = now + self.cfg.change_timeout
            return
        if now >= self._hb_at:
            self._send_heartbeats()
            self._hb_at = now + self.cfg.heartbeat_interval
            _datapath.resend_own(self, now)
        if self._token is not None and now >= self._pass_at:
            _tokenpath.pass_token(self, now)
        passed = self._passed
        if passed is not None and now >= passed[2] + self._resend_period():
            # No acknowledgement: the link may have broken with the token in
            # flight. Send the same token again, to the same member.
            self._send(passed[0], Token(state=passed[1]))
            self._passed = (passed[0], passed[1], now)
        _datapath.check_fetch(self, now)
        self._drive_change(now)
        self._deliver(now)

    # -- outputs ------------------------------------------------------------

    def get_timer(self) -> float:
        if self.role is Role.EXCLUDED:
            return math.inf
        if self.role is Role.JOINING:
            return self._join_at
        t = min(
            self._hb_at, self._deliver_at, self._pass_at if self._token is not None else math.inf
        )
        if self._passed is not None:
            t = min(t, self._passed[2] + self._resend_period())
        if self._fetch_since is not None:
            t = min(t, max(self._fetch_since, self._fetch_sent) + self.cfg.fetch_timeout)
        if self._proposer is not None:
            t = min(t, self._change_at)
        return t

    def messages_to_send(self) -> list[tuple[ProcessId, Message]]:
        if self._unsent:
            self._flush_data()
        out = self._outbox
        self._outbox = []
        return out

    def next_delivery(self) -> Delivery | None:
        return self._deliveries.popleft() if self._deliveries else None

    def deliveries(self) -> Iterator[Delivery]:
        while self._deliveries:
            yield self._deliveries.popleft()

    def holds_token(self) -> bool:
        return self._token is not None

    def statistics(self) -> TokenRingStatistics:
        return _stats.statistics_of(self)

    def memory_sizes(self) -> dict[str, int]:
        sizes = self._book.sizes()
        sizes["own_unsequenced"] = len(self._own)
        sizes["outbox"] = len(self._outbox) + len(self._unsent)
        sizes["kept_for_links"] = self._links.sizes()
        return sizes

    # -- sending ------------------------------------------------------------

    def _authentic(self, event: Event) -> bool:
        """Whether ``event`` may enter (always, without a verifier)."""
        if self._verifier is None:
            return True
        reason = self._verifier(event)
        if reason is None:
            return True
        self._reject(reason)
        return False

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def _send(self, dest: ProcessId, message: Message) -> None:
        if self._unsent:
            # Own broadcasts leave before anything sent after them (FIFO links).
            self._flush_data()
        self._outbox.append((dest, message))
        self._links.sent(dest, message)
        self._counts["sent"] += 1

    def _flush_data(self) -> None:
        """Send the buffered own broadcasts to every member, as one message."""
        events = self._unsent
        self._unsent = []
        message: Message = (
            Data(event=events[0]) if len(events) == 1 else DataBatch(events=tuple(events))
        )
        self._send_all(message)

    def _heartbeat(self, dest: ProcessId) -> Heartbeat:
        return self._links.heartbeat(dest, self.config.instance, self._book.next_deliver)

    def _send_heartbeats(self) -> None:
        for p in self.config.members:
            if p != self.pid:
                self._send(p, self._heartbeat(p))

    def _send_all(self, message: Message, skip: ProcessId | None = None) -> None:
        for p in self.config.members:
            if p != self.pid and p != skip:
                self._send(p, message)

    def _resend_period(self) -> float:
        return max(self.cfg.fetch_timeout, self.cfg.suspect_timeout / 2)

    def _k(self) -> int:
        return self.cfg.effective_k(len(self.config.members), len(self.config.core))

    # -- the data path and the token path (in _datapath.py, _tokenpath.py) --

    def _hurry_token(self, now: float) -> None:
        _datapath.hurry_token(self, now)

    def _learn(self, state: TokenState) -> None:
        _datapath.learn(self, state)

    def _deliver(self, now: float) -> None:
        _datapath.deliver(self, now)

    def _try_accept(self, now: float) -> None:
        _tokenpath.try_accept(self, now)

    def _take(self, state: TokenState, before: int) -> None:
        _tokenpath.take(self, state, before)

    # -- membership: heartbeats, joins, configuration sync ------------------

    def _on_heartbeat(self, sender: ProcessId, msg: Heartbeat, now: float) -> None:
        self._fd.reported_instance[sender] = msg.instance
        self._fd.reported_delivered[sender] = msg.delivered
        if msg.missing and self._unsent:
            self._flush_data()  # numbered before what is sent again
        answer, again = self._links.on_heartbeat(sender, msg, now)
        if again:
            # Numbered from the first one kept, so that the receiver tells
            # duplicates from what it lacked.
            # The heartbeat after them numbers what follows again.
            last = self._heartbeat(sender)
            first = attrs.evolve(last, sent=self._links.first_kept(sender))
            self._outbox.append((sender, first))
            self._outbox.extend((sender, m) for m in again)
            self._outbox.append((sender, last))
            self._counts["sent"] += 2 + len(again)
        elif answer:
            self._send(sender, self._heartbeat(sender))
        if msg.instance > self.config.instance:
            self._rate_limited(sender, ConfigRequest(), now)
        elif msg.instance < self.config.instance:
            self._rate_limited(sender, Decided(config=self.config), now)

    def _rate_limited(self, dest: ProcessId, message: Message, now: float) -> None:
        replied = self._replied
        if now - replied.get(dest, -math.inf) >= self.cfg.fetch_timeout:
            if len(replied) >= 4 * _bounds.MAX_JOINERS + len(self.config.members):
                # Bounded whatever identities ask: forget the quiet ones.
                horizon = now - self.cfg.fetch_timeout
                self._replied = replied = {p: t for p, t in replied.items() if t > horizon}
                if len(replied) >= 4 * _bounds.MAX_JOINERS + len(self.config.members):
                    self._reject("rate-limited")
                    return
            replied[dest] = now
            self._send(dest, message)

    def _on_config_request(self, sender: ProcessId, msg: ConfigRequest, now: float) -> None:
        if self.role in (Role.CORE, Role.EXTERNAL):
            self._send(sender, Decided(config=self.config))

    def _on_join(self, sender: ProcessId, msg: Join, now: float) -> None:
        if self.role in (Role.CORE, Role.EXTERNAL) and sender not in self.config.members:
            allowed = self.cfg.allowed_joiners
            if allowed is not None and sender not in allowed:
                self._reject("not-allowed-to-join")
                return
            joiners = self._joiners
            if sender not in joiners and len(joiners) >= _bounds.MAX_JOINERS:
                horizon = now - 4 * self.cfg.change_timeout
                for old in [j for j, t in joiners.items() if t < horizon]:
                    del joiners[old]
                if len(joiners) >= _bounds.MAX_JOINERS:
                    self._reject("too-many-joiners")
                    return
            joiners[sender] = now
            # Tell the newcomer who the members are: it then asks every one of
            # them, the coordinator included, instead of waiting for a contact
            # far down the view order to time out into proposing.
            self._rate_limited(sender, Decided(config=self.config), now)

    def _learn_view(self, config: RingConfig) -> None:
        """A joining process heard of the view ``config`` (without it): send
        the join to its members from now on, and at once to the new ones."""
        if config.instance <= self._view_hint:
            return
        self._view_hint = config.instance
        known = set(self._contacts)
        self._contacts = tuple(dict.fromkeys((*self._initial_contacts, *config.members)))
        for member in config.members:
            if member not in known and member != self.pid:
                self._send(member, Join())

    def _on_decided(self, sender: ProcessId, msg: Decided, now: float) -> None:
        self._install(msg.config, now)

    def _leave(self, why: Input) -> None:
        self.role = transition(self.role, why)
        self._exclusion = _EXCLUSIONS[why]
        self._deliver_at = math.inf
        self._fetch_since = None
        self._token = None
        self._pending = None
        self._passed = None
        self._proposer = None

    def _to(self, dest: ProcessId, message: Message, now: float) -> None:
        """Send, or handle at once when ``dest`` is this process."""
        if dest == self.pid:
            handler = _HANDLERS[type(message)]
            handler(self, dest, message, now)
        else:
            self._send(dest, message)

    # -- view changes (the logic lives in _change.py) ------------------------

    def _drive_change(self, now: float) -> None:
        _change.drive_change(self, now)

    def _install(self, config: RingConfig, now: float) -> None:
        _change.install(self, config, now)

    def _on_prepare(self, sender: ProcessId, msg: Prepare, now: float) -> None:
        _change.on_prepare(self, sender, msg, now)

    def _on_promise(self, sender: ProcessId, msg: Promise, now: float) -> None:
        _change.on_promise(self, sender, msg, now)

    def _on_accept(self, sender: ProcessId, msg: Accept, now: float) -> None:
        _change.on_accept(self, sender, msg, now)

    def _on_accepted(self, sender: ProcessId, msg: Accepted, now: float) -> None:
        _change.on_accepted(self, sender, msg, now)

    def _on_nack(self, sender: ProcessId, msg: Nack, now: float) -> None:
        _change.on_nack(self, sender, msg, now)


_EXCLUSIONS = {
    Input.INSTALL_NOT_MEMBER: "removed from the view",
    Input.DIVERGED: "diverged",
    Input.TOO_FAR_BEHIND: "too far behind",
}

_HANDLERS: dict[type, Callable[[TokenRingProcess, ProcessId, Any, float], None]] = {
    Data: _datapath.on_data,
    DataBatch: _datapath.on_data_batch,
    Token: _tokenpath.on_token,
    TokenAck: _tokenpath.on_token_ack,
    Order: _datapath.on_order,
    Heartbeat: TokenRingProcess._on_heartbeat,
    Fetch: _datapath.on_fetch,
    Catchup: _datapath.on_catchup,
    Join: TokenRingProcess._on_join,
    ConfigRequest: TokenRingProcess._on_config_request,
    Decided: TokenRingProcess._on_decided,
    Prepare: TokenRingProcess._on_prepare,
    Promise: TokenRingProcess._on_promise,
    Accept: TokenRingProcess._on_accept,
    Accepted: TokenRingProcess._on_accepted,
    Nack: TokenRingProcess._on_nack,
}
