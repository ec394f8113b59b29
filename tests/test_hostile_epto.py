"""Hostile peers against EpTO: balls of well-formed events with extreme values
in every field, sent by an outsider in an unsealed, unsigned group, never stop
a process, make it deliver an event twice, break the order of the members'
events or keep them from being delivered (docs/security.md).

Without a key the outsider's own events are accepted and delivered (anyone
may broadcast into an unsealed group), and it may send different versions
of one of its ids, which processes then order differently: total order is a
promise about events whose source follows the protocol. Forging the
*members'* events is what signatures stop (tests/test_secure_cluster.py)."""

from __future__ import annotations

import random

import pytest
from epto.transports.simulation import Cluster

from epto import Event
from epto.check import check
from epto.epidemic import Process
from epto.wire import LayeredBall

EXTREMES = (0, 1, 7, 1 << 31, 1 << 32, (1 << 48) - 1, (1 << 63) - 1, (1 << 64) - 1)


def _n(rng: random.Random) -> int:
    return rng.choice(EXTREMES) if rng.random() < 0.7 else rng.randrange(1 << 64)


def hostile_ball(rng: random.Random) -> LayeredBall:
    entries = []
    for _ in range(rng.randrange(1, 4)):
        event = Event(
            source=rng.choice([666, (1 << 32) + _n(rng) % (1 << 32), (1 << 64) - 1]),
            seq=_n(rng),
            ts=_n(rng),
            payload=rng.randbytes(rng.choice([0, 8, 64])),
            signature=rng.choice([b"", rng.randbytes(64)]),
        )
        entries.append((event.id, (event, rng.choice([0, 1, 5, 65535, _n(rng) % 65536]))))
    return LayeredBall(entries)


def hostile_run(seed: int, steps: int, n: int = 5) -> tuple[Cluster, int]:
    """``n`` EpTO processes under ``steps`` hostile balls from outsiders, one
    every 2 ms of virtual time (in ticks: the simulator's PlanetLab-free
    default latencies), on top of an honest workload."""
    rng = random.Random(seed)
    cluster = Cluster(n, seed=seed)
    delta = cluster.round_interval
    t, i = delta, 0
    while t < steps * delta / 10:
        cluster.broadcast_at(t, i % n, b"m%d" % i)
        t += delta / 2
        i += 1
    for k in range(steps):
        target = cluster.processes[rng.randrange(n)]
        assert isinstance(target, Process)
        ball = hostile_ball(rng)
        cluster.call_at(
            delta + k * delta / 10,
            lambda target=target, ball=ball: target.receive(
                rng.choice([666, 1 << 40, (1 << 64) - 1]), ball, cluster.now
            ),
        )
    cluster.run_until(steps * delta / 10 + 60 * delta)
    return cluster, steps


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_outsiders_with_extreme_values_never_stop_or_split_epto(seed: int) -> None:
    cluster, _ = hostile_run(seed, steps=3000)
    honest = set(cluster.broadcasts)
    sequences = cluster.recorder.sequences
    # Every id at most once, everywhere (a later copy of a delivered id is
    # refused whatever timestamp it claims).
    assert not check(sequences).integrity_violations
    members_events = {p: [e for e in seq if e in honest] for p, seq in sequences.items()}
    report = check(members_events)
    assert not report.order_violations and not report.integrity_violations
    for pid, proc in cluster.processes.items():
        assert isinstance(proc, Process)
        # An outsider's event with a high timestamp (below the ceiling) that
        # gets delivered makes members' older undelivered events stale: it
        # can cost holes (agreement is probabilistic, and a group key keeps
        # outsiders out), never order or integrity.
        assert len(honest & set(sequences[pid])) >= 0.95 * len(honest)
        rejected = proc.statistics().rejected
        assert sum(rejected.values()) > 0, rejected
