"""EpTO processes crashed and restarted under their own ids, in seeded
round-based runs: integrity and total order hold over every member's whole
delivery history (all its starts together), and what a restarted member
broadcasts reaches every member when nothing is lost.

A restart is a new :class:`epto.epidemic.Process` with the same id, the next
incarnation, and ``resume_after`` the last timestamp its earlier start
delivered (what its delivery log holds): docs/node.md, *Restart*.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from epto import Config
from epto.check import check
from epto.epidemic import Process
from epto.epidemic._sampler import FullView


def _run(
    n: int, seed: int, loss: float, clock: str, crashes: list[tuple[int, int, int]]
) -> tuple[dict[int, list[tuple[int, int]]], set[tuple[int, int]], set[tuple[int, int]]]:
    """Rounds of ``n`` processes; ``crashes`` are (pid, round, rounds down;
    0: started again in the round it crashed).

    Returns every member's deliveries over all its starts, every event
    broadcast, and the events broadcast by a start after a restart."""
    config = Config(fanout=n - 1, ttl=4, round_interval=1.0, clock=clock)  # type: ignore[arg-type]
    rng = random.Random(seed)
    members = list(range(n))

    def start(pid: int, incarnation: int, now: float) -> Process:
        return Process(
            pid,
            config,
            peers=FullView(pid, members),
            rng=random.Random(rng.getrandbits(32)),
            now=now,
            incarnation=incarnation,
        )

    procs: dict[int, Process | None] = {pid: start(pid, 1, 0.0) for pid in members}
    incarnations = dict.fromkeys(members, 1)
    delivered: dict[int, list[tuple[int, int]]] = {pid: [] for pid in members}
    last_ts = dict.fromkeys(members, 0)
    down_until: dict[int, int] = {}
    broadcast: set[tuple[int, int]] = set()
    after_restart: set[tuple[int, int]] = set()
    crash_at = {(pid, r): down for pid, r, down in crashes}
    rounds = 40
    for r in range(1, rounds + 1):
        now = float(r)
        for pid in members:
            down = crash_at.get((pid, r))
            if down is not None and procs[pid] is not None:
                procs[pid] = None  # SIGKILL: its state is gone, its log stays
                down_until[pid] = r + down
            if procs[pid] is None and down_until.get(pid) == r:
                incarnations[pid] += 1
                proc = start(pid, incarnations[pid], now - 1.0)
                proc.resume_after(last_ts[pid])
                procs[pid] = proc
        for pid, proc in procs.items():
            if proc is not None and r <= rounds - 15 and rng.random() < 0.5:
                eid = proc.broadcast(b"%d/%d" % (pid, r), now)
                broadcast.add(eid)
                if incarnations[pid] > 1:
                    after_restart.add(eid)
        outbox = []
        for pid, proc in procs.items():
            if proc is None:
                continue
            proc.handle_timer(now)
            outbox.extend((pid, dest, ball) for dest, ball in proc.messages_to_send())
        for sender, dest, ball in outbox:
            target = procs.get(dest)
            if target is not None and rng.random() >= loss:
                target.receive(sender, ball, now)
        for pid, proc in procs.items():
            if proc is None:
                continue
            for delivery in proc.deliveries():
                delivered[pid].append(delivery.event.id)
                if delivery.in_total_order:
                    last_ts[pid] = max(last_ts[pid], delivery.event.ts)
    return delivered, broadcast, after_restart


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    n=st.integers(3, 7),
    seed=st.integers(0, 2**32),
    loss=st.sampled_from([0.0, 0.1, 0.3]),
    clock=st.sampled_from(["logical", "global"]),
    crashes=st.lists(
        st.tuples(st.integers(0, 6), st.integers(2, 20), st.integers(0, 6)), max_size=4
    ),
)
def test_restarts_keep_integrity_and_total_order(
    n: int, seed: int, loss: float, clock: str, crashes: list[tuple[int, int, int]]
) -> None:
    crashes = [(pid % n, r, down) for pid, r, down in crashes]
    delivered, broadcast, _ = _run(n, seed, loss, clock, crashes)
    report = check(delivered, broadcast=broadcast)
    assert report.ok, report.summary()


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    n=st.integers(3, 6),
    seed=st.integers(0, 2**32),
    crash_round=st.integers(3, 12),
    down=st.integers(0, 5),
    clock=st.sampled_from(["logical", "global"]),
)
def test_a_restarted_member_is_heard_by_everyone(
    n: int, seed: int, crash_round: int, down: int, clock: str
) -> None:
    delivered, broadcast, after = _run(n, seed, 0.0, clock, [(0, crash_round, down)])
    assert after, "the restarted member broadcast nothing"
    for pid, ids in delivered.items():
        assert after <= set(ids), f"member {pid} missed {sorted(after - set(ids))[:3]}"
    assert check(delivered, broadcast=broadcast).ok
