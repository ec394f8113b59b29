"""Cyclon view quality: in-degree, view fill, ages, dead peers after churn, cost.

Runs ``n`` Cyclon samplers in a small discrete-event loop (seeded uniform
latency, messages to crashed processes dropped), joined through one tracker
(a star at first, as in JEpTO's evaluation), then replaces a fraction of the
processes every period for a while and counts the dead peers left in views
after churn stops. Time is measured in shuffle periods.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
from collections.abc import Iterator

from .._errors import ConfigurationError
from ..cli._args import positive_int
from ..epidemic._cyclon import Cyclon, CyclonConfig
from ..epidemic._peer_messages import PeerDescriptor, ShuffleReply, ShuffleRequest


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", type=positive_int, default=1000, help="processes (default 1000)")
    p.add_argument("--view-size", type=positive_int, default=CyclonConfig().view_size)
    p.add_argument("--shuffle-length", type=positive_int, default=CyclonConfig().shuffle_length)
    p.add_argument("--warmup", type=positive_int, default=100, help="periods before measuring")
    p.add_argument("--churn", type=float, default=0.01, help="fraction replaced per period")
    p.add_argument("--churn-periods", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)


class _Loop:
    """Timers and message deliveries in time order; one period = 1.0."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self.samplers: dict[int, Cyclon] = {}
        self.queue: list[tuple[float, int, int, int, object]] = []
        self.armed: dict[int, float] = {}
        self.seq = itertools.count()
        self.messages = 0
        self.descriptors = 0

    def add(self, c: Cyclon) -> None:
        self.samplers[c.pid] = c
        self.flush(c)

    def flush(self, c: Cyclon) -> None:
        for dest, msg in c.messages_to_send():
            self.messages += 1
            if isinstance(msg, ShuffleRequest | ShuffleReply):
                self.descriptors += len(msg.entries)
            when = self.now + self.rng.uniform(0.04, 0.4)
            heapq.heappush(self.queue, (when, next(self.seq), dest, c.pid, msg))
        timer = c.get_timer()
        if self.armed.get(c.pid) != timer:
            self.armed[c.pid] = timer
            heapq.heappush(self.queue, (timer, next(self.seq), c.pid, -1, None))

    def run_until(self, t: float) -> None:
        while self.queue and self.queue[0][0] <= t:
            when, _, dest, sender, msg = heapq.heappop(self.queue)
            c = self.samplers.get(dest)
            if c is None:
                continue
            self.now = when
            if sender == -1:
                if self.armed.get(dest) != when:
                    continue
                del self.armed[dest]
                c.handle_timer(when)
            else:
                c.receive(sender, msg, when)
            self.flush(c)
        self.now = t

    def in_degrees(self) -> list[int]:
        deg = dict.fromkeys(self.samplers, 0)
        for c in self.samplers.values():
            for d in c.view():
                if d.pid in deg:
                    deg[d.pid] += 1
        return list(deg.values())


def _address(pid: int) -> bytes:
    return b"10.%d.%d.%d:9000" % (pid >> 16 & 255, pid >> 8 & 255, pid & 255)


def measure(args: argparse.Namespace) -> Iterator[str]:
    cfg = CyclonConfig(
        view_size=args.view_size, shuffle_length=args.shuffle_length, shuffle_period=1.0
    )
    n, c = args.n, cfg.view_size
    loop = _Loop(args.seed)
    rng = random.Random(args.seed)

    def join(pid: int, seed: int | None) -> None:
        seeds = [] if seed is None else [PeerDescriptor(pid=seed, address=_address(seed))]
        loop.add(
            Cyclon(
                pid,
                cfg,
                address=_address(pid),
                seeds=seeds,
                rng=random.Random(rng.getrandbits(64)),
                now=loop.now,
            )
        )

    for pid in range(n):
        join(pid, None if pid == 0 else 0)
    loop.run_until(float(args.warmup))
    deg = loop.in_degrees()
    random_sd = (c * (1 - c / n)) ** 0.5
    ages = [d.age for s in loop.samplers.values() for d in s.view()]
    fill = [len(s) for s in loop.samplers.values()]
    shuffles = sum(s.statistics().shuffles for s in loop.samplers.values())
    yield f"Cyclon: n={n}, view {c}, shuffle length {cfg.shuffle_length}, seed {args.seed}"
    yield f"after {args.warmup} periods from a star bootstrap:"
    yield (
        f"  in-degree mean {statistics.mean(deg):.2f} sd {statistics.pstdev(deg):.2f} "
        f"min {min(deg)} max {max(deg)}  (random graph: mean {c} sd {random_sd:.2f})"
    )
    yield f"  view fill min {min(fill)} mean {statistics.mean(fill):.2f}; oldest entry {max(ages)}"
    yield (
        f"  per shuffle: {loop.messages / shuffles:.2f} messages, "
        f"{loop.descriptors / shuffles:.1f} descriptors"
    )

    dead: set[int] = set()
    next_pid = n
    per_period = max(1, round(args.churn * n))
    start = loop.now
    for r in range(args.churn_periods):
        for _ in range(per_period):
            victim = rng.choice(sorted(loop.samplers))
            del loop.samplers[victim]
            dead.add(victim)
            join(next_pid, rng.choice(sorted(loop.samplers)))
            next_pid += 1
        loop.run_until(start + r + 1)
    yield f"churn: {per_period} processes replaced per period for {args.churn_periods} periods"
    end = loop.now
    counts = []
    for k in range(0, 3 * c + 1):
        loop.run_until(end + k)
        left = sum(d.pid in dead for s in loop.samplers.values() for d in s.view())
        counts.append(left)
        if left == 0:
            break
    marks = ", ".join(f"{k}: {v}" for k, v in enumerate(counts) if k % 10 == 0 or v == 0)
    yield f"  dead descriptors left k periods after churn stops (k: count): {marks}"
    deg = loop.in_degrees()
    yield f"  in-degree then: min {min(deg)} mean {statistics.mean(deg):.2f} max {max(deg)}"


def run(args: argparse.Namespace) -> int:
    if args.n < 2:
        raise ConfigurationError(f"-n must be at least 2 processes, got {args.n}")
    for line in measure(args):
        print(line, flush=True)
    return 0
