"""The sequencing-atoms engine in the virtual-time network
(:class:`epto.atoms.AtomsProcess`, seed 003).

Its messages travel on reliable FIFO links without loss (the engine has no
retransmission: it assumes the links TCP gives); there are no timers;
outputs are drained after every input. Settled: nothing in flight and
nothing waiting at any node. Each member is owed every message of its
groups; the verdict is the pairwise order (any two members deliver their
common messages in one order, :func:`epto.check.check_pairwise`) and
liveness (nothing stuck). The graph is placed for the run's latency model
(``SimulationSpec.atoms_placement``). The figures add the graph's size and
the latency stretch: each delivery's delay against the direct latency from
the sender to the receiver, per receiver as a ratio of means (the headline)
and as a mean of ratios. With ``wire``, each node is a full
:class:`epto.endpoint.AtomsEndpoint` whose frames travel on simulated
streams (``_wire.py``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, Literal

from epto import Config, Delivery, EventId, LocalProtocolError, ProcessId
from epto.atoms import AtomsConfig, AtomsProcess, SequencingGraph, zipf_memberships
from epto.check import CheckReport, OrderViolation, PairwiseReport, check_pairwise
from epto.endpoint import AtomsAdapter, NodeConfig

from ._latency import LatencyModel
from ._members import (
    Adapter,
    Engine,
    Flush,
    Member,
    Members,
    Send,
    SimulationObserver,
    SimulationPort,
)
from ._spec import SimulationSpec
from ._wire import address, stream_process


def _atoms(proc: Member) -> AtomsProcess:
    assert isinstance(proc, AtomsProcess)
    return proc


class _Groups(SimulationObserver):
    """The group of every publication, and every delivery's delay."""

    def __init__(self, engine: AtomsEngine) -> None:
        self.engine = engine
        self.group: dict[EventId, int] = {}
        self.sent_at: dict[EventId, float] = {}
        self.delays: list[tuple[EventId, ProcessId, float]] = []

    def on_broadcast(self, pid: ProcessId, event_id: EventId, now: float) -> None:
        group = _atoms(self.engine.sim.processes[pid]).last_group
        assert group is not None
        self.group[event_id] = group
        self.sent_at[event_id] = now

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        eid = delivery.event.id
        self.delays.append((eid, pid, now - self.sent_at[eid]))


class AtomsEngine(Engine):
    """Sequencing-atoms nodes (:class:`epto.atoms.AtomsProcess`)."""

    mode: ClassVar[Literal["atoms"]] = "atoms"
    deterministic_agreement = True
    drain_every_input = True
    streams = True
    wire = True
    subject = "sequencing atoms have"

    def __init__(self, sim: Members, port: SimulationPort, config: AtomsConfig) -> None:
        self.sim = sim
        self.port = port
        self.config = config
        self.recorder = _Groups(self)
        self._latency: LatencyModel | None = None
        graph = config.graph
        self.placement = (
            "blind" if graph.latencies is None else ("members" if graph.member_hosts else "latency")
        )
        self.pairwise: PairwiseReport | None = None
        """The pairwise verdict, once :meth:`verdict` ran."""

    # -- the simulation side -------------------------------------------------

    def default_round_interval(self) -> float:
        return 1.0

    def create(
        self,
        pid: ProcessId,
        *,
        phase: float | None,
        interval: float | None,
        config: Config | None,
        members: Sequence[ProcessId] | None,
        contacts: Collection[ProcessId] | None,
    ) -> Adapter:
        if phase is not None or interval is not None or config is not None:
            raise LocalProtocolError("phase, interval and config are EpTO options")
        if members is not None or contacts is not None:
            raise LocalProtocolError("members and contacts are token-ring options")
        sim = self.sim
        sim.membership.add(pid)
        if sim.wire:
            # Every node of the deployment, as AtomsProcess derives it from
            # the graph (a node's endpoint takes them from its members).
            graph = self.config.graph
            nodes = {p for members in graph.groups.values() for p in members}
            nodes |= {atom.host for atom in graph.atoms.values()}
            node = NodeConfig(
                pid=pid,
                bind=address(pid),
                mode="atoms",
                atoms=self.config,
                members={p: address(p) for p in sorted(nodes | {pid})},
                limits=sim.limits,
                group_key=sim.wire_key,
                incarnation=0,
            )
            rng = random.Random(f"epto-sim/{sim.seed}/process/{pid}")
            return stream_process(node, now=sim.now, rng=rng, close_stream=self.port.close_stream)
        proc = AtomsProcess(pid, self.config.graph, max_pending=self.config.max_pending)
        return AtomsAdapter(proc, limits=sim.limits)

    def start(self, pid: ProcessId, proc: Adapter) -> None:
        # No timer to arm: the flush is the drain (flusher).
        self.port.drain(pid, proc, self.sim.now)

    def stop(self, pid: ProcessId, proc: Member) -> None:
        pass

    def bootstrap(self, n: int, first: ProcessId) -> list[ProcessId] | None:
        return None

    def sender(self) -> Send:
        return self.port.send_streams if self.sim.wire else self.port.send_links

    def flusher(self) -> Flush:
        return self.port.drain

    def entries_processed(self) -> int:
        return self.sim.network_statistics().arrived

    # -- the experiment side -------------------------------------------------

    @staticmethod
    def configure(spec: SimulationSpec, latency: LatencyModel) -> AtomsConfig:
        groups = spec.groups if spec.groups is not None else 8
        rng = random.Random(f"epto-sim/{spec.seed}/memberships")
        membership = zipf_memberships(spec.processes, groups, rng)
        if spec.atoms_placement == "blind":
            return AtomsConfig(graph=SequencingGraph.build(membership))
        # Placed for the run's latencies; any process may host a machine.
        graph = SequencingGraph.build(
            membership,
            latency,
            sites=range(spec.processes),
            member_hosts=spec.atoms_placement == "members",
        )
        return AtomsConfig(graph=graph)

    @staticmethod
    def options(spec: SimulationSpec) -> dict[str, Any]:
        return {"wire": spec.wire}

    def observers(self) -> list[SimulationObserver]:
        return [self.recorder]

    def drain_rounds(self, spec: SimulationSpec, latency: LatencyModel) -> int:
        self._latency = latency
        graph = self.config.graph
        longest = max((len(graph.route(g)) for g in graph.groups), default=0)
        return math.ceil((longest + 3) * latency.maximum / self.sim.round_interval) + 2

    def expected_rounds(self, spec: SimulationSpec, latency: LatencyModel, limit: int) -> int:
        return limit

    def idle(self) -> bool:
        return self.sim.quiescent()

    def _owed(self) -> dict[ProcessId, set[EventId]]:
        members = self.config.graph.groups
        owed: dict[ProcessId, set[EventId]] = {}
        for eid, group in self.recorder.group.items():
            for pid in members[group]:
                owed.setdefault(pid, set()).add(eid)
        return owed

    def complete(
        self,
        sequences: Mapping[ProcessId, Sequence[EventId]],
        out_of_order: Mapping[ProcessId, Sequence[EventId]],
    ) -> bool:
        return all(len(sequences.get(pid, ())) >= len(eids) for pid, eids in self._owed().items())

    def verdict(
        self, spec: SimulationSpec, sequences: dict[ProcessId, list[EventId]]
    ) -> CheckReport:
        """The pairwise verdict in the shape of :class:`epto.check.CheckReport`:
        an inversion between two members is an order cycle of two events with
        those two members as witnesses; a message a member is owed and did not
        deliver is a hole (stuck) and a validity violation."""
        members = self.config.graph.groups
        groups = {eid: members[g] for eid, g in self.recorder.group.items()}
        report = check_pairwise(sequences, groups=groups, broadcast=set(groups))
        self.pairwise = report
        # A pair of members delivering two messages in opposite orders is an
        # order cycle of two events witnessed by them (a sample of at most
        # report.order_violations; the figures count them all).
        order = tuple(
            OrderViolation(cycle=(v.first, v.second), witnesses=(v.process, v.other))
            for v in report.order_violations
        )
        integrity = report.integrity_violations
        holes = {pid: len(eids) for pid, eids in report.stuck.items()}
        missing = {pid: eids[:10] for pid, eids in report.stuck.items() if eids}
        stuck_events = tuple(sorted({eid for eids in report.stuck.values() for eid in eids}))
        return CheckReport(
            processes=len(sequences),
            deliveries=report.deliveries,
            events=len({eid for seq in sequences.values() for eid in seq}),
            order_violations=order,
            integrity_violations=integrity,
            holes=holes,
            missing_sample=missing,
            validity_checked=True,
            validity_violations=stuck_events,
            undelivered=holes,
            undelivered_sample=missing,
        )

    def figures(self, spec: SimulationSpec) -> dict[str, Any]:
        graph = self.config.graph
        routes = [len(graph.route(g)) for g in graph.groups]
        return {
            "fanout": None,
            "ttl": None,
            "fanout_derived": False,
            "ttl_derived": False,
            "groups": len(graph.groups),
            "atoms": len(graph.atoms),
            "sequencing_nodes": len({a.host for a in graph.atoms.values()}),
            "placement": self.placement,
            "route_mean": sum(routes) / len(routes) if routes else 0.0,
            "route_max": max(routes, default=0),
            "violating_pairs": None if self.pairwise is None else self.pairwise.violating_pairs,
            **self._stretch(),
        }

    def _stretch(self) -> dict[str, float | None]:
        """The latency stretch per receiver, two ways: the ratio of means (the
        receiver's total delay over its total direct latency, the paper's
        statistic and the headline) and the mean of ratios (the mean over its
        deliveries of delay over direct latency, which close pairs inflate);
        each as the mean and the largest over receivers. The direct latency
        from the sender is the mean of 32 draws of the latency model with a
        fixed seed (exact for per-link and constant models)."""
        latency = self._latency
        empty: dict[str, float | None] = {
            "stretch_mean": None,
            "stretch_max": None,
            "stretch_ratio_of_means_mean": None,
            "stretch_ratio_of_means_max": None,
        }
        if latency is None or not self.recorder.delays:
            return empty
        direct: dict[tuple[ProcessId, ProcessId], float] = {}
        ratios: dict[ProcessId, list[float]] = {}
        sums: dict[ProcessId, list[float]] = {}
        for (origin, _), pid, delay in self.recorder.delays:
            if origin == pid:
                continue
            key = (origin, pid)
            base = direct.get(key)
            if base is None:
                rng = random.Random(0)
                base = direct[key] = sum(latency.sample(origin, pid, rng) for _ in range(32)) / 32
            if base > 0:
                ratios.setdefault(pid, []).append(delay / base)
                total = sums.setdefault(pid, [0.0, 0.0])
                total[0] += delay
                total[1] += base
        means = [sum(v) / len(v) for v in ratios.values() if v]
        if not means:
            return empty
        of_means = [t / d for t, d in sums.values()]
        return {
            "stretch_mean": sum(means) / len(means),
            "stretch_max": max(means),
            "stretch_ratio_of_means_mean": sum(of_means) / len(of_means),
            "stretch_ratio_of_means_max": max(of_means),
        }
