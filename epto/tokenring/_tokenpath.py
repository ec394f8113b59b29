"""The token path of a token-ring process: accepting the token (once every
message sequenced before is here), acknowledging it, sequencing and passing it.

These functions are one half of :class:`TokenRingProcess` (the data path is
the other, in :mod:`._datapath`); they read and write its state directly and
live apart only to keep modules short.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._event import ProcessId
from . import _sequencer as seqr
from ._membership import Role
from ._messages import ConfigRequest, Order, Token, TokenAck, TokenState

if TYPE_CHECKING:
    from ._process import TokenRingProcess


def on_token(p: TokenRingProcess, sender: ProcessId, msg: Token, now: float) -> None:
    state = msg.state
    if state.instance > p.config.instance:
        p._send(sender, ConfigRequest())
        return
    if state.instance < p.config.instance or p._fenced_since is not None or p.role is not Role.CORE:
        return
    if state.hop <= p._accepted_hop:
        # A retransmission of a token already accepted here.
        p._send(sender, TokenAck(instance=state.instance, hop=state.hop))
        return
    if p._pending is not None and p._pending[1].hop >= state.hop:
        return
    p._pending = (sender, state)
    p._try_accept(now)


def on_token_ack(p: TokenRingProcess, sender: ProcessId, msg: TokenAck, now: float) -> None:
    passed = p._passed
    if (
        passed is not None
        and passed[0] == sender
        and msg.instance == passed[1].instance
        and msg.hop >= passed[1].hop
    ):
        p._passed = None


def try_accept(p: TokenRingProcess, now: float) -> None:
    assert p._pending is not None
    sender, state = p._pending
    p._learn(state)
    if p.role is not Role.CORE or not p._book.holds_through(state.next_seq):
        if p._fetch_since is None:
            p._fetch_since = now
        return
    p._pending = None
    p._accepted_hop = state.hop
    if sender != p.pid:
        p._send(sender, TokenAck(instance=state.instance, hop=state.hop))
    accepted = seqr.accept(state, p.pid, p.config.core, p._k())
    p._counts["tokens"] += 1
    p._token_seen = now
    p._take(accepted, state.stable)
    p._token = accepted
    # With a full batch waiting, pass at once (see _hurry_token).
    p._pass_at = now if hurry(p, accepted) else now + p.cfg.token_hold


def hurry(p: TokenRingProcess, token: TokenState) -> bool:
    """Whether the holder of ``token`` passes it at once instead of holding it
    ``token_hold``: a full batch is waiting, and either the window has room
    for it or passing drains the window (the core has ``k`` members, so the
    batches it carries become stable and leave it once every core member
    accepted). A token whose window cannot drain (a core below ``k``) is held
    as usual instead of going round at the links' speed."""
    want = min(p.cfg.max_batch, seqr.BATCH_IDS)
    pool = p._book.pool
    if len(pool) < want or len(seqr.pick(token, pool, want)) < want:
        # Not a full batch that this visit could sequence (a source's next
        # message may be missing): passing at once would send the token round
        # at the links' speed without sequencing anything.
        return False
    if len(p.config.core) >= p._k():
        return True
    count, room = window_room(p, token)
    return count > 0 and room > 0


def take(p: TokenRingProcess, state: TokenState, before: int) -> None:
    p._learn(state)
    if state.stable > before:
        book = p._book
        assigned = []
        # The notice carries the state, whose batches hold every assignment
        # from ``low`` on: list only the newly stable ones below it.
        for seq in range(before, min(state.stable, state.low)):
            eid = book.assignment(seq)
            if eid is not None:
                assigned.append((seq, eid))
        p._send_all(Order(state=state, assigned=tuple(assigned)))


def window_room(p: TokenRingProcess, token: TokenState) -> tuple[int, int]:
    """How many messages, and how many bytes of them, the holder may still
    sequence without taking the token's window (what a full view change
    would exchange) beyond ``max_unstable_messages`` / ``max_unstable_bytes``.

    The bytes are the messages' payloads and signatures plus, per batch (the
    one this visit would add included), :func:`batch_bytes`. An empty window
    admits one message whatever its size; a window whose bytes are not all
    known here (a payload this member does not keep) counts as full, which
    only pauses sequencing until the token has gone round."""
    cfg = p.cfg
    per_batch = batch_bytes(len(p.config.members))
    if not token.batches:
        return cfg.max_unstable_messages, max(0, cfg.max_unstable_bytes - per_batch)
    cache = p._window_bytes
    book = p._book
    used = 0
    for b in token.batches:
        known = cache.get(b.first)
        if known is not None and known[0] == b.ids:
            used += known[1]
            continue
        size = book.window_bytes(b.first, b.ids)
        if size is None:
            return 0, 0
        cache[b.first] = (b.ids, size)
        used += size
    if len(cache) > 4 * len(token.batches) + 64:
        low = token.batches[0].first
        p._window_bytes = {f: v for f, v in cache.items() if f >= low}
    count = cfg.max_unstable_messages - sum(len(b.ids) for b in token.batches)
    room = cfg.max_unstable_bytes - used - per_batch * (len(token.batches) + 1)
    return max(0, count), max(0, room)


def batch_bytes(members: int) -> int:
    """What one batch of the window counts against ``max_unstable_bytes``
    besides its messages: its first position, run and holder counts, and a
    holder id per member of the view (its holders are members of the view).
    Charged to the budget so that a window of many small batches fits the
    frame as well as one of a few large ones."""
    return 16 + 8 * members


def pass_token(p: TokenRingProcess, now: float) -> None:
    token = p._token
    assert token is not None
    pool = p._book.pool
    counters = dict(token.sources)
    for eid in [e for e in pool if e[1] < counters.get(e[0], 0)]:
        del pool[eid]
    count_room, byte_room = window_room(p, token)
    ids = seqr.pick(
        token,
        pool,
        min(p.cfg.max_batch, count_room),
        room=byte_room,
        cost=lambda eid: seqr.event_bytes(pool[eid]),
        first_free=not token.batches,
    )
    new = seqr.sequence(token, p.pid, ids, p.config.core, p._k())
    # Record the new assignments: the batches the new state still carries are
    # learned as batches (a snapshot carrying them again is then skipped); the
    # first ones, if every core member already holds them (a core of one),
    # one by one.
    created = [b for b in new.batches if b.first >= token.next_seq]
    dropped = len(ids) - sum(len(b.ids) for b in created)
    if dropped:
        p._book.learn([(token.next_seq + i, ids[i]) for i in range(dropped)], 0)
    p._book.learn_batches(created, 0)
    p._take(new, token.stable)
    core = p.config.core
    nxt = core[(core.index(p.pid) + 1) % len(core)]
    if nxt == p.pid:
        p._token = new
        p._token_seen = now
        busy = bool(p._book.pool)
        p._pass_at = now + (p.cfg.token_hold if busy else p.cfg.heartbeat_interval)
        return
    p._token = None
    p._send(nxt, Token(state=new))
    p._passed = (nxt, new, now)
