"""An EpTO process: the dissemination component (EpTO paper, Algorithm 1),
its clock (Algorithms 3 and 4), and the ordering component it feeds.

The process is sans-IO in the aioquic manner: inputs (:meth:`broadcast`,
:meth:`receive`, :meth:`handle_timer`) take ``now`` and return nothing but an
event id; outputs are pulled (:meth:`messages_to_send`, :meth:`next_delivery`,
:meth:`get_timer`). Time, randomness and the peer sampler are injected, so the
same inputs and seed give the same outputs.

nextBall is kept lazily (see :mod:`epto.epidemic._ball`): a layered ball is received
in constant time (its layers are kept, its largest timestamp moves the
clock), and the copies of a round are merged, larger ttl kept, when the round
runs. Other mappings are merged entry by entry on receipt, as Algorithm 1
reads. Both give the same next ball.

Every value a peer claims is bounded here, where it enters (docs/epto.md,
*Bounds on what a peer claims*): a timestamp above :meth:`Process.ts_ceiling`
(twice ``max_clock_step`` above the clock at the start of the round with the
logical clock, twice ``max_clock_skew`` ahead of ``now`` with the global
one), a ttl outside ``[0, 65535]``, an id or timestamp outside uint64, a key
that is not the event's id, or anything that is not an :class:`Event` is
refused, counted in :attr:`ProcessStatistics.rejected` by fault, and the rest
of the ball is kept. Received timestamps move the clock at most to
:meth:`Process.clock_cap` (one step, or one skew): the slack between the two
bounds is what keeps a process whose clock a peer pushed to the cap from
broadcasting events the others refuse. A :class:`LayeredBall` (what processes hand each other in
one Python process) is taken in constant time when its largest timestamp and
its ttls are in bounds, and entry by entry otherwise.

A broadcast is stamped by the round that sends it (not when it is made):
its timestamp is that of the moment it starts to spread, so a process that
stalls in between delays the event instead of sending a timestamp the
others may have delivered past (docs/epto.md, *Timestamps: when a broadcast
is stamped*).

With the global clock a process never stamps its own event above
:meth:`Process.stamp_limit` (one tick below the cap): every peer whose clock
is at most ``max_clock_skew`` behind accepts it. A broadcast that would be
stamped higher (a burst beyond what the resolution allows, or a clock that
peers ahead of it pushed) waits, in order, and is stamped at a later round;
a wait longer than ``2 * max_clock_skew`` is warned about (docs/parameters.md,
*The global clock's guard*).

Size: Algorithm 1 with its bounds on what peers claim (about 450 lines);
the ordering rules are apart (``_ordering.py``), and what is left is one
state machine whose entry points share the ball and clock state.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from itertools import repeat

import attrs

from .._errors import LocalProtocolError
from .._event import Ball, BallEntry, Delivery, Event, EventId, ProcessId
from .._incarnation import check_incarnation, first_seq
from ._ball import CheckedBall, LayeredBall, merge_balls
from ._config import Config
from ._ordering import Ordering
from ._sampler import PeerSampler

_EMPTY_BALL = LayeredBall()

U64_MAX = (1 << 64) - 1
TTL_MAX = 0xFFFF
"""The largest ttl a copy may carry (what the wire format holds)."""
_TS_LIMIT = U64_MAX - (1 << 32)
"""No received timestamp is accepted above this: the clock keeps 2**32
timestamps of headroom for the process's own broadcasts whatever it accepts."""

FAULT_TS_AHEAD = "ts-ahead"
FAULT_BAD_TTL = "bad-ttl"
FAULT_BAD_EVENT = "bad-event"


@attrs.frozen(kw_only=True, slots=True)
class ProcessStatistics:
    """Counters and current state sizes of one process."""

    rounds: int
    broadcasts: int
    balls_received: int
    entries_received: int
    """Event copies received in balls (the sum of the sizes of the balls)."""
    balls_sent: int
    delivered: int
    delivered_out_of_order: int
    rejected_stale: int
    next_ball_size: int
    pending: int
    """Events received and not yet delivered."""
    last_delivered_ts: int
    clock: int
    waiting: int = 0
    """Global clock: broadcasts waiting for the clock to allow their timestamp
    (:meth:`Process.stamp_limit`); they are stamped, in order, at later rounds."""
    waited: int = 0
    """Global clock: broadcasts that had to wait so far."""
    rejected: Mapping[str, int] = attrs.field(factory=dict)
    """Received copies refused because a value was out of bounds, by fault:
    ``"ts-ahead"`` (timestamp above :meth:`Process.ts_ceiling`), ``"bad-ttl"``
    (ttl not an int in ``[0, 65535]``), ``"bad-event"`` (not an
    :class:`Event`, id or timestamp not a uint64, key not the event's id,
    payload or signature not bytes, signature neither empty nor 64 bytes)."""


class Process:
    """One member of an EpTO group.

    ``now`` is a float in the caller's time unit (the same unit as
    :attr:`Config.round_interval`); the first round is due one interval after
    the ``now`` given here.
    """

    def __init__(
        self,
        pid: ProcessId,
        config: Config,
        *,
        peers: PeerSampler,
        rng: random.Random,
        now: float,
        signer: Callable[[Event], bytes] | None = None,
        incarnation: int = 0,
    ) -> None:
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise LocalProtocolError(f"process id must be an integer in [0, 2**64), got {pid!r}")
        self.pid = pid
        self.incarnation = check_incarnation(incarnation)
        """This start of the member (:mod:`epto._incarnation`): the high bits of
        every sequence number it gives, so that no later start reuses an id."""
        self.config = config
        # Signs this process's own events once, at broadcast (for example
        # ``epto.EventSigner(pid, key).signature``); relays forward signatures.
        self._signer = signer
        self.peers = peers
        self._rng = rng
        self._fanout = config.fanout
        self._relay_ttl = config.ttl
        self._global_clock = config.clock == "global"
        self._resolution = config.clock_resolution
        self._interval = config.round_interval
        self._deadline = now + config.round_interval
        # Highest timestamp issued or seen. Both clocks issue above it, which
        # makes every source's timestamps strictly increasing and keeps a
        # lagging real clock from producing events that would be rejected.
        self._clock = 0
        # Logical clock: the clock at the start of the round; received
        # timestamps may be at most max_clock_step above it.
        self._clock_base = 0
        # The highest accepted timestamp the clock has not reached yet (it
        # moves at most to the cap while receiving; the rest at the next round).
        self._behind = 0
        self._clock_step = config.max_clock_step
        self._skew_ticks = math.floor(config.max_clock_skew * config.clock_resolution)
        # Global clock: own broadcasts (seq, payload, when) whose timestamp
        # would exceed stamp_limit; stamped in order at later rounds.
        self._waiting: deque[tuple[int, bytes, float]] = deque()
        self._waited = 0
        # Own broadcasts since the last round (seq, payload, when): stamped
        # by the next round, which sends them.
        self._unstamped: list[tuple[int, bytes, float]] = []
        self._wait_warned = False
        self._rejected: dict[str, int] = {}
        self._next_seq = first_seq(incarnation)
        # After resume_after with the logical clock: own broadcasts (seq,
        # payload) waiting for the clock to catch up with the group's.
        self._held: list[tuple[int, bytes]] | None = None
        self._heard = False
        self._hold_until_round = 0
        # nextBall of Algorithm 1, kept lazily: the balls received this round
        # (only those with a copy below TTL) and this round's own broadcasts;
        # merged, keeping the larger ttl per id, when the round runs.
        self._pending: list[LayeredBall] = []
        self._own: dict[EventId, Event] = {}
        # Copies from balls that are not layered (e.g. decoded from bytes),
        # merged entry by entry as Algorithm 1 reads: id -> (event, ttl).
        self._loose: dict[EventId, BallEntry] = {}
        self._outbox: list[tuple[ProcessId, Ball]] = []
        self._deliveries: deque[Delivery] = deque()
        self._ordering = Ordering(
            ttl=config.ttl,
            strict=config.ordering == "strict",
            tagged=config.tagged_delivery,
            emit=self._deliveries.append,
        )
        self._rounds = 0
        self._broadcasts = 0
        self._balls_received = 0
        self._entries_received = 0
        self._balls_sent = 0

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """EpTO-broadcast ``payload``; the next round stamps it and sends it in its ball."""
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise LocalProtocolError(f"payload must be bytes, got {type(payload).__name__}")
        if self._held is not None:
            # Resumed with the logical clock and not yet heard from the
            # group: stamped when the clock has caught up (_release_held).
            seq = self._next_seq
            self._next_seq = seq + 1
            self._held.append((seq, bytes(payload)))
            self._broadcasts += 1
            return (self.pid, seq)
        # Stamped by the round that first sends it (_run_round), not
        # now: a process that stalls between the two (descheduled, a long
        # turn) would send a timestamp that aged while it stood still, and the
        # others may have delivered past it by the time it arrives.
        if self._next_ts(now) + len(self._unstamped) > U64_MAX:
            # Only a clock (or ``now``) the caller drove there gets here: what
            # peers claim is bounded by ts_ceiling. Nothing has changed.
            raise LocalProtocolError("the timestamp of this broadcast would not fit in 64 bits")
        seq = self._next_seq
        self._next_seq = seq + 1
        self._unstamped.append((seq, bytes(payload), now))
        self._broadcasts += 1
        return (self.pid, seq)

    def _next_ts(self, now: float) -> int:
        """The timestamp the next own event gets: above every timestamp seen
        and, with the global clock, at least ``now`` in ticks. With the global
        clock "seen" includes accepted timestamps the cap has not let the
        clock reach yet: an event stamped at or below one of them could come
        after it was delivered elsewhere and be refused as stale."""
        if self._global_clock:
            return max(max(self._clock, self._behind) + 1, math.floor(now * self._resolution))
        return self._clock + 1

    def stamp_limit(self, now: float) -> int:
        """Global clock: the largest timestamp this process gives its own events
        at ``now``, ``floor(now * clock_resolution) + floor(max_clock_skew *
        clock_resolution) - 1``. A peer whose ``now`` is at most
        ``max_clock_skew`` behind accepts it (its :meth:`ts_ceiling` is one
        skew higher); a broadcast that would be stamped above it waits. With
        the logical clock there is no such limit (``2**64 - 1``)."""
        if not self._global_clock:
            return U64_MAX
        return math.floor(now * self._resolution) + self._skew_ticks - 1

    def _release_waiting(self, now: float) -> None:
        """Stamp waiting broadcasts, in order, while the clock allows."""
        waiting = self._waiting
        limit = self.stamp_limit(now)
        while waiting and self._next_ts(now) <= limit:
            seq, payload, _ = waiting.popleft()
            self._stamp(seq, payload, now)
        if not waiting:
            self._wait_warned = False
            return
        waited = now - waiting[0][2]
        if not self._wait_warned and waited > 2 * self.config.max_clock_skew:
            self._wait_warned = True
            warnings.warn(
                f"EpTO process {self.pid}: {len(waiting)} broadcasts wait for the global "
                f"clock, the oldest for {waited:g} (twice max_clock_skew is "
                f"{2 * self.config.max_clock_skew:g}); the next timestamp is "
                f"{self._next_ts(now) - limit} ticks past what every peer accepts: "
                "broadcasts come faster than "
                "clock_resolution timestamps per unit of now, or a member's clock runs "
                "more than max_clock_skew ahead (statistics().waiting)",
                RuntimeWarning,
                stacklevel=3,
            )

    def _stamp(self, seq: int, payload: bytes | bytearray | memoryview, now: float) -> None:
        """Give event ``seq`` its timestamp and put it in the next ball."""
        ts = self._next_ts(now)
        if ts > U64_MAX:
            # Only a clock (or ``now``) the caller drove there gets here: what
            # peers claim is bounded by ts_ceiling. Nothing has changed.
            raise LocalProtocolError(f"timestamp {ts} does not fit in 64 bits")
        self._clock = ts
        event = Event(source=self.pid, seq=seq, ts=ts, payload=bytes(payload))
        if self._signer is not None:
            event = attrs.evolve(event, signature=self._signer(event))
        self._own[(self.pid, seq)] = event

    def _release_held(self, now: float) -> None:
        held, self._held = self._held, None
        for seq, payload in held or ():
            self._stamp(seq, payload, now)

    def advance_clock(self, ts: int) -> None:
        """Move the clock to at least ``ts``: the application learned that the
        group's order reached ``ts`` (a restored snapshot's cut, epto.rsm).

        A process that joins an idle group sees no timestamp to move its
        logical clock, so its first events would carry timestamps the others
        delivered past long ago, and strict ordering drops them. After this,
        its events come after ``ts`` and it accepts timestamps up to ``ts``
        plus the usual bound. Only the local caller moves the clock this way;
        what peers claim stays bounded (:meth:`ts_ceiling`)."""
        if not isinstance(ts, int) or not 0 <= ts <= U64_MAX // 2:
            raise LocalProtocolError(f"timestamp {ts!r} out of range")
        self._clock = max(self._clock, ts)
        self._clock_base = max(self._clock_base, ts)

    def resume_after(self, ts: int) -> None:
        """Deliver only events ordered after ``ts`` and broadcast after it: an
        earlier incarnation of this member delivered the order up to ``ts``
        (its delivery log's last timestamp, a restored state's cut).

        Copies of what it delivered still circulate for TTL rounds after a
        restart; without this the new incarnation would deliver them again,
        and events older than its last delivery out of order."""
        self.advance_clock(ts)
        self._ordering.resume_after(ts)
        if not self._global_clock and self._held is None:
            # The group's logical clock moved on while this member was down:
            # events stamped from its own last delivery would sit below what
            # the others delivered meanwhile, and strict ordering refuses
            # them. Its broadcasts wait until a ball from a peer has moved
            # the clock, or TTL + 1 rounds (an idle group sends no ball).
            self._held = []
            self._hold_until_round = self._rounds + self._relay_ttl + 1

    def receive(self, sender: ProcessId, ball: Ball, now: float) -> None:
        """Upon receive BALL: relay copies whose ttl is below TTL, keeping the
        larger ttl, and move the clock past every timestamp seen.

        ``ball`` is any mapping ``{event id: (event, ttl)}``; a
        :class:`LayeredBall` (what :meth:`messages_to_send` hands out) is taken
        in constant time, any other mapping is first converted, one entry at a
        time. The process keeps a reference to the ball until its next round;
        the ball must not be mutated (it never is by the process).
        """
        self._balls_received += 1
        if self._held is not None and sender != self.pid and ball:
            self._heard = True
        ceiling = self.ts_ceiling(now)
        if type(ball) is not LayeredBall or ball.max_ts > ceiling:
            self._receive_entries(ball, ceiling, self.clock_cap(now))
            return
        dense = ball.dense_index
        # A dense index holds every ttl of the ball in [0, len(dense)).
        if (dense is None or len(dense) > TTL_MAX + 1) and not _ttls_in_bounds(ball):
            self._receive_entries(ball, ceiling, self.clock_cap(now))
            return
        max_ts = ball.max_ts
        if max_ts > self._clock:
            target = max(self._clock, self.clock_cap(now))
            if max_ts > target:
                self._behind = max(self._behind, max_ts)
                max_ts = target
            self._clock = max_ts
        parts = ball.parts
        # Parts are in increasing ttl: the first says whether any is relayed.
        if parts and parts[0][0] < self._relay_ttl:
            self._pending.append(ball)
        self._entries_received += len(ball)

    def ts_ceiling(self, now: float) -> int:
        """The largest timestamp a received event may carry at ``now``.

        Logical clock: the clock at the start of the current round plus
        ``2 * Config.max_clock_step``. Global clock: ``(now + 2 *
        max_clock_skew)`` in clock ticks. Never above ``2**64 - 2**32 - 1``.
        """
        if self._global_clock:
            ceiling = math.floor(now * self._resolution) + 2 * self._skew_ticks
        else:
            ceiling = self._clock_base + 2 * self._clock_step
        # Called for every ball received: a comparison costs less than min().
        return ceiling if ceiling < _TS_LIMIT else _TS_LIMIT

    def clock_cap(self, now: float) -> int:
        """The highest value received timestamps move the clock to at ``now``:
        half-way to :meth:`ts_ceiling` (one step, or one skew)."""
        if self._global_clock:
            cap = math.floor(now * self._resolution) + self._skew_ticks
        else:
            cap = self._clock_base + self._clock_step
        return min(cap, _TS_LIMIT)

    def _receive_entries(self, ball: Ball, ceiling: int, cap: int) -> None:
        loose = self._loose
        get = loose.get
        relay_ttl = self._relay_ttl
        # The clock follows what is received up to the cap; a copy above the
        # ceiling is refused and moves the clock to the cap (a process far
        # behind catches up one step a round; a peer gains nothing more by
        # claiming more).
        clock = self._clock
        target = max(clock, cap)
        # A decoded ball's values are in range (epto.CheckedBall): only the
        # timestamp ceiling is left to check; anything else is checked in full.
        checked = type(ball) is CheckedBall
        for eid, entry in ball.items():
            if not checked:
                fault = _entry_fault(eid, entry, ceiling)
                if fault is not None:
                    self._refuse(fault)
                    if fault == FAULT_TS_AHEAD:
                        clock = target
                    continue
            event, ttl = entry
            ts = event.ts
            if ts > ceiling:
                self._refuse(FAULT_TS_AHEAD)
                clock = target
                continue
            if ttl < relay_ttl:
                current = get(eid)
                if current is None or current[1] < ttl:
                    loose[eid] = entry
            if ts > clock:
                if ts > target:
                    if ts > self._behind:
                        self._behind = ts
                    ts = target
                clock = ts
        self._clock = clock
        self._entries_received += len(ball)

    def _refuse(self, fault: str) -> None:
        self._rejected[fault] = self._rejected.get(fault, 0) + 1

    def handle_timer(self, now: float) -> None:
        """Run the round if it is due: age the ball, send it to K peers, hand it
        to the ordering component."""
        if now < self._deadline:
            return
        self._run_round(now)
        self._deadline += self._interval
        if self._deadline <= now:
            # Rounds were missed (a paused driver). Running them back to back
            # would age events without gossiping them; skip to the next slot.
            self._deadline = now + self._interval

    # -- outputs ------------------------------------------------------------

    def get_timer(self) -> float:
        """When :meth:`handle_timer` next has work to do."""
        return self._deadline

    def messages_to_send(self) -> list[tuple[ProcessId, Ball]]:
        """Balls to send, as ``(destination, ball)``; drains the outbox.

        One ball object, a :class:`LayeredBall` (a ``Mapping[EventId, (Event,
        ttl)]``), is shared by the destinations of a round and is never mutated
        afterwards; hand it to receivers as it is (a simulator) or encode it
        through its mapping interface (a codec).
        """
        out = self._outbox
        self._outbox = []
        return out

    def next_delivery(self) -> Delivery | None:
        """The next delivery for the application, or None."""
        deliveries = self._deliveries
        return deliveries.popleft() if deliveries else None

    def deliveries(self) -> Iterator[Delivery]:
        """Drain every pending delivery."""
        deliveries = self._deliveries
        while deliveries:
            yield deliveries.popleft()

    # -- introspection ------------------------------------------------------

    @property
    def clock(self) -> int:
        return self._clock

    @property
    def last_delivered_ts(self) -> int:
        return self._ordering.last_delivered_ts

    def pending_events(self) -> list[tuple[Event, int]]:
        """``(event, ttl)`` for every event received and not yet delivered."""
        return self._ordering.pending_events()

    def memory_sizes(self) -> dict[str, int]:
        """Sizes of every container the process keeps between rounds."""
        sizes = {
            "next_ball": self._next_ball_size(),
            "outbox": len(self._outbox),
            "deliveries": len(self._deliveries),
            "waiting": len(self._waiting),
            "unstamped": len(self._unstamped),
        }
        sizes.update(self._ordering.memory_sizes())
        return sizes

    @property
    def rounds(self) -> int:
        """Rounds run so far (cheap: :meth:`statistics` also sizes the next ball)."""
        return self._rounds

    def statistics(self) -> ProcessStatistics:
        return ProcessStatistics(
            rounds=self._rounds,
            broadcasts=self._broadcasts,
            balls_received=self._balls_received,
            entries_received=self._entries_received,
            balls_sent=self._balls_sent,
            delivered=self._ordering.delivered_in_order,
            delivered_out_of_order=self._ordering.delivered_out_of_order,
            rejected_stale=self._ordering.rejected_stale,
            next_ball_size=self._next_ball_size(),
            pending=self._ordering.pending,
            last_delivered_ts=self._ordering.last_delivered_ts,
            clock=self._clock,
            waiting=len(self._waiting),
            waited=self._waited,
            rejected=dict(self._rejected),
        )

    # -- the round ----------------------------------------------------------

    def _next_ball_size(self) -> int:
        """How many events nextBall holds, computed without merging in place:
        :meth:`statistics` and :meth:`memory_sizes` change nothing, so that
        calling them never alters what the process later sends."""
        return len(merge_balls(self._sources(), self._relay_ttl)) + len(self._unstamped)

    def _sources(self) -> list[LayeredBall]:
        """Every pending copy as balls: received balls, loose copies, own events."""
        sources = list(self._pending)
        if self._loose:
            sources.append(LayeredBall(self._loose))
        if self._own:
            # Shared, not copied: the round that merges it starts a new dict
            # (broadcasts add to the dict of the coming round only).
            sources.append(LayeredBall.of_layer(0, self._own))
        return sources

    def _run_round(self, now: float) -> None:
        self._rounds += 1
        self._clock_base = self._clock
        if self._behind > self._clock:
            # Accepted timestamps the cap held back: catch up, one cap a round.
            self._clock = max(self._clock, min(self._behind, self.clock_cap(now)))
        if self._held is not None and (self._heard or self._rounds >= self._hold_until_round):
            self._release_held(now)
        # The broadcasts made since the last round are stamped now, as this
        # round sends them, after those the clock held back: in order, while
        # the global clock's stamp_limit allows (the rest wait).
        unstamped = self._unstamped
        if unstamped:
            self._unstamped = []
            self._waiting.extend(unstamped)
        if self._waiting:
            self._release_waiting(now)
            # This round's broadcasts still held back are the newest waiting.
            self._waited += min(len(unstamped), len(self._waiting))
        # nextBall: every pending copy merged, larger ttl kept.
        # Every copy aged by one: the merged layers move up one ttl, unchanged.
        ball = merge_balls(self._sources(), self._relay_ttl, 1)
        self._pending = []
        self._loose = {}
        self._own = {}
        if ball:
            targets = self.peers.sample(self._fanout, self._rng)
            if targets:
                self._outbox.extend(zip(targets, repeat(ball)))
                self._balls_sent += len(targets)
            else:
                # Nobody to gossip to (a partial view emptied by churn or a
                # join still in progress). Algorithm 1 assumes K peers are
                # always there and would lose these copies; keep relaying them
                # next round instead. Merging keeps the larger ttl and drops
                # copies at TTL, so this cannot relay anything forever.
                self._pending = [ball]
        else:
            ball = _EMPTY_BALL
        self._ordering.order(ball)

    # -- held events (a cheap query for decoders) ---------------------------

    def held_event(self, eid: EventId) -> Event | None:
        """The event this process holds under ``eid``: received or broadcast
        and not yet delivered (in the ordering component or the next ball),
        or None. A decoder may hand a later copy of ``eid`` back as this very
        object instead of building a new one (``FrameCodec.decode(held=)``).
        None only means "not known here": decoding in full is never wrong."""
        entry = self._loose.get(eid)
        if entry is not None:
            return entry[0]
        event = self._own.get(eid)
        if event is not None:
            return event
        return self._ordering.held_event(eid)


def _ttls_in_bounds(ball: LayeredBall) -> bool:
    """Whether a layered ball's ttls are in ``[0, TTL_MAX]``. Its events are
    trusted to be well-formed (a layered ball is built in this Python
    process; decoded balls are plain dicts, checked per entry)."""
    parts = ball.parts
    if not parts:
        return True
    # Parts are kept in increasing ttl: the first and the last bound the rest.
    low = parts[0][0]
    high = parts[-1][0]
    return type(low) is int and type(high) is int and low >= 0 and high <= TTL_MAX


def _entry_fault(eid: object, entry: object, ceiling: int) -> str | None:
    """Why a received ``(event id, (event, ttl))`` is refused, or None."""
    if type(entry) is not tuple or len(entry) != 2:
        return FAULT_BAD_EVENT
    event, ttl = entry
    if type(event) is not Event:
        return FAULT_BAD_EVENT
    source = event.source
    seq = event.seq
    ts = event.ts
    if (
        type(source) is not int
        or type(seq) is not int
        or type(ts) is not int
        or not 0 <= source <= U64_MAX
        or not 0 <= seq <= U64_MAX
        or ts < 0
        or eid != (source, seq)
        or type(event.payload) is not bytes
        or type(event.signature) is not bytes
        or len(event.signature) not in (0, 64)
    ):
        return FAULT_BAD_EVENT
    if type(ttl) is not int or not 0 <= ttl <= TTL_MAX:
        return FAULT_BAD_TTL
    if ts > ceiling:
        return FAULT_TS_AHEAD
    return None
