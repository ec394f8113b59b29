"""``epto demo``: the main job, on embedded defaults."""

from __future__ import annotations

import argparse
import random
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run a local cluster that gossips, orders and checks what it delivered",
        description="Run a local EpTO cluster on embedded defaults and report what it delivered.",
    )
    p.add_argument("--processes", type=int, default=30)
    p.add_argument("--events", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import epto

    n = args.processes
    rng = random.Random(args.seed)
    config = epto.Config.for_group(n) if hasattr(epto.Config, "for_group") else None
    assert config is not None
    members = epto.Membership(range(n))
    procs = [
        epto.Process(
            i, config, peers=epto.FullView(i, members), rng=random.Random(rng.random()), now=0.0
        )
        for i in range(n)
    ]
    delivered: dict[int, list[epto.EventId]] = {i: [] for i in range(n)}
    now = 0.0
    sent = 0
    rounds = 0
    while sent < args.events or any(
        p.statistics().pending or p.statistics().next_ball_size for p in procs
    ):
        now += config.round_interval
        rounds += 1
        if sent < args.events:
            procs[rng.randrange(n)].broadcast(f"event {sent}".encode(), now)
            sent += 1
        for p in procs:
            p.handle_timer(now)
        for p in procs:
            for dest, ball in p.messages_to_send():
                procs[dest].receive(p.pid, ball, now)
        for p in procs:
            delivered[p.pid].extend(d.event.id for d in p.deliveries())
    first = delivered[0]
    same = all(seq == first for seq in delivered.values())
    print(
        f"{n} processes, {args.events} events, {rounds} rounds "
        f"(fanout {config.fanout}, TTL {config.ttl})"
    )
    print(f"every process delivered {len(first)} events; identical order everywhere: {same}")
    return 0 if same and len(first) == args.events else 1
