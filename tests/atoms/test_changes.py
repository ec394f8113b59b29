"""Groups that change at run time, in seeded simulations over reliable FIFO
links with random latencies: groups added, removed and given new members
while messages flow, and a sequencing machine crashed and replaced.

Verdicts: pairwise order; nothing stuck at quiescence (every live node
ended every epoch but the last and nothing waits); every message delivered
to every live member of its group, except, with a crash, messages whose
path (publisher, ingress, atom hosts) crossed the crashed node, which may be
lost (counted, never waited for)."""

from __future__ import annotations

import heapq
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epto
from epto.atoms import AtomsProcess, SequencingGraph, zipf_memberships
from epto.atoms._messages import (
    AddGroup,
    Alive,
    Change,
    EpochEnd,
    Publish,
    RemoveGroup,
    ReplaceHost,
    Sequenced,
)
from epto.check import check_pairwise

NODES = 12
EventId = tuple[int, int]


class _Run:
    """One seeded run: every node an :class:`AtomsProcess` (node 0 is the
    coordinator) and a calendar of publications, changes, a crash and its
    detection; links are FIFO with a random latency per pair."""

    def __init__(
        self,
        seed: int,
        groups: int = 5,
        suspect_after: float | None = None,
        placed: bool = False,
    ) -> None:
        self.rng = rng = random.Random(seed)
        membership = zipf_memberships(NODES, groups, rng)
        self.latency = {(a, b): rng.uniform(1, 50) for a in range(NODES) for b in range(NODES)}
        if placed:  # machines placed for these latencies, on any node
            matrix = [[self.latency[a, b] for b in range(NODES)] for a in range(NODES)]
            graph = SequencingGraph.build(membership, matrix)
        else:
            graph = SequencingGraph.build(membership)
        self.procs = {
            p: AtomsProcess(
                p, graph, nodes=range(NODES), coordinator=0, suspect_after=suspect_after
            )
            for p in range(NODES)
        }
        self.last: dict[tuple[int, int], float] = {}
        self.queue: list[tuple[float, int, str, int, object]] = []
        self.order = itertools.count()
        self.sequences: dict[int, list[EventId]] = {p: [] for p in range(NODES)}
        self.addressed: dict[EventId, frozenset[int]] = {}
        self.places: dict[EventId, set[int]] = {}
        self.epoch_of: dict[EventId, int] = {}
        self.down: set[int] = set()
        self.next_group = groups

    def at(self, when: float, what: str, node: int, item: object = None) -> None:
        heapq.heappush(self.queue, (when, next(self.order), what, node, item))

    def run(self) -> None:
        while self.queue:
            now, _, what, node, item = heapq.heappop(self.queue)
            if node in self.down:
                continue  # a crashed node takes nothing; what it sent still arrives
            proc = self.procs[node]
            if what == "publish":
                self._publish(proc)
            elif what == "change":
                self._change(proc)
            elif what == "crash":
                self.down.add(node)
                continue
            elif what == "detect":
                assert isinstance(item, int)
                proc.replace_crashed(item)
            elif what == "tick":
                proc.handle_timer(now)
            else:
                assert isinstance(item, tuple)
                proc.receive(*item, now)
            for to, message in proc.messages_to_send():
                at = max(now + self.latency[node, to], self.last.get((node, to), 0.0))
                self.last[node, to] = at
                self.at(at, "message", to, (node, message))
            self.sequences[node].extend(d.event.id for d in proc.deliveries())

    def _publish(self, proc: AtomsProcess) -> None:
        mine = sorted(proc.groups)
        if not mine:
            return
        group = self.rng.choice(mine)
        graph = proc.graph
        places = {graph.ingress(group), proc.pid}
        places.update(graph.atoms[a].host for a in graph.route(group))
        eid = proc.publish(group, b"x")
        self.addressed[eid] = proc.members(group)
        self.epoch_of[eid] = proc.epoch
        self.places[eid] = places

    def _change(self, proc: AtomsProcess) -> None:
        groups = sorted(proc.graph.groups)
        live = sorted(set(range(NODES)) - proc.crashed)
        kind = self.rng.choice(["add", "remove", "renew"])
        if kind == "remove" and len(groups) > 1:
            proc.remove_group(self.rng.choice(groups))
            return
        members = self.rng.sample(live, self.rng.randint(2, min(6, len(live))))
        if kind == "renew":  # one group's membership changes: removed and added again
            group = self.rng.choice(groups)
            proc.reconfigure(remove=[group], add={group: members})
            return
        proc.add_group(self.next_group, members)
        self.next_group += 1


def _simulate(
    seed: int,
    *,
    changes: int,
    crash: bool,
    messages: int = 160,
    detector: bool = False,
    placed: bool = False,
) -> _Run:
    """A run; with ``detector``, the crash is found by the coordinator's
    heartbeats (every node's timer every 10 time units, silence 150), else
    declared by hand 20 to 150 units after it happened."""
    run = _Run(seed, suspect_after=150.0 if detector else None, placed=placed)
    rng = run.rng
    horizon = 1000.0
    if detector:
        for p in range(NODES):
            for k in range(int(horizon + 600) // 10):
                run.at(k * 10.0 + p / NODES, "tick", p)
    for _ in range(messages):
        run.at(rng.uniform(0, horizon), "publish", rng.randrange(NODES))
    for _ in range(changes):
        run.at(rng.uniform(50, horizon), "change", 0)
    if crash:
        graph = run.procs[0].graph
        hosts = sorted({a.host for a in graph.atoms.values()} - {0})
        victim = rng.choice(hosts or list(range(1, NODES)))
        when = rng.uniform(200, 700)
        run.at(when, "crash", victim)
        if not detector:
            run.at(when + rng.uniform(20, 150), "detect", 0, victim)
    run.run()
    return run


def _verdict(run: _Run) -> tuple[int, int]:
    """Assert the verdicts; return (deliveries owed, messages lost to the crash)."""
    live = sorted(set(range(NODES)) - run.down)
    final = run.procs[0].epoch
    assert run.procs[0].crashed == run.down  # no live node suspected
    for p in live:
        stats = run.procs[p].statistics()
        assert stats.pending == 0, (p, stats)  # nothing stuck
        assert stats.epoch == stats.delivering_epoch == final, (p, stats)
        assert stats.abandoned == 0
        assert set(stats.rejected) <= {"from-crashed"}, (p, stats.rejected)
    sequences = {p: run.sequences[p] for p in live}
    dead = run.down
    for p in live:  # every message of an epoch before any of the next
        epochs = [run.epoch_of[e] for e in sequences[p]]
        assert epochs == sorted(epochs), p

    def expected(p: int, eid: EventId) -> bool:
        return p not in dead and p in run.addressed[eid] and not run.places[eid] & dead

    report = check_pairwise(
        sequences, groups=run.addressed, broadcast=set(run.addressed), expected=expected
    )
    assert report.violating_pairs == 0 and not report.integrity_violations, report.summary()
    assert report.total_stuck == 0, report.summary()
    delivered = {e for p in live for e in sequences[p]}
    owed = sum(len(m - dead) for e, m in run.addressed.items() if not run.places[e] & dead)
    lost = sum(
        1
        for eid, members in run.addressed.items()
        if run.places[eid] & dead and any(eid not in set(sequences[p]) for p in members - dead)
    )
    assert {e for e in run.addressed if not run.places[e] & dead} <= delivered | {
        e for e, m in run.addressed.items() if not m - dead
    }
    return owed, lost


@settings(derandomize=True, max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), changes=st.integers(1, 4))
def test_groups_added_and_removed_during_traffic_keep_pairwise_order(
    seed: int, changes: int
) -> None:
    run = _simulate(seed, changes=changes, crash=False)
    owed, lost = _verdict(run)
    assert lost == 0
    delivered = sum(len(s) for s in run.sequences.values())
    assert delivered == owed == sum(len(m) for m in run.addressed.values())
    for proc in run.procs.values():
        assert proc.statistics().lost == 0 and proc.outstanding() == 0


@settings(derandomize=True, max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), changes=st.integers(0, 2), detector=st.booleans())
def test_a_crashed_sequencing_machine_is_replaced_and_nothing_stays_stuck(
    seed: int, changes: int, detector: bool
) -> None:
    run = _simulate(seed, changes=changes, crash=True, detector=detector)
    _verdict(run)
    # After the replacement, the graph no longer names the crashed node.
    (victim,) = run.down
    for p, proc in run.procs.items():
        if p != victim:
            assert victim in proc.crashed
            assert proc.outstanding() == 0


def test_a_run_with_changes_has_epochs_and_loses_nothing() -> None:
    run = _simulate(7, changes=3, crash=False, messages=300)
    owed, _ = _verdict(run)
    assert owed == sum(len(s) for s in run.sequences.values()) > 300
    assert all(proc.epoch == 3 for proc in run.procs.values())


def test_only_the_coordinator_changes_the_graph_and_only_with_changes_that_apply() -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}})
    coordinator = AtomsProcess(1, graph)
    other = AtomsProcess(2, graph)
    with pytest.raises(epto.LocalProtocolError):
        other.add_group(5, {1, 2})
    for bad in (
        {"remove": [9]},
        {"add": {0: {1, 2}}},
        {"add": {5: {1, 99}}},
        {"add": {5: set()}},
        {"add": {2**32: {1, 2}}},
    ):
        with pytest.raises(epto.LocalProtocolError):
            coordinator.reconfigure(**bad)  # type: ignore[arg-type]
    with pytest.raises(epto.LocalProtocolError):
        coordinator.replace_crashed(1)  # the coordinator itself
    assert coordinator.epoch == 0 and coordinator.messages_to_send() == []
    # A membership change in one epoch: the group removed and added again.
    assert coordinator.reconfigure(remove=[0], add={0: {1, 2, 4}}) == 1
    assert coordinator.members(0) == {1, 2, 4}
    assert {dest for dest, _ in coordinator.messages_to_send()} >= {2, 3, 4}


def test_after_a_crash_its_atoms_move_and_nothing_from_it_is_taken() -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}, 2: {1, 3, 4}})
    procs = {p: AtomsProcess(p, graph) for p in range(1, 5)}
    victim = 3
    assert procs[1].replace_crashed(victim) == 1
    out = procs[1].messages_to_send()
    changes = [(dest, m) for dest, m in out if type(m) is Change]
    assert {dest for dest, _ in changes} == {2, 4}  # not to the crashed node
    for dest, change in changes:
        procs[dest].receive(1, change)
        assert procs[dest].crashed == {victim}
    # Atoms of the crashed node are played by another node from epoch 1 on.
    hosted = {a for a, atom in graph.atoms.items() if atom.host == victim}
    assert hosted and procs[2].epoch == 1
    assert all(procs[2].hosts[a] not in (victim, None) for a in hosted)
    assert procs[2].hosts == procs[4].hosts == procs[1].hosts
    procs[2].receive(victim, Publish(1, 1, 0, b"x"))
    procs[2].receive(victim, EpochEnd(0, 1, 0, 0))
    assert procs[2].statistics().rejected == {"from-crashed": 2}


def test_every_node_moves_to_the_new_epoch_once_the_markers_have_passed() -> None:
    run = _Run(3)
    coordinator = run.procs[0]
    run.at(0.0, "change", 0)
    run.run()
    assert {p.epoch for p in run.procs.values()} == {1}
    assert {p.statistics().delivering_epoch for p in run.procs.values()} == {1}
    assert coordinator.statistics().rejected == {}
    # Epoch 0 is over everywhere: its messages are refused.
    member = min(coordinator.members(min(coordinator.groups))) if coordinator.groups else 1
    coordinator.receive(member, EpochEnd(0, 0, 0, 0))
    assert coordinator.statistics().rejected == {"stale-epoch": 1}


@pytest.mark.parametrize("seed", range(4))
def test_a_graph_placed_for_latency_changes_and_survives_a_crash(seed: int) -> None:
    """The latency-aware graph lays the routes out again on every change
    (hosts may move): each epoch keeps its own layout, so nothing changes."""
    run = _simulate(seed, changes=3, crash=False, placed=True)
    owed, lost = _verdict(run)
    assert lost == 0 and owed == sum(len(s) for s in run.sequences.values())
    run = _simulate(seed, changes=1, crash=True, detector=True, placed=True)
    _verdict(run)


_SMALL = st.integers(0, 6)
_hostile = st.one_of(
    st.builds(Publish, _SMALL, st.integers(0, 3), _SMALL, st.just(b"x")),
    st.builds(
        Sequenced,
        _SMALL,
        st.integers(0, 3),
        _SMALL,
        _SMALL,
        _SMALL,
        _SMALL,
        st.lists(st.tuples(_SMALL, _SMALL), max_size=3).map(tuple),
        st.just(b"x"),
    ),
    st.builds(EpochEnd, st.integers(0, 3), _SMALL, st.sampled_from([0, 1]), _SMALL),
    st.builds(Alive, st.integers(0, 3)),
    st.builds(
        Change,
        st.integers(0, 3),
        st.lists(
            st.one_of(
                st.builds(AddGroup, _SMALL, st.frozensets(_SMALL, max_size=4)),
                st.builds(RemoveGroup, _SMALL),
                st.builds(ReplaceHost, _SMALL, _SMALL),
            ),
            max_size=3,
        ).map(tuple),
    ),
)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(inputs=st.lists(st.tuples(st.integers(0, 6), _hostile), max_size=40))
def test_any_sequence_of_well_formed_messages_is_taken_or_counted_never_raised(
    inputs: list[tuple[int, object]],
) -> None:
    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}, 2: {1, 3, 4}, 3: {4, 5}})
    for pid in (1, 3):  # the coordinator, and a node that is not
        proc = AtomsProcess(pid, graph, suspect_after=5.0)
        for k, (sender, message) in enumerate(inputs):
            proc.receive(sender, message, float(k))
            proc.handle_timer(float(k))
            proc.messages_to_send()
            list(proc.deliveries())
        stats = proc.statistics()
        assert stats.pending >= 0 and stats.epoch >= stats.delivering_epoch
