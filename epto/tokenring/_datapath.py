"""The data path of a token-ring process: own broadcasts and their
retransmission, broadcasts received, delivery in sequence order, and taking
in catch-ups.

Rules:

* Own broadcasts are numbered ``first_seq(incarnation)``, then one up
  (``seq``; ``0, 1, 2, ...`` in incarnation 0), signed when the
  group signs, kept in ``own`` until delivered here, and sent to every member
  (through the outbox's buffer). Own messages not sequenced are sent again
  only when the token's counter of our messages has not moved for
  ``token_timeout`` (:meth:`DataPath.resend_own`).
* A payload enters the order book only if authentic; every arrival may let a
  token waiting here be accepted, and may make the holder pass sooner.
* Delivery follows the order book's rule (:mod:`._sequencer`), at most
  :data:`DELIVER_CHUNK` messages per input; the rest is due at once
  (``deliver_at``). After a delivery, the fetcher wants if we are behind
  what we know to be final or a token waits here, and stops wanting
  otherwise.
* A catch-up's entries are learned as final only over positions it covers
  without a gap from our stability mark; a process that misses what no
  member ahead of it keeps leaves the view (too far behind).
* A divergence (our delivered prefix differs from the group's order) makes
  the process leave the view, after handing out what it delivered before.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import attrs

from .._event import Delivery, DeliveryTag, Event, EventId, ProcessId
from .._incarnation import first_seq
from . import _sequencer as seqr
from ._fetch import Fetcher
from ._membership import Input, Role
from ._messages import Catchup, Data, DataBatch, Token
from ._outbox import Outbox
from ._shared import Shared
from ._tokenpath import TokenPath

if TYPE_CHECKING:
    from ._optimistic import OptimisticPath

DELIVER_CHUNK = 256
"""Most messages one input (receive or handle_timer) delivers; more wait for
the next handle_timer, which is due at once."""


class DataPath:
    """Payloads in, deliveries out, for one process."""

    __slots__ = (
        "_deliveries",
        "_fetch",
        "_leave",
        "_next_seq",
        "_optimistic",
        "_out",
        "_own",
        "_own_progress",
        "_s",
        "_signer",
        "_tokens",
        "deliver_at",
    )

    def __init__(
        self,
        shared: Shared,
        out: Outbox,
        fetch: Fetcher,
        tokens: TokenPath,
        leave: Callable[[Input], None],
        *,
        deliveries: deque[Delivery],
        signer: Callable[[Event], bytes] | None,
        now: float,
        optimistic: OptimisticPath | None = None,
    ) -> None:
        self._s = shared
        self._optimistic = optimistic
        self._out = out
        self._fetch = fetch
        self._tokens = tokens
        self._leave = leave
        self._deliveries = deliveries
        """Filled here, emptied by the process's outputs."""
        self._signer = signer
        self._next_seq = first_seq(shared.incarnation)
        self._own: dict[int, tuple[Event, float]] = {}
        """Own broadcasts not delivered here yet (seq -> event, when last sent)."""
        self._own_progress = (0, now)
        """(the token's counter of our messages, when it last moved)."""
        self.deliver_at = math.inf
        """Due when a delivery was cut at DELIVER_CHUNK messages."""

    def stop(self) -> None:
        self.deliver_at = math.inf

    # -- own broadcasts -------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        s = self._s
        seq = self._next_seq
        self._next_seq += 1
        if type(payload) is not bytes:
            payload = bytes(payload)  # an immutable copy of a bytearray or a view
        event = Event(source=s.pid, seq=seq, ts=0, payload=payload)
        if self._signer is not None:
            event = attrs.evolve(event, signature=self._signer(event))
        self._own[seq] = (event, now)
        s.book.add_event(event)
        if self._optimistic is not None:
            self._optimistic.arrived(event, now)
        s.counts.broadcasts += 1
        tokens = self._tokens
        tokens.hurry_token(now)
        # At the holder the broadcast is sequenced when the token leaves, and
        # leaves with it: holding it until then costs no latency.
        self._out.queue_own(
            event,
            now,
            tokens.pass_at if tokens.token is not None else -math.inf,
            in_flight=len(self._own),
        )
        return event.id

    def own_events(self) -> Iterator[Event]:
        """Own broadcasts not delivered here yet, oldest first."""
        return (event for event, _ in self._own.values())

    def own_count(self) -> int:
        return len(self._own)

    def resend_own(self, now: float) -> None:
        """Retransmit own messages not sequenced after a while (a broken link may
        have lost them everywhere).

        Only when the token's counter of our messages has not moved for
        ``token_timeout``: while it moves, the messages are getting through
        (a backlog in the links is not a loss, and retransmitting into it only
        deepens it)."""
        s = self._s
        sequenced = dict(self._tokens.snap.sources).get(s.pid, 0)
        count, since = self._own_progress
        if sequenced != count:
            self._own_progress = (sequenced, now)
            return
        own = self._own
        waiting = [(seq, event, sent) for seq, (event, sent) in own.items() if seq >= sequenced]
        if not waiting or now - max(since, waiting[0][2]) < s.settings.token_timeout:
            return
        for seq, event, _ in waiting:
            own[seq] = (event, now)
        for i in range(0, len(waiting), seqr.BATCH_IDS):
            chunk = tuple(event for _, event, _ in waiting[i : i + seqr.BATCH_IDS])
            self._out.send_all(Data(event=chunk[0]) if len(chunk) == 1 else DataBatch(events=chunk))
        self._own_progress = (sequenced, now)

    # -- payloads received ----------------------------------------------------

    def on_data(self, sender: ProcessId, msg: Data, now: float) -> None:
        s = self._s
        if not s.authentic(msg.event):
            return
        if s.book.add_event(msg.event) and self._optimistic is not None:
            self._optimistic.arrived(msg.event, now)
        tokens = self._tokens
        if tokens.pending is not None:
            tokens.try_accept(now)
        tokens.hurry_token(now)

    def on_data_batch(self, sender: ProcessId, msg: DataBatch, now: float) -> None:
        s = self._s
        add = s.book.add_event
        authentic = s.authentic
        optimistic = self._optimistic
        for event in msg.events:
            if authentic(event) and add(event) and optimistic is not None:
                optimistic.arrived(event, now)
        tokens = self._tokens
        if tokens.pending is not None:
            tokens.try_accept(now)
        tokens.hurry_token(now)

    # -- delivery -------------------------------------------------------------

    def deliver(self, now: float) -> None:
        s = self._s
        if s.role not in (Role.CORE, Role.EXTERNAL):
            return
        self.deliver_at = math.inf
        if self._optimistic is not None:
            self._optimistic.deliver_due(now)
        events: list[Event] = []
        book = s.book
        try:
            more = book.deliver_into(events, DELIVER_CHUNK)
        except seqr.Divergence:
            self._hand_out(events)
            self._leave(Input.DIVERGED)
            return
        self._hand_out(events)
        if more:
            # Bound the work of one input: the rest is delivered by the next
            # handle_timer (due now), so that a driver sends what this input
            # produced (a token) first.
            self.deliver_at = now
            return
        fetch = self._fetch
        if book.next_deliver < book.stable:
            # Final here, and not delivered: a payload is missing (lost on its
            # way from the source). The member whose notice made it final
            # holds it: ask at once, once per stability mark.
            fetch.start(now, (-1, book.stable))
        elif book.next_deliver < fetch.known_end() or self._tokens.pending is not None:
            fetch.start(now)
        else:
            fetch.stop()

    def _hand_out(self, events: list[Event]) -> None:
        me = self._s.pid
        own = self._own
        optimistic = self._optimistic
        if optimistic is None:
            self._deliveries.extend([Delivery(event=e) for e in events])
        else:
            final = DeliveryTag.FINAL
            self._deliveries.extend(
                Delivery(event=e, tag=final, reordered=optimistic.finalize(e.id)) for e in events
            )
        if own:
            for e in events:
                if e.source == me:
                    own.pop(e.seq, None)

    # -- catch-ups ------------------------------------------------------------

    def take_payloads(self, events: tuple[Event, ...], now: float) -> None:
        """Keep the authentic ``events`` not held yet (a catch-up's, or those a
        token carries), as if they had arrived from their sources."""
        s = self._s
        book = s.book
        optimistic = self._optimistic
        for event in events:
            if s.authentic(event) and book.add_event(event) and optimistic is not None:
                optimistic.arrived(event, now)

    def on_token(self, sender: ProcessId, msg: Token, now: float) -> None:
        """A token: the payloads it carries first, so that it may be accepted
        without fetching them."""
        if msg.events and msg.forward_to is None:
            self.take_payloads(msg.events, now)
        self._tokens.on_token(sender, msg, now)

    def on_catchup(self, sender: ProcessId, msg: Catchup, now: float) -> None:
        s = self._s
        self._fetch.answered(sender, now)
        book = s.book
        need = book.next_deliver
        if (
            need < msg.oldest
            and not any(seq == need for seq, _ in msg.entries)
            # The sender no longer keeps what we miss (or never had it: it
            # joined later). Once every member that delivered past it says
            # so, nobody will serve it: leave, and rejoin under a new identity.
            and self._fetch.nobody_keeps(sender, need)
        ):
            self._leave(Input.TOO_FAR_BEHIND)
            return
        self.take_payloads(msg.events, now)
        try:
            for seq, event in msg.entries:
                if not s.authentic(attrs.evolve(event, ts=0)):
                    continue
                book.learn([(seq, event.id)], 0)
                book.add_event(attrs.evolve(event, ts=0))
            # Final here: only positions the catch-up covers, without a gap from
            # our stability mark (a position it skipped may hold a tentative
            # assignment of ours that the group replaced).
            covered = {seq for seq, _ in msg.entries if seq < msg.stable}
            final = book.stable
            while final in covered:
                final += 1
            book.learn((), final)
        except seqr.Divergence:
            self._leave(Input.DIVERGED)
            return
        if self._tokens.pending is not None:
            self._tokens.try_accept(now)
