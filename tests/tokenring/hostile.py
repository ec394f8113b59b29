"""Well-formed hostile token-ring messages: every kind, with extreme values in
every field (shared by the hostile-peer tests and scripts/hostile_peers.py)."""

from __future__ import annotations

import random

from epto import Event
from epto.tokenring import TokenState
from epto.tokenring._messages import (
    Accept,
    Accepted,
    Batch,
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
    Report,
    RingConfig,
    Token,
    TokenAck,
)

EXTREMES = (0, 1, 2, 7, 1 << 31, (1 << 48) - 1, 1 << 48, 1 << 55, (1 << 63) - 1, (1 << 64) - 1)


def _n(rng: random.Random) -> int:
    return rng.choice(EXTREMES) if rng.random() < 0.7 else rng.randrange(1 << 64)


def _event(rng: random.Random, source: int) -> Event:
    return Event(
        source=source,
        seq=_n(rng),
        ts=0,
        payload=rng.randbytes(rng.choice([0, 1, 100])),
        signature=rng.choice([b"", rng.randbytes(64)]),
    )


def _state(rng: random.Random, members: tuple[int, ...]) -> TokenState:
    low = _n(rng)
    ids = tuple((rng.choice(members), _n(rng)) for _ in range(rng.randrange(3)))
    batches: tuple[Batch, ...] = ()
    if ids and rng.random() < 0.7:
        batches = (Batch(first=low, ids=ids, holders=frozenset(members[:1])),)
    end = low + sum(len(b.ids) for b in batches)
    if rng.random() < 0.5:
        end = _n(rng)  # inconsistent on purpose, often
    return TokenState(
        instance=rng.choice([0, 1, _n(rng)]),
        hop=_n(rng),
        next_seq=end,
        low=low,
        stable=rng.choice([low, end, _n(rng)]),
        batches=batches,
        low_digest=_n(rng),
        sources=tuple((m, _n(rng)) for m in members[: rng.randrange(3)]),
    )


def _config(rng: random.Random, members: tuple[int, ...]) -> RingConfig:
    chosen = tuple(sorted(set(rng.sample(members, rng.randrange(1, len(members) + 1)))))
    return RingConfig(
        instance=rng.choice([1, 2, _n(rng)]),
        view=_n(rng),
        members=chosen,
        core=chosen[: rng.randrange(1, len(chosen) + 1)],
        state=_state(rng, members),
        events=tuple((_n(rng), _event(rng, rng.choice(members))) for _ in range(rng.randrange(2))),
        full=rng.random() < 0.5,
        starts=tuple((m, _n(rng), _n(rng)) for m in chosen[: rng.randrange(2)]),
    )


def hostile_message(rng: random.Random, members: tuple[int, ...]) -> Message:
    """A random well-formed message of a random kind with extreme values."""
    ballot = (_n(rng), rng.randrange(len(members)))
    kind = rng.randrange(16)
    src = rng.choice(members)
    if kind == 0:
        return Data(event=_event(rng, src))
    if kind == 1:
        return DataBatch(events=tuple(_event(rng, src) for _ in range(rng.randrange(1, 4))))
    if kind == 2:
        if rng.random() < 0.5:
            return Token(state=_state(rng, members))
        # A copy carrying payloads, often to be passed on to anyone at all.
        return Token(
            state=_state(rng, members),
            events=tuple(_event(rng, rng.choice(members)) for _ in range(rng.randrange(3))),
            forward_to=rng.choice([None, _n(rng), *members]),
            copy=rng.choice([0, 1, 255]),
        )
    if kind == 3:
        return TokenAck(instance=_n(rng), hop=_n(rng), copy=rng.choice([0, 1, 255]))
    if kind == 4:
        return Order(state=_state(rng, members), assigned=((_n(rng), (src, _n(rng))),))
    if kind == 5:
        return Heartbeat(
            instance=_n(rng),
            delivered=_n(rng),
            sent=_n(rng),
            base=_n(rng),
            received=_n(rng),
            missing=rng.random() < 0.5,
        )
    if kind == 6:
        return Fetch(start=_n(rng), end=_n(rng), ids=((src, _n(rng)),))
    if kind == 7:
        return Catchup(
            entries=((_n(rng), _event(rng, src)),),
            events=(_event(rng, src),),
            stable=_n(rng),
            oldest=_n(rng),
        )
    if kind == 8:
        return Join()
    if kind == 9:
        return ConfigRequest()
    if kind == 10:
        return Prepare(instance=rng.choice([0, _n(rng)]), ballot=ballot, full=rng.random() < 0.5)
    if kind == 11:
        report = Report(
            state=_state(rng, members),
            events=((_n(rng), _event(rng, src)),),
            delivered=_n(rng),
        )
        accepted = (ballot, _config(rng, members)) if rng.random() < 0.3 else None
        return Promise(
            instance=rng.choice([0, _n(rng)]), ballot=ballot, accepted=accepted, report=report
        )
    if kind == 12:
        return Nack(instance=rng.choice([0, _n(rng)]), ballot=ballot, promised=(_n(rng), 0))
    if kind == 13:
        return Accept(instance=rng.choice([0, _n(rng)]), ballot=ballot, value=_config(rng, members))
    if kind == 14:
        return Accepted(instance=rng.choice([0, _n(rng)]), ballot=ballot)
    return Decided(config=_config(rng, members))
