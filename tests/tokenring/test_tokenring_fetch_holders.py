"""Whom a fetch goes to when nobody is ahead (docs/token-ring.md, *Under loss*).

A member that sequenced its own messages while its sends to the others were
lost, and then left the core (a light change demoted it), may be the only
one that holds them: the token's batch names it as their holder. A fetch
that finds no member ahead of us must be able to go to it; before, such a
fetch went only to core members, none of which held the payloads, and the
token stalled at every core member for good.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from epto._event import Event
from epto.tokenring import TokenRingConfig
from epto.tokenring._fetch import Fetcher
from epto.tokenring._messages import Batch, Fetch, TokenState
from epto.tokenring._sequencer import OrderBook


class _Out:
    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []

    def send(self, dest: int, message: Any) -> None:
        self.sent.append((dest, message))


def _fetcher(seed: int) -> tuple[Fetcher, _Out, TokenState]:
    book = OrderBook(log_retention=1000)
    # Position 0 (source 3's message) is assigned by the token but its
    # payload never reached this member; only member 3 holds it.
    state = TokenState(
        instance=1,
        hop=0,
        next_seq=1,
        low=0,
        stable=0,
        batches=(Batch(first=0, ids=((3, 0),), holders=frozenset({3})),),
        sources=((3, 1),),
    )
    book.learn_batches(state.batches, 0)
    shared = SimpleNamespace(
        pid=0,
        settings=TokenRingConfig(),
        book=book,
        # A light change left 3 (and 4) out of the core.
        ring=SimpleNamespace(core=(0, 1, 2), members=(0, 1, 2, 3, 4)),
        fd=SimpleNamespace(reported_delivered={}),
        counts=SimpleNamespace(fetches=0),
    )
    out = _Out()
    fetch = Fetcher(shared, out, random.Random(seed))  # type: ignore[arg-type]
    return fetch, out, state


def test_a_fetch_with_nobody_ahead_reaches_the_only_holder() -> None:
    for seed in range(20):
        fetch, out, state = _fetcher(seed)
        now = 0.0
        fetch.start(now, (1, 0))
        for _ in range(24):
            fetch.check(now, (1, state), state)  # the token waits here, from 1
            now += 1.0
        asked = {dest for dest, msg in out.sent if isinstance(msg, Fetch)}
        # First its sender (1); unanswered, then others, member 3 among them.
        assert out.sent[0][0] == 1
        assert 3 in asked, (seed, asked)
        # Member 4 is neither core nor a holder: never asked while others are.
        assert 4 not in asked
        assert all(msg.ids == ((3, 0),) for _, msg in out.sent)


def test_the_holder_is_found_from_the_token_known_here() -> None:
    fetch, out, state = _fetcher(1)
    fetch._s.book.learn((), 1)  # position 0 is final: this member is behind
    now = 0.0
    fetch.start(now)
    for _ in range(24):
        fetch.check(now, None, state)  # no token waits here: the snapshot names 3
        now += 1.0
    assert 3 in {dest for dest, _ in out.sent}
    assert 4 not in {dest for dest, _ in out.sent}


def test_a_held_payload_names_no_holder() -> None:
    fetch, _, state = _fetcher(1)
    fetch._s.book.add_event(Event(source=3, seq=0, ts=0, payload=b"x"))
    assert fetch._holders(None, state) == frozenset()
    assert fetch._holders((1, state), None) == frozenset()
