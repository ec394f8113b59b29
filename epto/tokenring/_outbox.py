"""What leaves a token-ring process: the messages waiting for the driver, the
own broadcasts waiting to leave as one message, the link sessions
(:mod:`._links`) and the heartbeats that carry their counters, and the
answers rate-limited per destination.

Rules:

* Every message leaves through :meth:`Outbox.send` (or, for a repair, in one
  block from :meth:`Outbox.on_heartbeat`), which numbers it in its link
  session and counts it in ``counts.sent``.
* Own broadcasts are buffered and leave as one ``Data`` or ``DataBatch`` to
  every member, before anything sent after them (links are FIFO): every send
  flushes the buffer first; a buffer of ``BATCH_IDS`` leaves at once. After
  a quiet period (and always with ``broadcast_hold`` 0) the driver's next
  pull (:meth:`Outbox.take`) takes it, so that a burst leaves together;
  otherwise it leaves ``broadcast_hold`` after the previous flush, by the
  timer (:meth:`Outbox.timer`, :meth:`Outbox.flush_due`), or with a
  broadcast made in the second half of that hold, and not before
  ``not_before`` (the holder's own
  broadcasts: the token it passes carries them out, and they are sequenced
  then anyway). A broadcast is held at most the hold in force when it was
  made, or, at the token's holder, until it passes the token. The hold is
  ``broadcast_hold`` times the own broadcasts in flight (not delivered back
  here yet), at most ``max_hold`` (:meth:`Outbox.hold`): a sequential caller
  keeps the floor, a stream holds longer.
* A heartbeat goes to every other member every ``heartbeat_interval`` (or
  ``suspect_timeout / 8`` if longer: :func:`heartbeat_period`), except
  to a member this process sent another message since the last round
  (any message proves it alive: the failure detector hears every one)
  whose last heartbeat is younger than ``max(fetch_timeout,
  suspect_timeout / 2)`` (the link session's counters, the delivered
  watermark and the configuration still go out that often); a
  heartbeat that reports a loss on our link is answered at once, and one that
  says the peer lacks ours is answered with them, framed by two heartbeats
  that number them.
* A rate-limited answer goes to a destination at most once per
  ``fetch_timeout``, and this object remembers at most
  ``4 * MAX_JOINERS + len(members)`` destinations: past that it forgets the
  quiet ones, and refuses (``rate-limited``) if none is quiet.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

from .._event import Event, ProcessId
from ._bounds import MAX_JOINERS
from ._config import TokenRingConfig
from ._links import LinkSessions, LinkStatistics
from ._messages import ConfigRequest, Data, DataBatch, Decided, Heartbeat, Message
from ._sequencer import BATCH_IDS
from ._shared import Shared


def heartbeat_period(cfg: TokenRingConfig) -> float:
    """How often heartbeats go: ``heartbeat_interval``, or an eighth of
    ``suspect_timeout`` if that is longer (timeouts fitted to slow links):
    a heartbeat far more often than suspicion needs only loads the links,
    and on a link that breaks with some probability per send, each one is
    one more chance to break it and lose what is in flight."""
    return max(cfg.heartbeat_interval, cfg.suspect_timeout / 8)


class Outbox:
    """The outgoing side of one process."""

    __slots__ = (
        "_cap",
        "_flush_at",
        "_hb_sent",
        "_hold",
        "_last_flush",
        "_latest",
        "_links",
        "_max_hold",
        "_out",
        "_replied",
        "_s",
        "_spoke",
        "_unsent",
        "arrived",
        "hb_at",
    )

    def __init__(self, shared: Shared, now: float) -> None:
        self._s = shared
        self._links = LinkSessions(
            capacity=shared.settings.max_unstable_messages,
            repair_interval=shared.settings.fetch_timeout,
        )
        self._out: list[tuple[ProcessId, Message]] = []
        self._unsent: list[Event] = []
        """Own broadcasts not handed out yet: they leave as one message."""
        cfg = shared.settings
        # Optimistic delay plans measure when broadcasts arrive: no hold.
        self._hold = 0.0 if cfg.optimistic is not None else cfg.broadcast_hold
        self._max_hold = max(self._hold, cfg.max_hold) if self._hold else 0.0
        """What the hold grows to with broadcasts in flight (see :meth:`hold`)."""
        # The holder's own broadcasts wait for the token, held up to max_hold.
        self._cap = max(self._hold, cfg.token_hold, cfg.max_hold)
        self._flush_at = math.inf
        """When the held broadcasts leave (inf: none held, or no hold)."""
        self._last_flush = -math.inf
        """When own broadcasts last left (as far as this object knows ``now``)."""
        self._latest = -math.inf
        """The ``now`` of the latest broadcast (a flush by a send has no clock)."""
        self._replied: dict[ProcessId, float] = {}
        self.hb_at = now
        """When the next heartbeats are due (written only here)."""
        self._spoke: set[ProcessId] = set()
        """Destinations of messages sent since the last heartbeat round."""
        self._hb_sent: dict[ProcessId, float] = {}
        """When the last heartbeat went to each member."""
        self.arrived: Callable[[ProcessId, Message], None] = self._links.arrived
        """Count a message that arrived (the link sessions' own method, bound
        here: it runs once per message received)."""

    # -- sending ------------------------------------------------------------

    def send(self, dest: ProcessId, message: Message) -> None:
        if self._unsent:
            # Own broadcasts leave before anything sent after them (FIFO links).
            self.flush()
        self._out.append((dest, message))
        self._links.sent(dest, message, self._s.now)
        self._spoke.add(dest)
        self._s.counts.sent += 1

    def send_all(self, message: Message, skip: ProcessId | None = None) -> None:
        me = self._s.pid
        for p in self._s.ring.members:
            if p != me and p != skip:
                self.send(p, message)

    def hold(self, in_flight: int) -> float:
        """How long own broadcasts are held with ``in_flight`` of them not
        delivered back here yet (this one included): ``broadcast_hold`` times
        that number, at most ``max_hold``. A sequential caller (one in flight)
        keeps the floor; a stream, whose broadcasts outrun their deliveries,
        holds longer and sends fewer, larger messages, and the hold shrinks
        back as the deliveries catch up."""
        hold = self._hold
        if in_flight > 1:
            hold = min(self._max_hold, hold * in_flight)
        return hold

    def queue_own(
        self, event: Event, now: float, not_before: float = -math.inf, in_flight: int = 1
    ) -> None:
        """Buffer an own broadcast (see the module docstring); a full buffer
        leaves at once. ``in_flight``: own broadcasts not delivered back here
        yet, this one included (:meth:`hold`)."""
        unsent = self._unsent
        unsent.append(event)
        self._latest = now
        if len(unsent) >= BATCH_IDS:
            # A full message: nothing to gain by holding it, and it does not
            # count as a send (what follows it in a burst leaves with it).
            last = self._last_flush
            self.flush()
            self._last_flush = last
            return
        if not self._hold:
            self._flush_at = -math.inf  # leaves at the driver's next pull
            return
        hold = self.hold(in_flight)
        due = self._last_flush + hold
        if now >= due - hold / 2:
            # In the second half of the hold: this broadcast takes the held
            # ones along at once (no timer wake-up of its own; paced
            # broadcasts then leave every half hold or more, together).
            due = now
        # Never later than token_hold from now (a holder passes by then).
        self._flush_at = min(max(due, not_before), now + self._cap)

    def timer(self) -> float:
        """When the held broadcasts leave (inf: none held, or they leave at
        the driver's next pull, :meth:`ready`)."""
        return self._flush_at if self._flush_at > self._latest else math.inf

    def flush_due(self, now: float) -> None:
        """Send the held broadcasts if their time has come."""
        if self._unsent and now >= self._flush_at:
            self.flush()
            self._last_flush = now

    def flush(self) -> None:
        """Send the buffered own broadcasts to every member, as one message."""
        events = self._unsent
        self._unsent = []
        self._flush_at = math.inf
        self._last_flush = self._latest
        message: Message = (
            Data(event=events[0]) if len(events) == 1 else DataBatch(events=tuple(events))
        )
        self.send_all(message)

    def take(self) -> list[tuple[ProcessId, Message]]:
        """Hand the driver everything waiting (the buffered broadcasts too,
        unless they are held: :attr:`TokenRingConfig.broadcast_hold`)."""
        if self._unsent and self._flush_at <= self._latest:
            self.flush()
        out = self._out
        self._out = []
        return out

    def rate_limited(self, dest: ProcessId, message: Message, now: float) -> None:
        replied = self._replied
        fetch_timeout = self._s.settings.fetch_timeout
        if now - replied.get(dest, -math.inf) >= fetch_timeout:
            if len(replied) >= 4 * MAX_JOINERS + len(self._s.ring.members):
                # Bounded whatever identities ask: forget the quiet ones.
                horizon = now - fetch_timeout
                self._replied = replied = {p: t for p, t in replied.items() if t > horizon}
                if len(replied) >= 4 * MAX_JOINERS + len(self._s.ring.members):
                    self._s.reject("rate-limited")
                    return
            replied[dest] = now
            self.send(dest, message)

    # -- link sessions and heartbeats ---------------------------------------

    def track(self, peers: tuple[ProcessId, ...]) -> None:
        """Keep link sessions with ``peers`` only."""
        self._links.track(peers)

    def heartbeats_due(self, now: float) -> bool:
        """Send the heartbeats if they are due; True if they were."""
        if now < self.hb_at:
            return False
        s = self._s
        cfg = s.settings
        if self._unsent:
            # Numbered before the heartbeats that count them.
            self.flush()
        spoke = self._spoke
        sent = self._hb_sent
        # Heard from anyway: a heartbeat only to refresh the counters it carries.
        refresh = now - max(cfg.fetch_timeout, cfg.suspect_timeout / 2)
        for p in s.ring.members:
            if p != s.pid and (p not in spoke or sent.get(p, -math.inf) <= refresh):
                self.send(p, self._heartbeat(p))
                sent[p] = now
        # After the heartbeats: they do not count for the next round.
        self._spoke = set()
        if len(sent) > len(s.ring.members):
            members = s.ring.members
            self._hb_sent = {p: t for p, t in sent.items() if p in members}
        self.hb_at = now + heartbeat_period(cfg)
        return True

    def reset_links(self, pid: ProcessId) -> None:
        """Start the link sessions with ``pid`` afresh (another incarnation)."""
        self._links.reset(pid)

    def _heartbeat(self, dest: ProcessId) -> Heartbeat:
        s = self._s
        return self._links.heartbeat(dest, s.ring.instance, s.book.next_deliver, s.incarnation)

    def on_heartbeat(self, sender: ProcessId, msg: Heartbeat, now: float) -> None:
        s = self._s
        s.fd.reported(sender, msg.instance, msg.delivered)
        if msg.missing and self._unsent:
            self.flush()  # numbered before what is sent again
        answer, again = self._links.on_heartbeat(sender, msg, now)
        if answer or again:
            s.loss_seen = now
        if again:
            # Numbered from the first one kept, so that the receiver tells
            # duplicates from what it lacked.
            # The heartbeat after them numbers what follows again.
            last = self._heartbeat(sender)
            first = attrs.evolve(last, sent=self._links.first_kept(sender))
            self._out.append((sender, first))
            self._out.extend((sender, m) for m in again)
            self._out.append((sender, last))
            s.counts.sent += 2 + len(again)
        elif answer:
            if self._unsent:
                self.flush()  # numbered before the heartbeat that counts them
            self.send(sender, self._heartbeat(sender))
        if msg.instance > s.ring.instance:
            self.rate_limited(sender, ConfigRequest(), now)
        elif msg.instance < s.ring.instance:
            self.rate_limited(sender, Decided(config=s.ring), now)

    # -- reporting ----------------------------------------------------------

    def waiting(self) -> int:
        """Messages not handed to the driver yet (buffered broadcasts included)."""
        return len(self._out) + len(self._unsent)

    def ready(self) -> bool:
        """Whether :meth:`take` would hand out something now."""
        return bool(self._out) or (bool(self._unsent) and self._flush_at <= self._latest)

    def kept_for_links(self) -> int:
        return self._links.sizes()

    def link_statistics(self) -> LinkStatistics:
        return self._links.statistics()
