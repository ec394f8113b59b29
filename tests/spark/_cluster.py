"""A small lockstep EpTO group that writes delivery logs, for the Spark tests."""

from __future__ import annotations

import random
from pathlib import Path

import epto
import epto.epidemic
import epto.wire
from epto.log import DeliveryLogs, micros, write_broadcasts


def run_cluster(
    root: Path,
    *,
    n: int = 4,
    events: int = 30,
    seed: int = 1,
    manifest: bool = True,
    **log_options: int,
) -> dict[epto.EventId, int]:
    """A lockstep EpTO group (every ball arrives in the next round) that logs
    every delivery; returns the broadcast times. Virtual time is in seconds."""
    rng = random.Random(seed)
    config = epto.Config.for_group(n)
    membership = epto.epidemic.Membership(range(n))
    procs = [
        epto.epidemic.Process(
            pid,
            config,
            peers=epto.epidemic.FullView(pid, membership),
            rng=random.Random(rng.random()),
            now=0.0,
        )
        for pid in range(n)
    ]
    sent: dict[epto.EventId, int] = {}
    inflight: list[tuple[int, int, epto.wire.Ball]] = []
    step = config.round_interval
    with DeliveryLogs(root, **log_options) as logs:
        k = 0
        while k < 400 and (
            len(sent) < events or inflight or any(p.pending_events() for p in procs)
        ):
            k += 1
            now = k * step
            for src, dest, ball in inflight:
                procs[dest].receive(src, ball, now)
            inflight = []
            if len(sent) < events:
                p = procs[rng.randrange(n)]
                eid = p.broadcast(b"payload-%d" % len(sent), now)
                sent[eid] = micros(now)
            for p in procs:
                p.handle_timer(now)
                inflight += [(p.pid, d, b) for d, b in p.messages_to_send()]
                for d in p.deliveries():
                    logs.write(
                        p.pid, d, delivered_at=micros(now), broadcast_at=sent.get(d.event.id)
                    )
    if manifest:
        write_broadcasts(root, ((s, q, t) for (s, q), t in sent.items()))
    return sent
