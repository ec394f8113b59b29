"""Random fault schedules for token-ring simulations (shared by tests and scripts)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import attrs
from epto.transports.simulation import SimulationObserver, TokenRingCluster

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
        _flap(cluster, rng, n, shortest=0.3, until=duration - 3.0)
    if "partition" in faults:
        _partition(cluster, rng, n)
    if "breaks" in faults:
        _breaks(cluster, rng, n, until=duration - 3.0)
    if "join" in faults:
        cluster.at(rng.uniform(0.5, 3.0), lambda: cluster.join(100 + seed % 7, [0, 1, 2]))
    cluster.run_until(duration + 12.0)
    return cluster


def _flap(
    cluster: TokenRingCluster, rng: random.Random, n: int, *, shortest: float, until: float
) -> None:
    """A random member disconnected and reconnected every period until ``until``."""
    flapper = rng.randrange(n)
    period = rng.uniform(shortest, 1.5)
    t = rng.uniform(0.2, 1.0)
    while t < until:
        cluster.at(t, lambda: cluster.disconnect(flapper))
        cluster.at(t + period, lambda: cluster.reconnect(flapper))
        t += 2 * period


def _partition(cluster: TokenRingCluster, rng: random.Random, n: int) -> None:
    """A random cut of the members, healed later."""
    members = list(range(n))
    rng.shuffle(members)
    cut = rng.randrange(1, n)
    start = rng.uniform(0.5, 3.0)
    end = start + rng.uniform(0.2, 6.0)
    cluster.partition([members[:cut], members[cut:]], start=start, end=end)


def _breaks(cluster: TokenRingCluster, rng: random.Random, n: int, *, until: float) -> None:
    """3 to 14 scripted breaks of random links before ``until``."""
    for _ in range(rng.randrange(3, 15)):
        a, b = rng.sample(range(n), 2)
        cluster.at(
            rng.uniform(0.1, until),
            lambda a=a, b=b: cluster.break_link(a, b, rng.uniform(0.01, 0.5)),
        )


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


FAULTS = (
    "isolate-holder",
    "crash-holder",
    "crash",
    "flap",
    "partition",
    "breaks",
    "join",
    "second-change",
)


def adversarial_run(
    seed: int, settle: float = 10.0, observers: Iterable[SimulationObserver] = ()
) -> tuple[TokenRingCluster, dict[str, object]]:
    """One schedule of the offline campaign (scripts/token_ring_schedules.py
    ``--adversarial``): every parameter is drawn from ``seed``.

    3 to 9 members; a link-break rate (probability that a send breaks its
    link, losing what is in flight and what is sent while it is down) from 0
    to 0.2, with breaks of 1 to 50 ms; the smallest ``log_retention`` the
    configuration allows in one run of three (it equals a small
    ``max_unstable_messages``); two to four of :data:`FAULTS`: the token holder
    cut off while it holds unsequenced messages and returned before
    ``exclude_timeout``, a holder crash, any crash, a flapping member, a
    partition healed later, scripted link breaks, a join, and a second
    member cut off and returned (a second configuration change). Breaks stop
    at the end of the fault phase; the run then lasts ``settle`` more
    seconds, so that validity (every message of a member that stays in the
    view delivered by every such member) can be checked."""
    rng = random.Random(seed)
    n = rng.choice([3, 4, 5, 5, 7, 9])
    cfg = TokenRingConfig()
    if rng.random() < 1 / 3:
        window = rng.choice([8, 16, 64])
        cfg = attrs.evolve(cfg, max_unstable_messages=window, log_retention=window)
    loss = rng.choice([0.0, rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.2)])
    cluster = TokenRingCluster(
        n,
        cfg,
        seed=seed,
        delay=(0.0005, rng.choice([0.002, 0.01, 0.03])),
        loss=loss,
        break_duration=rng.uniform(0.001, 0.05),
    )
    for observer in observers:
        cluster.add_observer(observer)
    faults_end = rng.uniform(3.0, 6.0)
    count = 0
    t = 0.05
    # A window of a few messages sequences a few dozen per second: offer
    # what the group can order, so that the run can end settled.
    rate = rng.choice([20.0, 80.0, 300.0]) if cfg.max_unstable_messages > 16 else 20.0
    while t < faults_end:
        cluster.broadcast_at(t, rng.randrange(n), b"m%d" % count)
        count += 1
        t += rng.expovariate(rate)
    faults = rng.sample(FAULTS, k=rng.randint(2, 4))
    cut: dict[str, int] = {}

    def holder(then: Callable[[int], None], need_pool: bool) -> Callable[[], None]:
        def find() -> None:
            for p, proc in cluster.procs.items():
                busy = not need_pool or proc.memory_sizes()["pool"] > 0
                if proc.holds_token() and busy and p not in cluster.crashed:
                    then(p)
                    return
            if cluster.now < faults_end:
                cluster.at(cluster.now + 0.0003, find)

        return find

    def isolate(p: int) -> None:
        cut["isolated"] = p
        cluster.disconnect(p)
        back = rng.uniform(0.3, 0.8) * cfg.exclude_timeout
        cluster.at(cluster.now + back, lambda: cluster.reconnect(p))

    if "isolate-holder" in faults:
        cluster.at(rng.uniform(0.2, 1.5), holder(isolate, need_pool=True))
    if "crash-holder" in faults:
        cluster.at(rng.uniform(0.5, 2.0), holder(cluster.crash, need_pool=False))
    if "crash" in faults:
        victim = rng.randrange(n)
        cluster.at(rng.uniform(0.5, 3.0), lambda: cluster.crash(victim))
    if "second-change" in faults:
        other = rng.randrange(n)
        start = rng.uniform(1.0, 3.0)
        cluster.at(start, lambda: cluster.disconnect(other))
        cluster.at(start + rng.uniform(0.4, 1.2), lambda: cluster.reconnect(other))
    if "flap" in faults:
        _flap(cluster, rng, n, shortest=0.2, until=faults_end)
    if "partition" in faults:
        _partition(cluster, rng, n)
    if "breaks" in faults:
        _breaks(cluster, rng, n, until=faults_end)
    if "join" in faults:
        contacts = rng.sample(range(n), k=min(n, 2))
        cluster.at(rng.uniform(0.5, 3.0), lambda: cluster.join(100 + seed % 7, contacts))

    def calm() -> None:
        cluster.loss = 0.0

    cluster.at(faults_end, calm)
    end = max(faults_end + 6.0, 12.0) + settle
    cluster.run_until(end)
    params: dict[str, object] = {
        "n": n,
        "loss": round(loss, 3),
        "window": cfg.max_unstable_messages,
        "faults": faults,
    }
    return cluster, params


def campaign_violations(cluster: TokenRingCluster) -> list[str]:
    """Order, integrity, agreement and validity among the members that stay in
    the view (see :func:`adversarial_run`); every process that ever ran, for
    order and integrity (the default ``k`` never rolls back a delivery)."""
    found: list[str] = []
    everyone = check(dict(cluster.delivered))
    if everyone.order_violations or everyone.integrity_violations:
        found.append(everyone.summary())
    report = staying_report(cluster)
    if not report.ok:
        found.append(report.summary())
    found += agreement_violations(cluster)
    latest = max((proc.config for proc in cluster.procs.values()), key=lambda c: c.instance)
    alive = [p for p in cluster.staying_members() if p in latest.members]
    if 2 * len(alive) <= len(latest.members):
        # No majority of the latest view is alive and in it (crashes, members
        # that fell further behind than log_retention): the group cannot
        # change configuration any more, and only safety is promised.
        return found
    staying = [p for p in alive if p < 100]
    sent = [e for e in cluster.broadcasts if e[0] in staying]
    for p in staying:
        missing = set(sent) - set(cluster.delivered[p])
        if missing:
            found.append(f"process {p} missed {len(missing)} messages of staying sources")
    return found
