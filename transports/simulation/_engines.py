"""The ordering engines of the virtual-time network, one :class:`Engine` each:
everything the simulator does differently for EpTO and for a token ring.

* :class:`EptoEngine`: :class:`epto.epidemic.Process` (or :class:`epto.epidemic.Node` with
  Cyclon); balls are lossy datagrams (Cyclon's messages too, a kind of their
  own); a round timer re-armed each time it fires (``TIMER``); outputs are
  drained after timers and broadcasts only (``receive`` only fills the next
  ball, EpTO paper Algorithm 1); settled means no ball in flight and no event
  pending; every process alive at the end is owed every event broadcast since
  it joined.
* :class:`TokenRingEngine`: :class:`epto.tokenring.TokenRingProcess`; its
  messages travel on reliable FIFO links; one versioned timer per process,
  kept at ``get_timer()`` after every drain (``VERSIONED_TIMER``); outputs
  are drained after every input; settled means every member of the view has
  delivered the same stable prefix, its own messages included; the members of
  the latest view stay, each owed every position from its start. With
  ``wire``, each process is a full token-ring endpoint whose frames travel on
  simulated streams (``_wire.py``).

Size: the two engine adapters (about 490 lines) stay together on purpose:
they implement one interface, and what differs between the engines is
meant to be read side by side.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs

from epto import Config, CyclonConfig, Delivery, EventId, LocalProtocolError, ProcessId
from epto.atoms import AtomsConfig
from epto.check import CheckReport, check
from epto.endpoint import EptoAdapter, NodeConfig, TokenRingAdapter
from epto.epidemic import FullView, Node, PeerDescriptor, Process
from epto.tokenring import TokenRingConfig, TokenRingProcess
from epto.wire import Ball

from ._atoms_engine import AtomsEngine
from ._calendar import TIMER
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
from ._wire import EptoWireProcess, address, stream_process


def _process(member: Member) -> Process:
    if isinstance(member, Node):
        return member.process
    assert isinstance(member, Process)
    return member


class EptoEngine(Engine):
    """EpTO processes (:class:`epto.epidemic.Process`, or :class:`epto.epidemic.Node`
    with Cyclon)."""

    mode: ClassVar[Literal["epto"]] = "epto"
    deterministic_agreement = False
    drain_every_input = False
    wire = True

    def __init__(self, sim: Members, port: SimulationPort, config: Config) -> None:
        self.sim = sim
        self.port = port
        self.config = config
        self._entries_of_departed = 0
        self._peer_rng: random.Random | None = None

    def default_round_interval(self) -> float:
        return self.config.round_interval

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
        if members is not None or contacts is not None:
            raise LocalProtocolError("members and contacts are token-ring options")
        sim = self.sim
        base = config if config is not None else self.config
        rng = sim.schedule_rng
        if interval is None:
            interval = base.round_interval
            if sim.drift:
                interval *= 1.0 + sim.drift * (2.0 * rng.random() - 1.0)
        if interval != base.round_interval:
            base = attrs.evolve(base, round_interval=interval)
        if phase is None:
            phase = interval * rng.random()
        if not phase >= 0:
            raise LocalProtocolError(f"phase must be non-negative, got {phase!r}")
        now = sim.now
        if sim.wire:
            members = sorted(sim.membership)
            wired = EptoWireProcess(
                pid,
                base,
                now=now + phase - interval,
                seed=random.Random(f"epto-sim/{sim.seed}/process/{pid}").getrandbits(64),
                limits=sim.limits,
                members=members,
                group_key=sim.wire_key,
            )
            for other in sim.endpoints.values():
                assert isinstance(other, EptoWireProcess)
                other.add_member(pid)
            sim.membership.add(pid)
            return wired
        if isinstance(sim.pss, CyclonConfig):
            # A Cyclon node draws shuffles and partners too: a stream of its own.
            proc_rng = random.Random(f"epto-sim/{sim.seed}/process/{pid}")
            # Join through random live processes (the first one starts alone).
            seeds = sorted(sim.membership.sample_excluding(sim.pss_seeds, pid, rng))
            node = Node(
                pid,
                base,
                rng=proc_rng,
                now=now + phase - interval,
                sampler=sim.pss,
                seeds=[PeerDescriptor(pid=c, address=b"") for c in seeds],
            )
            sim.membership.add(pid)
            return EptoAdapter(node, limits=sim.limits, count_holes=sim.count_holes)
        sim.membership.add(pid)
        sampler = self.port.sampler
        peers = (
            sampler(pid, sim.membership) if sampler is not None else FullView(pid, sim.membership)
        )
        # Over a full view a process draws only its gossip targets: every
        # process shares one stream (a Mersenne Twister's state is 2.5 kB; a
        # stream per process was a tenth of a simulated process's memory).
        # The run loop's order is fixed, so the draws are too.
        if self._peer_rng is None:
            self._peer_rng = random.Random(f"epto-sim/{sim.seed}/peers")
        process = Process(pid, base, peers=peers, rng=self._peer_rng, now=now + phase - interval)
        return EptoAdapter(process, limits=sim.limits, count_holes=sim.count_holes)

    def start(self, pid: ProcessId, proc: Adapter) -> None:
        # A Cyclon node may ask for its first shuffle before now (its phase).
        self.port.push(max(proc.get_timer(), self.sim.now), (TIMER, pid, None, None))

    def stop(self, pid: ProcessId, proc: Member) -> None:
        self._entries_of_departed += _process(proc).statistics().entries_received
        if self.sim.wire:
            for other in self.sim.endpoints.values():
                assert isinstance(other, EptoWireProcess)
                other.remove_member(pid)

    def bootstrap(self, n: int, first: ProcessId) -> list[ProcessId] | None:
        return None

    def sender(self) -> Send:
        port = self.port
        if self.sim.pss == "full":
            return port.send_balls
        send_balls = port.send_balls
        send_peer = port.send_peer

        def send(src: ProcessId, out: Sequence[tuple[ProcessId, Any]], now: float) -> None:
            # Cyclon: balls are datagrams, peer-sampling messages a kind of their own.
            balls: list[tuple[ProcessId, Ball]] = []
            for dest, message in out:
                if isinstance(message, Mapping):
                    balls.append((dest, message))
                else:
                    send_peer(src, dest, message, now)
            if balls:
                send_balls(src, balls, now)

        return send

    def flusher(self) -> Flush:
        return self.port.drain

    def entries_processed(self) -> int:
        total = self._entries_of_departed
        for proc in self.sim.processes.values():
            total += _process(proc).statistics().entries_received
        return total

    @staticmethod
    def configure(spec: SimulationSpec, latency: LatencyModel) -> Config:
        return spec.config(latency)

    @staticmethod
    def options(spec: SimulationSpec) -> dict[str, Any]:
        return {
            "drift": spec.drift,
            "jitter": spec.jitter,
            "pss": spec.cyclon_config() or "full",
            "wire": spec.wire,
        }

    def observers(self) -> list[SimulationObserver]:
        return []

    def _slack(self, latency: LatencyModel) -> int:
        return self.config.ttl + math.ceil(latency.maximum / self.sim.round_interval) + 2

    def drain_rounds(self, spec: SimulationSpec, latency: LatencyModel) -> int:
        return 4 * self._slack(latency)

    def expected_rounds(self, spec: SimulationSpec, latency: LatencyModel, limit: int) -> int:
        return spec.rounds + self._slack(latency)

    def idle(self) -> bool:
        return self.sim.quiescent()

    def complete(
        self,
        sequences: Mapping[ProcessId, Sequence[EventId]],
        out_of_order: Mapping[ProcessId, Sequence[EventId]],
    ) -> bool:
        sim = self.sim
        broadcasts = sim.broadcasts
        joined = sim.joined_at
        total = len(broadcasts)
        for pid in sim.processes:
            got = len(sequences[pid]) + len(out_of_order.get(pid, ()))
            if got < total:
                since = joined[pid]
                if since == 0.0:
                    return False
                owed = sum(1 for _, at in broadcasts.values() if at >= since)
                got = sum(
                    1
                    for eid in (*sequences[pid], *out_of_order.get(pid, ()))
                    if broadcasts[eid][1] >= since
                )
                if got < owed:
                    return False
        return True

    def verdict(
        self, spec: SimulationSpec, sequences: dict[ProcessId, list[EventId]]
    ) -> CheckReport:
        sim = self.sim
        alive = sim.processes
        broadcasts = sim.broadcasts
        joined = sim.joined_at

        def expected(pid: ProcessId, eid: EventId) -> bool:
            return pid in alive and broadcasts[eid][1] >= joined[pid]

        return check(sequences, broadcast=broadcasts, expected=expected, staying=alive)

    def figures(self, spec: SimulationSpec) -> dict[str, Any]:
        return {
            "fanout": self.config.fanout,
            "ttl": self.config.ttl,
            "fanout_derived": spec.fanout is None,
            "ttl_derived": spec.ttl is None,
        }


class PositionRecorder(SimulationObserver):
    """Token ring: the position in the total order of every delivered event."""

    def __init__(self) -> None:
        self.position: dict[EventId, int] = {}

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        if delivery.in_total_order:
            event = delivery.event
            self.position[(event.source, event.seq)] = event.ts


def _ring(proc: Member) -> TokenRingProcess:
    assert isinstance(proc, TokenRingProcess)
    return proc


class TokenRingEngine(Engine):
    """Token-ring processes (:class:`epto.tokenring.TokenRingProcess`)."""

    mode: ClassVar[Literal["token-ring"]] = "token-ring"
    deterministic_agreement = True
    drain_every_input = True
    streams = True
    wire = True
    subject = "a token ring has"

    def __init__(self, sim: Members, port: SimulationPort, config: TokenRingConfig) -> None:
        self.sim = sim
        self.port = port
        self.config = config
        self.positions = PositionRecorder()
        """Attached by :meth:`observers` (``run_simulation``)."""
        # Built here, before the simulation has finished its own __init__: the
        # flush reads nothing of it until it runs.
        self._flush = self._make_flush()

    def default_round_interval(self) -> float:
        return self.config.heartbeat_interval

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
        sim = self.sim
        cfg = self.config
        rng = random.Random(f"epto-sim/{sim.seed}/process/{pid}")
        if members is None and contacts is None:
            live = [p for p in sim.membership if sim.can_broadcast(p)]
            live.sort()
            contacts = sim.schedule_rng.sample(live, min(sim.pss_seeds, len(live)))
            if not contacts:
                members = [pid]
        if sim.wire:
            sim.membership.add(pid)
            node = NodeConfig(
                pid=pid,
                bind=address(pid),
                mode="token-ring",
                tokenring=cfg,
                members={p: address(p) for p in members or ()},
                contacts={p: address(p) for p in contacts or ()} if members is None else {},
                limits=sim.limits,
                group_key=sim.wire_key,
                incarnation=0,
            )
            return stream_process(node, now=sim.now, rng=rng, close_stream=self.port.close_stream)
        if members is not None:
            proc = TokenRingProcess(pid, cfg, rng=rng, now=sim.now, members=list(members))
        else:
            proc = TokenRingProcess(pid, cfg, rng=rng, now=sim.now, contacts=sorted(contacts or ()))
        sim.membership.add(pid)
        return TokenRingAdapter(proc, limits=sim.limits)

    def start(self, pid: ProcessId, proc: Adapter) -> None:
        self._flush(pid, proc, self.sim.now)

    def stop(self, pid: ProcessId, proc: Member) -> None:
        pass

    def bootstrap(self, n: int, first: ProcessId) -> list[ProcessId] | None:
        if self.sim.processes:
            return None
        return list(range(first, first + n))

    def sender(self) -> Send:
        return self.port.send_streams if self.sim.wire else self.port.send_links

    def flusher(self) -> Flush:
        return self._flush

    def _make_flush(self) -> Flush:
        """Drain, then keep the process's versioned timer at ``get_timer()``;
        a process excluded from the view leaves the membership."""
        sim = self.sim
        drain = self.port.drain
        set_timer = self.port.set_timer
        inf = math.inf

        def flush(pid: ProcessId, proc: Adapter, now: float) -> None:
            drain(pid, proc, now)
            due = proc.get_timer()
            if due == inf and _ring(proc.engine).excluded:
                # Once per excluded process: not worth a binding of its own.
                sim.membership.discard(pid)
            set_timer(pid, due)

        return flush

    def settled(self) -> bool:
        # Heartbeats never stop: no process busy, and every member of the view
        # has delivered the same stable prefix.
        marks = set()
        for proc in self.sim.endpoints.values():
            if proc.busy():
                return False
            ring = _ring(proc.engine)
            if not ring.excluded:
                marks.add(ring.statistics().next_deliver)
        return len(marks) <= 1

    def entries_processed(self) -> int:
        return self.sim.network_statistics().arrived

    @staticmethod
    def configure(spec: SimulationSpec, latency: LatencyModel) -> TokenRingConfig:
        return spec.tokenring_config(latency)

    @staticmethod
    def options(spec: SimulationSpec) -> dict[str, Any]:
        return {"wire": spec.wire}

    def observers(self) -> list[SimulationObserver]:
        return [self.positions]

    def drain_rounds(self, spec: SimulationSpec, latency: LatencyModel) -> int:
        config = self.config
        settle = config.exclude_timeout + 4 * config.change_timeout + 10 * latency.maximum
        return math.ceil(settle / self.sim.round_interval)

    def expected_rounds(self, spec: SimulationSpec, latency: LatencyModel, limit: int) -> int:
        return limit

    def idle(self) -> bool:
        return False  # heartbeats never stop: settled is complete, see complete()

    def complete(
        self,
        sequences: Mapping[ProcessId, Sequence[EventId]],
        out_of_order: Mapping[ProcessId, Sequence[EventId]],
    ) -> bool:
        return self.sim.quiescent()

    def _in_view(self) -> list[ProcessId]:
        sim = self.sim
        return [p for p in sim.processes if sim.can_broadcast(p)]

    def verdict(
        self, spec: SimulationSpec, sequences: dict[ProcessId, list[EventId]]
    ) -> CheckReport:
        sim = self.sim
        procs = sim.processes
        staying = self._in_view()
        # Members that stayed: those of the latest view (the primary component's:
        # a cut-off minority keeps an older one and is excluded by the others).
        latest = None
        for p in staying:
            final = _ring(procs[p]).statistics()
            if latest is None or final.view > latest[0]:
                latest = (final.view, set(final.members))
        if latest is not None:
            staying = [p for p in staying if p in latest[1]]
        starts: dict[ProcessId, int] = {}
        for p in staying:
            for member, seq, _ in _ring(procs[p]).config.starts:
                starts[member] = seq
        position = self.positions.position
        kept = set(staying)
        joined = sim.joined_at
        broadcasts = sim.broadcasts

        def expected(pid: ProcessId, eid: EventId) -> bool:
            if pid not in kept:
                return False
            at = position.get(eid)
            if at is None:
                # Sequenced nowhere: owed by every member that had joined when it
                # was broadcast (validity; holes only count delivered events).
                return joined[pid] <= broadcasts[eid][1]
            return at >= starts.get(pid, 0)

        # With the default k nothing delivered is ever rolled back, anywhere: check
        # every process that ever ran. A k below the majority guarantees order and
        # agreement among the members that stay in the view only.
        if spec.k is not None:
            sequences = {p: seq for p, seq in sequences.items() if p in kept}
        return check(sequences, broadcast=broadcasts, expected=expected, staying=kept)

    def figures(self, spec: SimulationSpec) -> dict[str, Any]:
        procs = self.sim.processes
        in_view = self._in_view()
        stats = _ring(procs[in_view[0]]).statistics() if in_view else None
        excluded = sum(1 for p in procs.values() if _ring(p).excluded)
        config = self.config
        return {
            "fanout": None,
            "ttl": None,
            "fanout_derived": False,
            "ttl_derived": False,
            "k": config.effective_k(spec.processes, spec.processes) if spec.k is None else spec.k,
            "members_at_end": len(in_view),
            "excluded": excluded,
            "view_changes": None if stats is None else stats.full_changes,
            "iview_changes": None if stats is None else stats.light_changes,
            "view": None if stats is None else stats.view,
            "core_at_end": None if stats is None else len(stats.core),
        } | self._optimistic_figures()

    def _optimistic_figures(self) -> dict[str, Any]:
        """With optimistic delivery: how often a final delivery confirmed the
        optimistic one, over every process that ran to the end."""
        if self.config.optimistic is None:
            return {}
        finals = confirmed = optimistic = 0
        for proc in self.sim.processes.values():
            stats = _ring(proc).statistics().optimistic
            assert stats is not None
            finals += stats.confirmed + stats.reordered
            confirmed += stats.confirmed
            optimistic += stats.optimistic
        return {
            "optimistic_planner": self.config.optimistic.planner,
            "optimistic_deliveries": optimistic,
            "final_confirmed": confirmed,
            "final_deliveries": finals,
            "optimistic_agreement": confirmed / finals if finals else None,
        }


ENGINES: dict[str, type[EptoEngine] | type[TokenRingEngine] | type[AtomsEngine]] = {
    EptoEngine.mode: EptoEngine,
    TokenRingEngine.mode: TokenRingEngine,
    AtomsEngine.mode: AtomsEngine,
}
"""``SimulationSpec.mode`` -> its engine."""


def engine_for(
    sim: Members, port: SimulationPort, config: Config | TokenRingConfig | AtomsConfig
) -> Engine:
    """The engine of processes configured by ``config``, bound to ``sim``
    and the ``port`` it built."""
    if isinstance(config, TokenRingConfig):
        return TokenRingEngine(sim, port, config)
    if isinstance(config, AtomsConfig):
        return AtomsEngine(sim, port, config)
    return EptoEngine(sim, port, config)
