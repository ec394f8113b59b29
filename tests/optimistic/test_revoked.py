"""Every optimistic delivery ends (docs/optimistic.md, *The three tags*): with
``FINAL`` when the message is in the total order, with ``REVOKED`` when its
source left the view before the group sequenced it. A source that crashes
while its links break leaves messages that nobody can sequence (an earlier
one of its messages reached nobody): before revocation, members that had
delivered them optimistically kept them pending for ever."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from epto.transports.simulation import SimulationObserver, TokenRingCluster

from epto import Delivery, DeliveryTag, Event, EventId, LocalProtocolError, ProcessId
from epto.log import DeliveryLogWriter
from epto.optimistic import OptimisticConfig
from epto.tokenring import TokenRingConfig


class Outcomes(SimulationObserver):
    """Per member and tag, the ids delivered; records every breach of the
    contract: an outcome without an optimistic delivery before it, or two
    outcomes for one optimistic delivery."""

    def __init__(self) -> None:
        self.by: dict[ProcessId, dict[DeliveryTag, list[EventId]]] = {}
        self.breaches: list[str] = []

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        eid = delivery.event.id
        mine = self.by.setdefault(pid, {})
        seen = mine.setdefault(delivery.tag, [])
        if delivery.tag is DeliveryTag.REVOKED:
            if eid not in mine.get(DeliveryTag.OPTIMISTIC, []):
                self.breaches.append(f"{pid}: {eid} revoked, never optimistic")
            if eid in mine.get(DeliveryTag.FINAL, []) or eid in seen:
                self.breaches.append(f"{pid}: {eid} revoked after an outcome")
        if delivery.tag is DeliveryTag.FINAL and eid in mine.get(DeliveryTag.REVOKED, []):
            self.breaches.append(f"{pid}: {eid} final after revoked")
        seen.append(eid)

    def ids(self, pid: ProcessId, tag: DeliveryTag) -> set[EventId]:
        return set(self.by.get(pid, {}).get(tag, []))


SEEDS = [4, 8, 12, 19, 20, 24]


def _crash_run(seed: int) -> tuple[TokenRingCluster, Outcomes]:
    """Four members, 10% link breaks; member 3 sends a quick run of 20
    messages and crashes within 12 ms, while the others send 20 between them."""
    rng = random.Random(seed)
    config = TokenRingConfig(optimistic=OptimisticConfig(planner="none"))
    cluster = TokenRingCluster(4, config, seed=seed, delay=(0.001, 0.005), loss=0.1)
    outcomes = Outcomes()
    cluster.add_observer(outcomes)
    for i in range(20):
        cluster.broadcast_at(1.0 + i * 0.0005, 3, b"m%d" % i)
    for i in range(20):
        cluster.broadcast_at(1.0 + i * 0.003, rng.randrange(3), b"x%d" % i)
    cluster.at(1.0 + rng.uniform(0.0, 0.012), lambda: cluster.crash(3))
    cluster.run_until(20.0)
    return cluster, outcomes


@pytest.mark.parametrize("seed", SEEDS)
def test_an_optimistic_message_whose_source_crashed_ends_at_every_staying_member(
    seed: int,
) -> None:
    cluster, outcomes = _crash_run(seed)
    staying = cluster.staying_members()
    assert sorted(staying) == [0, 1, 2]
    assert outcomes.breaches == []
    finals = set().union(*(outcomes.ids(p, DeliveryTag.FINAL) for p in staying))
    revoked = set().union(*(outcomes.ids(p, DeliveryTag.REVOKED) for p in staying))
    assert not finals & revoked  # one outcome per message, the same everywhere
    for p in staying:
        proc = cluster.procs[p]
        assert 3 not in proc.config.members
        optimistic = outcomes.ids(p, DeliveryTag.OPTIMISTIC)
        ended = outcomes.ids(p, DeliveryTag.FINAL) | outcomes.ids(p, DeliveryTag.REVOKED)
        assert optimistic <= ended
        assert proc.memory_sizes()["tentative"] == 0
        stats = proc.statistics().optimistic
        assert stats is not None
        assert stats.revoked == len(outcomes.ids(p, DeliveryTag.REVOKED))
        assert all(source == 3 for source, _ in outcomes.ids(p, DeliveryTag.REVOKED))
    # The final orders agree (the token ring's agreement).
    assert len({tuple(outcomes.by[p].get(DeliveryTag.FINAL, [])) for p in staying}) == 1


def test_a_crash_seed_revokes_at_the_staying_members_that_delivered_them() -> None:
    # Seed 3: member 3's later messages follow one that reached nobody, so no
    # holder can sequence them; without revocation they stayed optimistic,
    # never final, at the members that had them (all three). (Seeds 8, then
    # 72, showed it until changes of the token ring's loss repairs changed
    # the run's timing: the fast repairs, then the token's copies on a lossy
    # network.)
    _, outcomes = _crash_run(3)
    for p in (0, 1, 2):
        revoked = outcomes.ids(p, DeliveryTag.REVOKED)
        assert revoked and all(source == 3 for source, _ in revoked)
        assert not revoked & outcomes.ids(p, DeliveryTag.FINAL)


def test_a_revoked_delivery_is_not_logged_as_a_step_of_the_order(tmp_path: Path) -> None:
    event = Event(source=3, seq=1, ts=0, payload=b"m1")
    assert not Delivery(event=event, tag=DeliveryTag.REVOKED).in_total_order
    with (
        DeliveryLogWriter(tmp_path, 1) as log,
        pytest.raises(LocalProtocolError, match="revoked"),
    ):
        log.append(Delivery(event=event, tag=DeliveryTag.REVOKED), delivered_at=1)
