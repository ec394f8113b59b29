"""Token rings in the virtual-time network (``epto.transports.simulation``): the
same scheduler, latency models, loss, partitions, churn, observers and
checker as EpTO, over reliable FIFO links."""

from __future__ import annotations

import pytest
from epto.transports.simulation import (
    Cluster,
    PlanetLabLatency,
    SimulationSpec,
    TokenRingCluster,
    UniformLatency,
    run_simulation,
)

from epto import ConfigurationError, LocalProtocolError, ProcessId
from epto.tokenring import Role, TokenRingConfig, TokenRingProcess

PLANETLAB = PlanetLabLatency()
# Ticks (milliseconds); timeouts above the largest PlanetLab latency (704 ms).
TICKS = SimulationSpec(processes=7).tokenring_config(PLANETLAB)


def _ring(proc: object) -> TokenRingProcess:
    assert isinstance(proc, TokenRingProcess)
    return proc


def _steady(cluster: Cluster, start: float, end: float, every: float) -> None:
    t, i = start, 0
    while t < end:
        cluster.broadcast_at(t, i % 7, b"m%d" % i)
        t += every
        i += 1


def test_planetlab_loss_and_partition_majority_progresses_minority_waits() -> None:
    # Loss 0.2% of sends: heartbeats go no more often than suspicion needs,
    # so the run sends fewer messages than it did and 0.05% broke no link.
    cluster = Cluster(7, seed=4, config=TICKS, latency=PLANETLAB, loss=0.002, quantum=1.0)
    assert cluster.mode == "token-ring"
    minority, majority = [0, 1, 2], [3, 4, 5, 6]
    _steady(cluster, 100.0, 14_000.0, 90.0)
    cluster.partition([minority, majority], start=4_000.0, end=12_000.0)
    cluster.run_until(12_000.0)
    sent = cluster.broadcasts
    # Broadcast by the majority well inside the partition: delivered there.
    inside = [e for e, (src, at) in sent.items() if 5_000 < at < 8_000 and src in majority]
    assert inside
    for p in majority:
        assert set(inside) <= set(cluster.recorder.sequences[p])
    # The minority cannot complete a change nor gather k holders: it delivers
    # nothing broadcast during the partition, so no conflicting order.
    during = {e for e, (_, at) in sent.items() if 4_500 < at < 12_000}
    for p in minority:
        assert not during & set(cluster.recorder.sequences[p])
    assert cluster.check().ok
    net = cluster.network_statistics()
    assert net.cut > 0 and net.lost > 0
    # Healed: the minority catches up and everyone agrees on one sequence.
    cluster.run_until(30_000.0)
    report = cluster.check()
    assert report.ok, report.summary()
    sequences = [cluster.recorder.sequences[p] for p in cluster.processes]
    assert all(s == sequences[0] for s in sequences)
    assert len(sequences[0]) == len(sent)
    stats = _ring(cluster.processes[3]).statistics()
    assert stats.light_changes >= 1  # the minority was demoted, then readmitted
    assert stats.full_changes == 0  # shorter than exclude_timeout: nobody excluded


def test_links_are_fifo_with_random_latencies() -> None:
    cluster = Cluster(4, seed=1, config=TokenRingConfig(), latency=UniformLatency(0.0, 0.05))
    seen: dict[tuple[ProcessId, ProcessId], list[int]] = {}
    # The run loop drives each process through its endpoint adapter, whose
    # receive is the process's own bound method: wrap it there.
    for pid, proc in cluster.endpoints.items():
        original = proc.receive

        def receive(sender: ProcessId, message: object, now: float, *, me=pid, inner=original):
            # Broadcasts travel as Data, or DataBatch when several were held
            # together (broadcast_hold).
            kind = type(message).__name__
            events = getattr(message, "events", ()) if kind == "DataBatch" else ()
            if kind == "Data":
                events = (message.event,)  # type: ignore[attr-defined]
            for event in events:
                seen.setdefault((sender, me), []).append(event.seq)
            inner(sender, message, now)  # type: ignore[arg-type]

        proc.receive = receive  # type: ignore[method-assign]
    for i in range(200):
        cluster.broadcast_at(0.001 * i, i % 4, b"x")
    cluster.run_until(2.0)
    assert len(seen) == 12
    for seqs in seen.values():
        assert seqs == sorted(seqs) and len(seqs) == 50  # in order, none lost
    assert cluster.check().ok


def test_holder_crashes_and_newcomers_join_through_contacts() -> None:
    cluster = Cluster(5, seed=2, config=TICKS, latency=PLANETLAB, loss=0.001, quantum=1.0)
    crashed: list[ProcessId] = []

    def crash_holder() -> None:
        holder = next((p for p, q in cluster.processes.items() if _ring(q).holds_token()), None)
        if holder is None:  # the token is in flight
            cluster.call_at(cluster.now + 1.0, crash_holder)
            return
        crashed.append(holder)
        cluster.remove_process(holder)

    t = 50.0
    while t < 20_000.0:
        cluster.call_at(
            t,
            lambda: [
                cluster.broadcast(p, b"w")
                for p in list(cluster.processes)[:2]
                if cluster.can_broadcast(p)
            ],
        )
        t += 200.0
    cluster.call_at(2_000.0, crash_holder)
    cluster.call_at(3_000.0, lambda: cluster.add_process(100))  # contacts drawn from the view
    cluster.call_at(4_000.0, lambda: cluster.add_process(101, contacts=[0, 1, 2, 3, 4]))
    cluster.run_until(60_000.0)
    assert len(crashed) == 1
    report = cluster.check()
    assert report.ok, report.summary()
    for pid in (100, 101):
        joiner = _ring(cluster.processes[pid])
        assert joiner.role in (Role.CORE, Role.EXTERNAL)
        assert crashed[0] not in joiner.config.members
        assert cluster.recorder.sequences[pid]
    # Every live member delivered the same suffix from the joiners' entry on.
    tail = cluster.recorder.sequences[100]
    for p in cluster.processes:
        seq = cluster.recorder.sequences[p]
        assert seq[len(seq) - len(tail) :] == tail
    assert _ring(cluster.processes[101]).statistics().full_changes >= 1


def test_scheduled_churn_crashes_members_and_joins_new_identities() -> None:
    cluster = Cluster(6, seed=3, config=TokenRingConfig(), latency=UniformLatency(0.001, 0.01))
    cluster.schedule_churn(1, every=2.0, stop=5.0)  # two crashes, two joins
    t = 0.01
    while t < 9.0:
        for p in (0, 1, 2, 3, 4, 5, 6, 7, 8):
            cluster.broadcast_at(t, p, b"c")
        t += 0.25
    cluster.run_until(25.0)
    assert len(cluster.left_at) == 2 and len(cluster.joined_at) == 8
    assert cluster.quiescent()
    live = [p for p in cluster.processes if cluster.can_broadcast(p)]
    assert len(live) == 6
    report = cluster.check()
    assert report.ok, report.summary()
    assert max(len(s) for s in cluster.recorder.sequences.values()) > 100


def test_run_simulation_token_ring_with_partition_churn_and_loss() -> None:
    spec = SimulationSpec(
        mode="token-ring",
        processes=7,
        rounds=40,
        broadcast_rate=0.2,
        loss=0.001,
        churn=0.05,
        partition=0.3,
        partition_start=5,
        partition_rounds=20,
        seed=3,
    )
    result = run_simulation(spec)
    summary = result.summary()
    assert summary["order_violations"] == summary["integrity_violations"] == 0
    assert summary["holes"] == 0 and summary["settled"] == "complete"
    assert summary["events"] > 40 and summary["events_delivered"] > 0
    assert summary["network"]["cut"] > 0
    assert summary["processes_total"] > 7  # churn joined new identities
    params = summary["parameters"]
    assert params["mode"] == "token-ring" and params["k"] == 4
    assert params["iview_changes"] >= 1 and params["view_changes"] >= 1


def test_token_ring_options_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        Cluster(3, config=TokenRingConfig(), drift=0.01)
    with pytest.raises(ConfigurationError):
        run_simulation(SimulationSpec(mode="token-ring", pss="cyclon"))
    with pytest.raises(ConfigurationError):
        SimulationSpec(partition=1.5).validate()
    ring = Cluster(3, config=TokenRingConfig())
    with pytest.raises(LocalProtocolError):
        ring.add_process(phase=1.0)  # an EpTO option
    with pytest.raises(LocalProtocolError):
        Cluster(3).add_process(contacts=[0])  # a token-ring option
    assert ring.add_process() == 3  # joins through live members


def test_compatibility_cluster_keeps_crashed_processes_in_view() -> None:
    cluster = TokenRingCluster(4, TokenRingConfig(), seed=1)
    cluster.at(0.5, lambda: cluster.crash(3))
    for i in range(40):
        cluster.broadcast_at(0.05 * i, i % 4, b"x")
    cluster.run_until(8.0)
    assert cluster.crashed == {3} and 3 in cluster.procs
    assert cluster.procs[0].statistics().full_changes >= 1  # 3 was excluded
    assert cluster.staying() == [0, 1, 2]
    assert all(cluster.delivered[p] == cluster.delivered[0] for p in (1, 2))
    assert cluster.position and len(cluster.latencies([0])) == len(cluster.delivered[0])


def test_a_broken_link_loses_what_is_in_flight_and_the_ring_repairs_it() -> None:
    cluster = Cluster(3, seed=1, config=TokenRingConfig(), latency=UniformLatency(0.1, 0.1))
    cluster.run_until(1.0)
    before = cluster.network_statistics()
    eid = cluster.broadcast(0, b"x")  # Data to 1 and 2, due at 1.1
    cluster.call_at(1.05, lambda: cluster.break_link(0, 1, 0.2))
    cluster.run_until(1.2)
    after = cluster.network_statistics()
    assert after.lost > before.lost
    assert eid not in cluster.recorder.sequences[1]
    cluster.run_until(5.0)  # fetched or retransmitted once the link is back
    assert all(eid in seq for seq in cluster.recorder.sequences.values())
    assert cluster.check().ok


def test_a_join_through_the_last_member_reaches_the_coordinator() -> None:
    # The contact is last in view order: on its own it would wait
    # change_timeout x 10 before proposing. The newcomer learns the view from
    # its contact and asks the coordinator directly.
    config = TokenRingConfig()
    cluster = Cluster(10, seed=1, config=config, latency=UniformLatency(0.002, 0.01))
    cluster.run_until(1.0)
    cluster.add_process(100, contacts=[9])
    newcomer = _ring(cluster.processes[100])
    t = 1.0
    while newcomer.role is Role.JOINING and t < 1.0 + 2 * config.change_timeout:
        t += 0.01
        cluster.run_until(t)
    assert newcomer.role is Role.EXTERNAL
    cluster.broadcast_at(t + 0.01, 100, b"from the newcomer")
    cluster.broadcast_at(t + 0.01, 3, b"to the newcomer")
    cluster.run_until(t + 2.0)
    report = cluster.check()
    assert report.ok, report.summary()
    assert all(len(cluster.recorder.sequences[p]) == 2 for p in cluster.processes)


def test_two_newcomers_at_once_enter_by_one_full_change() -> None:
    config = TokenRingConfig()
    cluster = Cluster(5, seed=2, config=config, latency=UniformLatency(0.002, 0.01))
    cluster.run_until(1.0)
    before = _ring(cluster.processes[0]).statistics().full_changes
    cluster.add_process(100, contacts=[4])
    cluster.add_process(101, contacts=[3])
    cluster.run_until(1.0 + 2 * config.change_timeout)
    for pid in (100, 101):
        assert _ring(cluster.processes[pid]).role is Role.EXTERNAL
    # Both joins reach the coordinator before it proposes: one change admits both.
    assert _ring(cluster.processes[0]).statistics().full_changes == before + 1
    assert {100, 101} <= set(_ring(cluster.processes[0]).config.members)
    cluster.broadcast_at(2.0, 100, b"a")
    cluster.broadcast_at(2.0, 101, b"b")
    cluster.broadcast_at(2.0, 0, b"c")
    cluster.run_until(4.0)
    report = cluster.check()
    assert report.ok, report.summary()
    sequences = [cluster.recorder.sequences[p] for p in cluster.processes]
    assert all(s == sequences[0] and len(s) == 3 for s in sequences)
