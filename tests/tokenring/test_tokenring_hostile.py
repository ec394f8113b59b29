"""Hostile peers against a token ring: well-formed messages with extreme values
in every field never stop, split or bloat the honest members (issue: one
frame froze a ring by claiming ``stable = 2**55``)."""

from __future__ import annotations

import random

import pytest
from epto.transports.simulation import TokenRingCluster
from hostile import hostile_message

from epto.tokenring import TokenRingConfig, TokenRingProcess, TokenState
from epto.tokenring._messages import Order, Token

MEMBERS = (0, 1, 2)


def test_a_token_claiming_stable_2_55_from_a_non_member_is_refused() -> None:
    cluster = TokenRingCluster(3, TokenRingConfig(), seed=1)
    claim = TokenState(
        instance=0, hop=1 << 40, next_seq=1 << 55, low=1 << 55, stable=1 << 55, batches=()
    )
    for t in (0.5, 0.6):
        for pid in MEMBERS:
            proc = cluster.procs[pid]
            cluster.at(t, lambda proc=proc: proc.receive(666, Token(state=claim), cluster.now))
            # The same claim under a member's id is out of range.
            cluster.at(t, lambda proc=proc: proc.receive(1, Order(state=claim), cluster.now))
    t, i = 0.05, 0
    while t < 3.0:
        cluster.broadcast_at(t, i % 3, b"m%d" % i)
        t += 0.01
        i += 1
    cluster.run_until(5.0)
    for pid in MEMBERS:
        proc = cluster.procs[pid]
        assert proc.rejected["not-a-member"] == 2
        assert proc.rejected["out-of-range"] >= 1
        assert proc.statistics().stable < 1 << 20
        assert cluster.delivered[pid] == cluster.delivered[0]
    assert len(cluster.delivered[0]) == len(cluster.broadcasts)


def hostile_run(
    seed: int, steps: int, n: int = 3, *, open_group: bool = False
) -> tuple[TokenRingCluster, int]:
    """A group of ``n`` under ``steps`` hostile messages from outsiders (ids
    that are not members, some of them huge), one every 0.5 ms of virtual time
    on top of an honest workload. With ``open_group`` anyone may join (the
    outsiders' joins are admitted, and then they are members); otherwise
    ``allowed_joiners`` keeps them out. Returns the cluster and the steps sent."""
    rng = random.Random(seed)
    members = tuple(range(n))
    config = TokenRingConfig(allowed_joiners=None if open_group else members)
    cluster = TokenRingCluster(n, config, seed=seed, delay=(0.0005, 0.003))
    t, i = 0.02, 0
    while t < 0.02 + steps * 0.0005:
        cluster.broadcast_at(t, i % n, b"m%d" % i)
        t += 0.005
        i += 1
    sent = 0
    for k in range(steps):
        target = cluster.procs[rng.randrange(n)]
        sender = rng.choice([n + 1, 666, 1 << 40, (1 << 64) - 1, rng.randrange(n + 1, 1 << 64)])
        message = hostile_message(rng, members)
        cluster.at(
            0.02 + k * 0.0005,
            lambda target=target, sender=sender, message=message: target.receive(
                sender, message, cluster.now
            ),
        )
        sent += 1
    cluster.run_until(0.02 + steps * 0.0005 + 3.0)
    return cluster, sent


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_outsiders_with_extreme_values_never_stop_split_or_bloat_the_ring(seed: int) -> None:
    cluster, sent = hostile_run(seed, steps=4000)
    procs = [cluster.procs[p] for p in MEMBERS]
    assert all(isinstance(p, TokenRingProcess) and p.role.value == "core" for p in procs)
    assert sum(sum(p.rejected.values()) for p in procs) >= sent * 0.9
    # Same sequence everywhere, every honest broadcast delivered, no view
    # change (nothing an outsider sends reaches the protocol).
    assert all(cluster.delivered[p] == cluster.delivered[0] for p in MEMBERS)
    assert len(cluster.delivered[0]) == len(cluster.broadcasts)
    for p in procs:
        sizes = p.memory_sizes()
        assert sizes["pool"] <= 5 and sizes["assignments"] <= 5, sizes
        assert sizes["log"] <= len(cluster.broadcasts)
        assert p.config.members == MEMBERS
        assert p.statistics().light_changes == 0 and p.statistics().full_changes == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_in_an_open_group_outsiders_join_but_never_crash_bloat_or_outnumber(seed: int) -> None:
    # Anyone may join an open group, and a member that lies is beyond what a
    # crash-tolerant protocol promises: what holds is that nothing raises and
    # joiners never outnumber the members.
    cluster, _ = hostile_run(seed, steps=4000, open_group=True)
    for pid in MEMBERS:
        p = cluster.procs[pid]
        # What a member broadcasts is held until sequenced, as any member's
        # broadcasts are; the order's own state stays small.
        assert p.memory_sizes()["assignments"] <= 200
        assert len(p.config.members) < 2 * len(MEMBERS)
