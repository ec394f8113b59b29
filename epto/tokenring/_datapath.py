"""The data path of a token-ring process: broadcasts received, order
notices, delivery in sequence order, retransmission of own messages, and
fetching what is missing.

These functions are one half of :class:`TokenRingProcess` (the token is the
other, in :mod:`._tokenpath`); they read and write its state directly and live
apart only to keep modules short.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs

from .._event import Delivery, Event, ProcessId
from . import _sequencer as seqr
from . import _tokenpath
from ._membership import Input, Role
from ._messages import Catchup, Data, DataBatch, Fetch, Order, TokenState

if TYPE_CHECKING:
    from ._process import TokenRingProcess

FETCH_SPAN = 4096
"""Most positions one fetch asks for and one catch-up answers."""

DELIVER_CHUNK = 256
"""Most messages one input (receive or handle_timer) delivers; more wait for
the next handle_timer, which is due at once."""


def on_data(p: TokenRingProcess, sender: ProcessId, msg: Data, now: float) -> None:
    if not p._authentic(msg.event):
        return
    p._book.add_event(msg.event)
    if p._pending is not None:
        p._try_accept(now)
    p._hurry_token(now)


def on_data_batch(p: TokenRingProcess, sender: ProcessId, msg: DataBatch, now: float) -> None:
    add = p._book.add_event
    for event in msg.events:
        if p._authentic(event):
            add(event)
    if p._pending is not None:
        p._try_accept(now)
    p._hurry_token(now)


def hurry_token(p: TokenRingProcess, now: float) -> None:
    if p._token is None or p._pass_at <= now:
        return
    if _tokenpath.hurry(p, p._token):
        # A full batch is waiting: holding the token longer gains nothing.
        p._pass_at = min(p._pass_at, now)
    elif len(p.config.core) == 1:
        p._pass_at = min(p._pass_at, now + p.cfg.token_hold)


def learn(p: TokenRingProcess, state: TokenState) -> None:
    """Take in a snapshot of the current instance's token."""
    book = p._book
    try:
        book.learn_batches(state.batches, state.stable)
        book.check_digest(state.low, state.low_digest)
    except seqr.Divergence:
        p._leave(Input.DIVERGED)
        return
    book.keep_from(state.low)
    if state.hop > p._snap.hop:
        p._snap = state
    passed = p._passed
    if passed is not None and state.hop > passed[1].hop:
        p._passed = None


def on_order(p: TokenRingProcess, sender: ProcessId, msg: Order, now: float) -> None:
    if msg.state.instance != p.config.instance or p._fenced_since is not None:
        return
    if msg.state.hop > p._snap.hop:
        p._token_seen = now
        p._order_from = sender
    try:
        p._book.learn(msg.assigned, 0)
    except seqr.Divergence:
        p._leave(Input.DIVERGED)
        return
    p._learn(msg.state)


def deliver(p: TokenRingProcess, now: float) -> None:
    if p.role not in (Role.CORE, Role.EXTERNAL):
        return
    p._deliver_at = math.inf
    events: list[Event] = []
    try:
        more = p._book.deliver_into(events, DELIVER_CHUNK)
    except seqr.Divergence:
        _hand_out(p, events)
        p._leave(Input.DIVERGED)
        return
    _hand_out(p, events)
    if more:
        # Bound the work of one input: the rest is delivered by the next
        # handle_timer (due now), so that a driver sends what this input
        # produced (a token) first.
        p._deliver_at = now
        return
    book = p._book
    if book.next_deliver < _known_end(p) or p._pending is not None:
        if p._fetch_since is None:
            p._fetch_since = now
    else:
        p._fetch_since = None


def _hand_out(p: TokenRingProcess, events: list[Event]) -> None:
    me = p.pid
    own = p._own
    p._deliveries.extend(Delivery(event=e) for e in events)
    for e in events:
        if e.source == me:
            own.pop(e.seq, None)


def resend_own(p: TokenRingProcess, now: float) -> None:
    """Retransmit own messages not sequenced after a while (a broken link may
    have lost them everywhere).

    Only when the token's counter of our messages has not moved for
    ``token_timeout``: while it moves, the messages are getting through
    (a backlog in the links is not a loss, and retransmitting into it only
    deepens it)."""
    sequenced = dict(p._snap.sources).get(p.pid, 0)
    count, since = p._own_progress
    if sequenced != count:
        p._own_progress = (sequenced, now)
        return
    waiting = [(seq, event, sent) for seq, (event, sent) in p._own.items() if seq >= sequenced]
    if not waiting or now - max(since, waiting[0][2]) < p.cfg.token_timeout:
        return
    for seq, event, _ in waiting:
        p._own[seq] = (event, now)
    for i in range(0, len(waiting), seqr.BATCH_IDS):
        chunk = tuple(event for _, event, _ in waiting[i : i + seqr.BATCH_IDS])
        p._send_all(Data(event=chunk[0]) if len(chunk) == 1 else DataBatch(events=chunk))
    p._own_progress = (sequenced, now)


# -- fetching -----------------------------------------------------------


def check_fetch(p: TokenRingProcess, now: float) -> None:
    if p._fetch_since is None:
        return
    if now < max(p._fetch_since, p._fetch_sent) + p.cfg.fetch_timeout:
        return
    p._fetch_sent = now
    book = p._book
    end = _known_end(p)
    target = p._order_from
    if p._pending is not None:
        end = max(end, p._pending[1].next_seq)
        target = p._pending[0]
    need = book.next_deliver
    if target is None or target == p.pid or p._too_old.get(target) == need:
        # Members that delivered past what we miss can serve it (those that
        # did not say they no longer keep it first); others may miss it too.
        ahead = _ahead(p)
        others = (
            [m for m in ahead if p._too_old.get(m) != need]
            or ahead
            or [m for m in p.config.core if m != p.pid]
            or [m for m in p.config.members if m != p.pid]
        )
        if not others:
            return
        target = p._rng.choice(others)
    # A fetch covers at most FETCH_SPAN positions (what one catch-up carries),
    # whatever a token or a heartbeat claims: the walk below is bounded.
    end = min(end, book.next_deliver + FETCH_SPAN)
    gaps, ids = book.missing(end)
    # Positions others have delivered but that are not final here need the
    # group's assignments even where we hold tentative ones (a token of ours
    # the group may have replaced): ask from our stability mark on.
    final_end = min(_known_end(p), book.next_deliver + FETCH_SPAN)
    unconfirmed = book.stable < final_end
    if not gaps and not ids and not unconfirmed:
        p._fetch_since = None
        return
    start = max(book.stable, book.next_deliver) if unconfirmed else end
    if gaps:
        start = min(start, gaps[0])
    if ids:
        # A payload the others may have delivered already is served from
        # their logs, by position.
        start = book.next_deliver
    p._send(target, Fetch(start=start, end=end, ids=tuple(ids[:1024])))
    p._fetch_sent = now
    p._counts["fetches"] += 1
    p._order_from = None


def _known_end(p: TokenRingProcess) -> int:
    """How far this process knows the order to be final: its stability mark,
    or further if a member's heartbeat says it delivered further (a member
    that missed the notices, with no configuration change to come, must
    still deliver what the others did)."""
    reported = p._fd.reported_delivered
    ahead = max((reported.get(m, 0) for m in p.config.members if m != p.pid), default=0)
    return max(p._book.stable, ahead)


def _ahead(p: TokenRingProcess) -> list[ProcessId]:
    """The other members whose heartbeats say they delivered past our watermark."""
    need = p._book.next_deliver
    reported = p._fd.reported_delivered
    return [m for m in p.config.members if m != p.pid and reported.get(m, -1) > need]


def on_fetch(p: TokenRingProcess, sender: ProcessId, msg: Fetch, now: float) -> None:
    book = p._book
    # Final assignments only (below our stable watermark): a tentative one
    # may belong to a token the group has replaced (see _sequencer).
    end = min(msg.end, msg.start + FETCH_SPAN, book.stable)
    entries = tuple(book.entries(msg.start, end))
    events = tuple(e for e in (book.payload(i) for i in msg.ids) if e is not None)
    p._send(
        sender,
        Catchup(entries=entries, events=events, stable=book.stable, oldest=book.log_start),
    )


def on_catchup(p: TokenRingProcess, sender: ProcessId, msg: Catchup, now: float) -> None:
    book = p._book
    need = book.next_deliver
    if need < msg.oldest and not any(s == need for s, _ in msg.entries):
        # The sender no longer keeps what we miss (or never had it: it
        # joined later). Once every member that delivered past it says so,
        # nobody will serve it: leave, and rejoin under a new identity.
        p._too_old[sender] = need
        ahead = _ahead(p)
        if ahead and all(p._too_old.get(m) == need for m in ahead):
            p._leave(Input.TOO_FAR_BEHIND)
            return
    for event in msg.events:
        if p._authentic(event):
            book.add_event(event)
    try:
        for seq, event in msg.entries:
            if not p._authentic(attrs.evolve(event, ts=0)):
                continue
            book.learn([(seq, event.id)], 0)
            book.add_event(attrs.evolve(event, ts=0))
        # Final here: only positions the catch-up covers, without a gap from
        # our stability mark (a position it skipped may hold a tentative
        # assignment of ours that the group replaced).
        covered = {s for s, _ in msg.entries if s < msg.stable}
        final = book.stable
        while final in covered:
            final += 1
        book.learn((), final)
    except seqr.Divergence:
        p._leave(Input.DIVERGED)
        return
    if p._pending is not None:
        p._try_accept(now)
