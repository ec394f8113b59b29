"""A broadcast is stamped by the round that sends it: a process that stalls
between the two (descheduled, a long turn) delays its event and never makes
it late at the others (docs/epto.md, *Timestamps: when a broadcast is
stamped*)."""

from __future__ import annotations

import random

import pytest

from epto import Config
from epto.epidemic import FullView, Process


@pytest.mark.parametrize("clock", ["global", "logical"])
def test_a_source_that_stalls_after_a_broadcast_is_delivered_everywhere(clock: str) -> None:
    ttl = 3
    config = Config(fanout=2, ttl=ttl, round_interval=1.0, clock=clock)  # type: ignore[arg-type]
    procs = {
        pid: Process(pid, config, peers=FullView(pid, range(3)), rng=random.Random(pid), now=0.0)
        for pid in range(3)
    }
    inbox: dict[int, list[tuple[int, object]]] = {pid: [] for pid in procs}
    delivered: dict[int, list[tuple[int, int]]] = {pid: [] for pid in procs}

    def step(pid: int, now: float) -> None:
        """What the driver does at ``now``: feed what arrived, run the round
        if due, send its ball, take the deliveries."""
        p = procs[pid]
        for sender, ball in inbox[pid]:
            p.receive(sender, ball, now)  # type: ignore[arg-type]
        inbox[pid].clear()
        p.handle_timer(now)
        for dest, ball in p.messages_to_send():
            inbox[dest].append((pid, ball))
        delivered[pid].extend(d.event.id for d in p.deliveries())

    stalled = procs[0].broadcast(b"before the stall", 0.5)
    later = procs[1].broadcast(b"while 0 stands still", 1.5)
    # Process 0 runs nothing from 0.5 until 3 * ttl; the others go on, and
    # deliver process 1's event, stamped after 0's broadcast was made.
    for t in range(1, 3 * ttl):
        for pid in (1, 2):
            step(pid, float(t))
    assert later in delivered[1] and later in delivered[2]
    # Process 0 runs again: its event leaves now, and is delivered everywhere
    # (stamped at the broadcast, every copy would be refused as late).
    for t in range(3 * ttl, 6 * ttl):
        for pid in (0, 1, 2):
            step(pid, float(t))
    for pid in procs:
        assert delivered[pid] == [later, stalled], pid
    assert procs[1].statistics().rejected_stale == procs[2].statistics().rejected_stale == 0
