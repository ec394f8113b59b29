"""Random fault schedules for token-ring simulations (shared by tests and scripts)."""

from __future__ import annotations

import random

import attrs
from epto.transports.virtual import TokenRingCluster

from epto.check import CheckReport, check
from epto.tokenring import TokenRingConfig


def random_run(
    seed: int,
    n: int = 5,
    duration: float = 8.0,
    k: int | None = None,
    window_bytes: int | None = None,
) -> TokenRingCluster:
    """A run with broadcasts from everyone, random delays, link breaks, a
    crash of the token holder, a flapping member, a partition, and a join.
    ``window_bytes`` sets ``max_unstable_bytes`` (a small one makes the holder
    pause sequencing often)."""
    rng = random.Random(seed)
    cfg = TokenRingConfig(k=k)
    if window_bytes is not None:
        cfg = attrs.evolve(cfg, max_unstable_bytes=window_bytes)
    cluster = TokenRingCluster(n, cfg, seed=seed, delay=(0.0005, rng.choice([0.002, 0.01, 0.03])))
    count = 0
    t = 0.05
    while t < duration - 3.0:
        sender = rng.randrange(n)
        cluster.broadcast_at(t, sender, b"m%d" % count)
        count += 1
        t += rng.expovariate(40.0)
    faults = rng.sample(["crash-holder", "flap", "partition", "breaks", "join", "crash"], k=3)
    if "crash-holder" in faults:

        def crash_holder() -> None:
            for p, proc in cluster.procs.items():
                if proc.holds_token() and p not in cluster.crashed:
                    cluster.crash(p)
                    return
            if cluster.now < duration:
                cluster.at(cluster.now + 0.0005, crash_holder)  # in flight: retry

        cluster.at(rng.uniform(0.5, 2.0), crash_holder)
    if "crash" in faults:
        victim = rng.randrange(n)
        cluster.at(rng.uniform(0.5, 3.0), lambda: cluster.crash(victim))
    if "flap" in faults:
        flapper = rng.randrange(n)
        period = rng.uniform(0.3, 1.5)
        t = rng.uniform(0.2, 1.0)
        while t < duration - 3.0:
            cluster.at(t, lambda: cluster.disconnect(flapper))
            cluster.at(t + period, lambda: cluster.reconnect(flapper))
            t += 2 * period
    if "partition" in faults:
        members = list(range(n))
        rng.shuffle(members)
        cut = rng.randrange(1, n)
        start = rng.uniform(0.5, 3.0)
        end = start + rng.uniform(0.2, 6.0)
        cluster.partition([members[:cut], members[cut:]], start=start, end=end)
    if "breaks" in faults:
        for _ in range(rng.randrange(3, 15)):
            a, b = rng.sample(range(n), 2)
            cluster.at(
                rng.uniform(0.1, duration - 3.0),
                lambda a=a, b=b: cluster.break_link(a, b, rng.uniform(0.01, 0.5)),
            )
    if "join" in faults:
        cluster.at(rng.uniform(0.5, 3.0), lambda: cluster.join(100 + seed % 7, [0, 1, 2]))
    cluster.run_until(duration + 12.0)
    return cluster


def staying_report(cluster: TokenRingCluster) -> CheckReport:
    """Integrity, order and agreement among the processes still in the view."""
    staying = [p for p in cluster.staying() if cluster.procs[p].role.value != "joining"]
    return check({p: cluster.delivered[p] for p in staying})


def agreement_violations(cluster: TokenRingCluster) -> list[str]:
    """Deterministic agreement among the processes that stay in the view: the
    bootstrap members that stay delivered the same sequence, and every joiner
    delivered a suffix of it."""
    staying = [p for p in cluster.staying() if cluster.procs[p].role.value != "joining"]
    if not staying:
        return []
    longest = max((cluster.delivered[p] for p in staying), key=len)
    problems: list[str] = []
    for p in staying:
        seq = cluster.delivered[p]
        joined = p >= 100
        if joined:
            if seq and longest[len(longest) - len(seq) :] != seq:
                problems.append(f"joiner {p} delivered a sequence that is not a suffix")
        elif seq != longest:
            problems.append(f"process {p} delivered {len(seq)} events, another {len(longest)}")
    return problems
