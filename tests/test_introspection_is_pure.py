"""Introspection changes nothing: a seeded group run that calls ``statistics()``
and ``memory_sizes()`` on every process after every input sends the same balls,
in the same order, and delivers the same events as the run that never asks."""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping
from typing import Any

import pytest

from epto import Config, Event
from epto.epidemic import FullView, Node, Process

N = 6


def _run(seed: int, *, introspect: bool, engine: str, events: int = 40) -> list[Any]:
    rng = random.Random(seed)
    config = Config(fanout=3, ttl=4, round_interval=1.0)
    members = range(N)
    procs: dict[int, Process | Node] = {}
    for pid in members:
        prng = random.Random(seed * 100 + pid)
        if engine == "process":
            procs[pid] = Process(pid, config, peers=FullView(pid, members), rng=prng, now=0.0)
        else:
            procs[pid] = Node(pid, config, members=members, rng=prng, now=0.0)
    trace: list[Any] = []
    # (time, sequence, kind, pid, payload)
    queue: list[tuple[float, int, str, int, Any]] = []
    seq = 0

    def push(at: float, kind: str, pid: int, payload: Any = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, (at, seq, kind, pid, payload))

    def after_input(pid: int, now: float) -> None:
        proc = procs[pid]
        if introspect:
            for p in procs.values():
                p.statistics()
                p.memory_sizes()
        for dest, message in proc.messages_to_send():
            if isinstance(message, Mapping):  # a ball: its copies, in its order
                trace.append(("send", now, pid, dest, [(e, c[1]) for e, c in message.items()]))
            else:
                trace.append(("send", now, pid, dest, repr(message)))
            push(now + rng.uniform(0.05, 0.9), "receive", dest, (pid, message))
        for delivery in proc.deliveries():
            trace.append(("deliver", now, pid, delivery.event.id))
        push(proc.get_timer(), "timer", pid)

    for k in range(events):
        push(rng.uniform(0.0, 8.0), "broadcast", rng.randrange(N), f"m{k}".encode())
    for pid in members:
        push(procs[pid].get_timer(), "timer", pid)
    while queue:
        now, _, kind, pid, payload = heapq.heappop(queue)
        if now > 20.0:
            break
        proc = procs[pid]
        if kind == "broadcast":
            trace.append(("broadcast", now, pid, proc.broadcast(payload, now)))
        elif kind == "receive":
            src, message = payload
            if isinstance(message, Mapping):
                # As a driver hands it over: decoded, a plain mapping.
                message = dict(message.items())
            proc.receive(src, message, now)
        elif now >= proc.get_timer():
            proc.handle_timer(now)
        else:
            continue
        after_input(pid, now)
    return trace


@pytest.mark.parametrize("engine", ["process", "node"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_statistics_and_memory_sizes_do_not_change_what_happens(engine: str, seed: int) -> None:
    quiet = _run(seed, introspect=False, engine=engine)
    asked = _run(seed, introspect=True, engine=engine)
    assert any(step[0] == "deliver" for step in quiet)
    assert asked == quiet


@pytest.mark.parametrize("ask", ["statistics", "memory_sizes"])
def test_asking_between_two_balls_keeps_the_next_balls_order(ask: str) -> None:
    """Merging nextBall early (what statistics() once did to count it) put the
    copies held so far in ttl order before later copies were merged in: the
    next ball listed the same copies in another order, and a codec splits a
    ball into frames in that order."""
    x = Event(source=5, seq=0, ts=1, payload=b"x")
    y = Event(source=6, seq=0, ts=2, payload=b"y")
    sent = []
    for asking in (False, True):
        config = Config(fanout=1, ttl=8, round_interval=1.0)
        proc = Process(0, config, peers=FullView(0, [0, 1]), rng=random.Random(1), now=0.0)
        proc.receive(1, {x.id: (x, 3), y.id: (y, 1)}, 0.1)
        if asking:
            getattr(proc, ask)()
        proc.receive(1, {x.id: (x, 4), y.id: (y, 4)}, 0.2)
        proc.handle_timer(proc.get_timer())
        [(_, ball)] = proc.messages_to_send()
        sent.append([(eid, entry[1]) for eid, entry in ball.items()])
    assert sent[0] == [(x.id, 5), (y.id, 5)]
    assert sent[1] == sent[0]
