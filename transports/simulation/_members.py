"""The members of the virtual-time network: processes joining, crashing and
broadcasting, and their outputs handed to the network (``_network.py``) and
to the observers. The run loop is :class:`Simulation` (``_simulation.py``).

What differs between ordering engines (EpTO, the token ring) is behind
:class:`Engine`, whose implementations are in ``_engines.py``: how a process
is created and started, which link model carries its messages, how its timer
is armed, when its outputs are drained, what "settled" means, and what a
finished experiment owes and reports. :class:`Members` only calls them, and
drives every process through the endpoints' engine adapter
(:data:`Adapter`): the message-level decisions of a real node (payload
limit, holes, flushed) are made by the same code here. An
engine reads the simulation's public state and drives the rest through the
:class:`SimulationPort` it is handed when bound.

Size: the members' life cycle (joins, crashes, churn, broadcasts, draining
outputs), the engine interface it calls and the port it hands the engine
(about 520 lines); one state that the run loop and the experiments share.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs

from epto import (
    Config,
    ConfigurationError,
    CyclonConfig,
    Delivery,
    EventId,
    GroupKey,
    Limits,
    LocalProtocolError,
    ProcessId,
)
from epto.atoms import AtomsConfig, AtomsProcess
from epto.check import CheckReport
from epto.endpoint import AtomsAdapter, EptoAdapter, TokenRingAdapter
from epto.epidemic import Membership, Node, PeerSampler, Process
from epto.tokenring import TokenRingConfig, TokenRingProcess

from ._latency import LatencyModel
from ._network import VirtualNetwork
from ._spec import SimulationSpec
from ._wire import EptoWireProcess, StreamWireProcess

Member = Process | Node | TokenRingProcess | AtomsProcess
"""A simulated process: :class:`epto.epidemic.Process`, :class:`epto.epidemic.Node` with
Cyclon, :class:`epto.tokenring.TokenRingProcess`, or
:class:`epto.atoms.AtomsProcess`."""
Adapter = EptoAdapter | TokenRingAdapter | AtomsAdapter | EptoWireProcess | StreamWireProcess
"""What the run loop drives: the process behind the same message-level
adapter a real node's endpoint runs (:mod:`epto.endpoint`), which makes the
endpoint's decisions (payload limit, holes, flushed); ``adapter.engine`` is
the :data:`Member`. With ``wire``, the process behind its full endpoint
(``_wire.py``)."""
EngineConfig = Config | TokenRingConfig | AtomsConfig
"""The configuration of simulated processes; its type picks the engine."""
Send = Callable[[ProcessId, Sequence[tuple[ProcessId, Any]], float], None]
"""Hands a process's outputs ``(destination, message)`` to the network."""
Flush = Callable[[ProcessId, Adapter, float], None]
"""Drains a process's outputs (messages and deliveries) after an input."""


@attrs.frozen(kw_only=True, slots=True)
class SimulationPort:
    """What an engine drives in the simulation it is bound to, beyond the
    simulation's public state: the network's send functions, the output
    drain, the calendar queue, and the ``sampler`` option.

    The simulation builds it once from its own bound methods and hands it to
    its engine (:meth:`Members._engine_for`): these operations stay private
    to the simulation (a user has no business sending a ball on behalf of a
    process, or scheduling a raw queue item), and the engine, in another
    module, does not reach into the simulation's private attributes. An
    engine hands them on in :meth:`Engine.sender` and :meth:`Engine.flusher`,
    so the run loop calls the very same bound methods, without a hop through
    the port.
    """

    send_balls: Send
    """Datagrams (``_network.py``): every ball copy independently delayed and
    lossy; EpTO's balls."""
    send_peer: Callable[[ProcessId, ProcessId, object, float], None]
    """One peer-sampling (Cyclon) message ``(src, dest, message, now)``: a
    datagram of a queue kind of its own, counted apart from balls."""
    send_links: Send
    """Reliable FIFO links (``_network.py``): the token ring's and the
    sequencing atoms' messages."""
    send_streams: Send
    """Streams over the reliable FIFO links (``_network.py``): a stream
    endpoint's frames in wire mode, one write per destination."""
    drain: Flush
    """Hands a process's messages to the engine's sender and its deliveries
    to the observers (:meth:`Members._drain`)."""
    push: Callable[[float, tuple[Any, ...]], None]
    """Schedules a queue item ``(kind, a, b, c)`` (``_calendar.py``) at a
    time, rounded up to the quantum."""
    close_stream: Callable[[ProcessId, ProcessId], None]
    """Closes the stream of one directed link (wire mode over links)."""
    set_timer: Callable[[Any, float], None]
    """Keeps one versioned timer per key, due at a time (``math.inf``: none)."""
    sampler: Callable[[ProcessId, Membership], PeerSampler] | None
    """The ``sampler`` option: an EpTO process's peer sampler over the full
    view (None: :class:`epto.epidemic.FullView`)."""


STREAM_LIMITS = Limits.for_frame_size(1 << 20)
"""The default limits of a node on streams (``TcpNodeConfig.limits``, 1 MiB
frames): a simulated token ring's or atoms' (``tests`` keep them equal)."""


def refuse_round_options(
    subject: str,
    *,
    drift: float,
    jitter: float,
    sampler: object,
    pss: object,
) -> None:
    """For an engine without rounds nor peer sampling (token ring, atoms):
    refuse the options that would not apply (``subject``: "a token ring has")."""
    if drift or jitter or sampler is not None or pss != "full":
        raise ConfigurationError(
            f"{subject} no rounds nor peer sampling: drift, jitter, sampler and pss do not apply"
        )


class SimulationObserver:
    """Receives what happens in a simulation; override what you need.

    Attach with :meth:`Simulation.add_observer`. A delivery log writer, a
    progress bar or a recorder are observers.
    """

    def on_broadcast(self, pid: ProcessId, event_id: EventId, now: float) -> None:
        """``pid`` broadcast ``event_id`` at ``now``."""

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        """``pid`` delivered ``delivery`` at ``now``."""

    def on_join(self, pid: ProcessId, now: float) -> None:
        """``pid`` joined the group at ``now``."""

    def on_leave(self, pid: ProcessId, now: float) -> None:
        """``pid`` crashed (left without a word) at ``now``."""


class Engine(ABC):
    """An ordering engine as the simulation sees it: one instance per
    simulation, bound to it (``_engines.py`` holds the implementations).

    An engine is built with the simulation, whose public state it reads
    (processes, membership, clock, options), and a :class:`SimulationPort`,
    through which it sends, drains and schedules.

    The simulation side: :meth:`create`, :meth:`start`, :meth:`stop`,
    :meth:`bootstrap`, :meth:`sender` and :meth:`flusher` (bound once, so
    the run loop calls them without indirection), :attr:`drain_every_input`,
    :meth:`settled`, :meth:`entries_processed`. The experiment side (``run_simulation``):
    :meth:`configure`, :meth:`options`, :meth:`observers`,
    :meth:`drain_rounds`, :meth:`expected_rounds`, :meth:`idle`,
    :meth:`complete`, :meth:`verdict`, :meth:`figures`.
    """

    mode: ClassVar[Literal["epto", "token-ring", "atoms"]]
    """``SimulationSpec.mode`` and ``Simulation.mode`` of this engine."""
    sim: Members
    """The simulation this engine is bound to."""
    deterministic_agreement: ClassVar[bool]
    """Holes and validity violations are failures of a run (not only reported)."""
    drain_every_input: ClassVar[bool]
    """Outputs are drained after every arrival, not only after timers and
    broadcasts (the default of ``Simulation.drain_every_input``)."""
    wire: ClassVar[bool] = False
    """Its processes can run as full endpoints, bytes on the links
    (``Simulation(wire=True)``)."""

    # -- the simulation side -------------------------------------------------

    streams: ClassVar[bool] = False
    """The engine runs on streams (reliable FIFO links, no rounds, no peer
    sampling): its default limits are a stream node's and the round
    options (drift, jitter, sampler, pss) are refused."""
    subject: ClassVar[str] = "EpTO has"
    """How the refusals name the engine ("a token ring has")."""

    def check_options(
        self,
        *,
        drift: float,
        jitter: float,
        sampler: Callable[[ProcessId, Membership], PeerSampler] | None,
        pss: Literal["full"] | CyclonConfig,
    ) -> None:
        """Raise :class:`ConfigurationError` on a simulation option that does
        not apply to this engine (a stream engine: the round options)."""
        if self.streams:
            refuse_round_options(self.subject, drift=drift, jitter=jitter, sampler=sampler, pss=pss)

    def default_limits(self) -> Limits:
        """The limits a real node of this engine uses by default: a datagram
        node's (EpTO over UDP), or a stream node's (:data:`STREAM_LIMITS`)."""
        return STREAM_LIMITS if self.streams else Limits()

    @abstractmethod
    def default_round_interval(self) -> float:
        """The step of ``run_rounds`` unless the simulation is given one."""

    @abstractmethod
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
        """A new process ``pid`` (see :meth:`Members.add_process`) behind its
        adapter, added to the membership; raises on options of the other engine."""

    @abstractmethod
    def start(self, pid: ProcessId, proc: Adapter) -> None:
        """``proc`` has joined (observers told): arm its timer, send what it has."""

    @abstractmethod
    def stop(self, pid: ProcessId, proc: Member) -> None:
        """``proc`` has crashed: keep what the figures need of it."""

    @abstractmethod
    def bootstrap(self, n: int, first: ProcessId) -> list[ProcessId] | None:
        """The ids of the bootstrap members of a group of ``n`` started at
        once (``first`` is the lowest id never used in the simulation), or
        None when ``n`` processes are started one by one."""

    @abstractmethod
    def sender(self) -> Send:
        """The link model of the messages: the network's send function."""

    @abstractmethod
    def flusher(self) -> Flush:
        """What drains a process's outputs (and re-arms its timer if need be)."""

    def settled(self) -> bool:
        """Nothing more will happen (no broadcast is scheduled). By
        default: no message in flight and no process busy
        (:meth:`epto.endpoint.EptoAdapter.busy` and its kin)."""
        sim = self.sim
        if sim.network_statistics().in_flight:
            return False
        return not any(proc.busy() for proc in sim.endpoints.values())

    @abstractmethod
    def entries_processed(self) -> int:
        """The work figure of the summary."""

    # -- the experiment side -------------------------------------------------

    @staticmethod
    @abstractmethod
    def configure(spec: SimulationSpec, latency: LatencyModel) -> EngineConfig:
        """The processes' configuration for ``spec``."""

    @staticmethod
    @abstractmethod
    def options(spec: SimulationSpec) -> dict[str, Any]:
        """The simulation options of ``spec`` that only this engine takes."""

    @abstractmethod
    def observers(self) -> list[SimulationObserver]:
        """Observers the verdict needs, attached before the caller's."""

    @abstractmethod
    def drain_rounds(self, spec: SimulationSpec, latency: LatencyModel) -> int:
        """Rounds allowed after the broadcasting ones (``max_drain_rounds=None``)."""

    @abstractmethod
    def expected_rounds(self, spec: SimulationSpec, latency: LatencyModel, limit: int) -> int:
        """The rounds a run is expected to take (for progress reports)."""

    @abstractmethod
    def idle(self) -> bool:
        """Nothing is in flight nor pending: the run is over."""

    @abstractmethod
    def complete(
        self,
        sequences: Mapping[ProcessId, Sequence[EventId]],
        out_of_order: Mapping[ProcessId, Sequence[EventId]],
    ) -> bool:
        """Every staying process delivered what it is owed."""

    @abstractmethod
    def verdict(
        self, spec: SimulationSpec, sequences: dict[ProcessId, list[EventId]]
    ) -> CheckReport:
        """The checker over the deliveries: which processes stay and what each
        is owed."""

    @abstractmethod
    def figures(self, spec: SimulationSpec) -> dict[str, Any]:
        """The engine's entries of the summary's ``parameters``."""


class Members(VirtualNetwork):
    """Processes, churn and broadcasts; see :class:`Simulation`."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        seed: int = 0,
        latency: LatencyModel | None = None,
        loss: float = 0.0,
        drift: float = 0.0,
        jitter: float = 0.0,
        sampler: Callable[[ProcessId, Membership], PeerSampler] | None = None,
        quantum: float | None = None,
        pss: Literal["full"] | CyclonConfig = "full",
        pss_seeds: int = 1,
        round_interval: float | None = None,
        break_duration: float | Literal["round-trip"] | None = None,
        max_items_per_instant: int | None = None,
        limits: Limits | None = None,
        count_holes: bool = True,
        wire: bool = False,
        wire_key: GroupKey | None = None,
    ) -> None:
        if not (isinstance(drift, int | float) and 0 <= drift < 1):
            raise ConfigurationError(f"drift must be in [0, 1), got {drift!r}")
        if not (isinstance(jitter, int | float) and 0 <= jitter < 1):
            raise ConfigurationError(f"jitter must be in [0, 1), got {jitter!r}")
        super().__init__(
            seed=seed,
            latency=latency,
            loss=loss,
            quantum=quantum,
            break_duration=break_duration,
            max_items_per_instant=max_items_per_instant,
        )
        self.config = config
        self.count_holes = count_holes
        """EpTO: every process counts the holes in its deliveries
        (:attr:`epto.endpoint.EptoAdapter.holes`; per-source state)."""
        # Built once from bound methods: the engine binds what the run loop
        # calls per message (sender, flusher) straight from it.
        port = SimulationPort(
            send_balls=self._send_balls,
            send_peer=self._send_peer,
            send_links=self._send_links,
            send_streams=self._send_streams,
            drain=self._drain,
            push=self._push,
            close_stream=self.close_stream,
            set_timer=self._set_timer,
            sampler=sampler,
        )
        self.engine = self._engine_for(config, port)
        """What differs between ordering engines (``_engines.py``)."""
        self.engine.check_options(drift=drift, jitter=jitter, sampler=sampler, pss=pss)
        if wire and (not self.engine.wire or pss != "full" or sampler is not None):
            raise ConfigurationError(
                "wire runs EpTO processes over a full view only (a token ring and atoms: always)"
            )
        self.wire = bool(wire)
        """Every process runs as a full endpoint and frames (bytes) travel on
        the links (``_wire.py``); off: the adapters exchange messages as objects."""
        self._streams = self.wire and self.engine.streams
        self.wire_key = wire_key
        """With ``wire``: the group key that seals every frame (None: unsealed)."""
        self.limits = limits if limits is not None else self.engine.default_limits()
        """The bounds a real node applies (``max_payload_size``): a broadcast
        above them is refused here as there. Default: the real node's of the
        engine (:meth:`Engine.default_limits`)."""
        if round_interval is None:
            round_interval = self.engine.default_round_interval()
        if not (isinstance(round_interval, int | float) and 0 < round_interval < math.inf):
            raise ConfigurationError(f"round_interval must be positive, got {round_interval!r}")
        self.round_interval = float(round_interval)
        self.seed = seed
        self.drift = float(drift)
        self.jitter = float(jitter)
        self.membership = Membership()
        """Live processes (for a token ring: not excluded from the view)."""
        if not (pss == "full" or isinstance(pss, CyclonConfig)):
            raise ConfigurationError(f"pss must be 'full' or a CyclonConfig, got {pss!r}")
        if sampler is not None and pss != "full":
            raise ConfigurationError("give either sampler or pss=CyclonConfig, not both")
        if not (isinstance(pss_seeds, int) and pss_seeds >= 1):
            raise ConfigurationError(f"pss_seeds must be a positive integer, got {pss_seeds!r}")
        self.pss = pss
        """``"full"`` or the Cyclon configuration every process runs."""
        self.pss_seeds = pss_seeds
        self.schedule_rng = random.Random(f"epto-sim/{seed}/schedule")
        """The schedule's random stream (phases, drift, churn, workloads)."""
        self.endpoints: dict[ProcessId, Adapter] = {}
        """Live processes behind their adapters (what the run loop drives)."""
        self.processes: dict[ProcessId, Member] = {}
        """Live processes: :class:`epto.epidemic.Process`, :class:`epto.epidemic.Node` with
        Cyclon, or :class:`epto.tokenring.TokenRingProcess`."""
        self.joined_at: dict[ProcessId, float] = {}
        self.left_at: dict[ProcessId, float] = {}
        self.broadcasts: dict[EventId, tuple[ProcessId, float]] = {}
        """Every event broadcast: ``event id -> (source, time)``."""
        self.observers: list[SimulationObserver] = []
        self._next_pid = 0
        self._scheduled_broadcasts = 0
        self.drain_every_input = self.engine.drain_every_input
        """Drain outputs after every arrival too (the engine's default: EpTO
        only produces output in a round, a token ring answers every input)."""
        # Bound once: the run loop and the network call them per message.
        self._send: Send = self.engine.sender()
        self._flush: Flush = self.engine.flusher()

    def _engine_for(self, config: EngineConfig, port: SimulationPort) -> Engine:
        """The engine that runs processes of ``config``, bound to this
        simulation and ``port`` (see ``Simulation``)."""
        raise NotImplementedError

    @property
    def mode(self) -> Literal["epto", "token-ring", "atoms"]:
        return self.engine.mode

    # -- membership ---------------------------------------------------------

    def add_process(
        self,
        pid: ProcessId | None = None,
        *,
        phase: float | None = None,
        interval: float | None = None,
        config: Config | None = None,
        members: Sequence[ProcessId] | None = None,
        contacts: Collection[ProcessId] | None = None,
    ) -> ProcessId:
        """Start a process now (a new id unless ``pid`` is given).

        EpTO: its first round is due at ``now + phase`` (``phase`` defaults to
        a uniform draw in ``[0, interval)``), then every ``interval`` (defaults
        to the drifted round length).

        Token ring: a bootstrap member of ``members`` (the same list for all of
        them), or a new identity joining through ``contacts`` (default:
        ``pss_seeds`` live members of the view drawn at random; the very first
        process starts a group of one).
        """
        if pid is None:
            pid = self._next_pid
        if pid in self.processes or pid in self.left_at:
            raise LocalProtocolError(f"process id {pid} was already used in this simulation")
        proc = self.engine.create(
            pid, phase=phase, interval=interval, config=config, members=members, contacts=contacts
        )
        self._next_pid = max(self._next_pid, pid + 1)
        self.endpoints[pid] = proc
        self.processes[pid] = proc.engine
        self.joined_at[pid] = self.now
        for obs in self.observers:
            obs.on_join(pid, self.now)
        self.engine.start(pid, proc)
        return pid

    def add_processes(self, n: int) -> list[ProcessId]:
        """Start ``n`` processes; for a token ring with no process yet, they
        are the bootstrap members of a group of ``n``."""
        pids = self.engine.bootstrap(n, self._next_pid)
        if pids is not None:
            return [self.add_process(pid, members=pids) for pid in pids]
        return [self.add_process() for _ in range(n)]

    def remove_process(self, pid: ProcessId) -> None:
        """Crash ``pid`` now: no goodbye; messages in flight to it are dropped."""
        proc = self.processes.pop(pid)
        del self.endpoints[pid]
        self.membership.discard(pid)
        self.left_at[pid] = self.now
        self._armed.pop(pid, None)
        self.engine.stop(pid, proc)
        for obs in self.observers:
            obs.on_leave(pid, self.now)

    def churn(self, count: int) -> tuple[list[ProcessId], list[ProcessId]]:
        """Crash ``count`` processes chosen uniformly at random and start as
        many new ones; returns ``(left, joined)``."""
        left = self.membership.sample_excluding(count, -1, self.schedule_rng)
        left.sort()
        for pid in left:
            self.remove_process(pid)
        joined = [self.add_process() for _ in range(count)]
        return left, joined

    def schedule_churn(
        self,
        per_round: float,
        *,
        start: float | None = None,
        stop: float = math.inf,
        every: float | None = None,
    ) -> None:
        """Replace ``per_round`` processes every ``every`` (default: the round
        interval) from ``start`` (default one interval from now) until
        ``stop``: the EpTO paper's α.

        A fractional ``per_round`` is carried over: 0.5 replaces one process
        every other round.
        """
        if not (isinstance(per_round, int | float) and per_round >= 0):
            raise ConfigurationError(f"churn must be non-negative, got {per_round!r}")
        step = every if every is not None else self.round_interval
        first = start if start is not None else self.now + step
        carry = [0.0]

        def tick() -> None:
            carry[0] += per_round
            count = int(carry[0] + 1e-9)  # 10 x 0.1 is one process, not zero
            carry[0] = max(0.0, carry[0] - count)
            if count:
                self.churn(min(count, max(0, len(self.membership) - 1)))
            nxt = self.now + step
            if nxt < stop:
                self.call_at(nxt, tick)

        if first < stop:
            self.call_at(first, tick)

    # -- scripting ----------------------------------------------------------

    def can_broadcast(self, pid: ProcessId) -> bool:
        """``pid`` is alive and may broadcast (a token-ring process must be a
        member of the view: not joining, not excluded)."""
        proc = self.endpoints.get(pid)
        return proc is not None and proc.can_broadcast()

    def broadcast(self, pid: ProcessId, payload: bytes) -> EventId:
        """``pid`` broadcasts ``payload`` now (refused, as by a real node,
        above ``limits.max_payload_size``)."""
        proc = self.endpoints[pid]
        now = self.now
        eid = proc.broadcast(payload, now)
        self.broadcasts[eid] = (pid, now)
        for obs in self.observers:
            obs.on_broadcast(pid, eid, now)
        self._flush(pid, proc, now)
        return eid

    def broadcast_at(self, at: float, pid: ProcessId, payload: bytes) -> None:
        """Schedule a broadcast; skipped if ``pid`` cannot broadcast by then."""

        self._scheduled_broadcasts += 1

        def action() -> None:
            self._scheduled_broadcasts -= 1
            if self.can_broadcast(pid):
                self.broadcast(pid, payload)

        self.call_at(at, action)

    def inject(self, src: ProcessId, dest: ProcessId, frame: object) -> None:
        """Hand ``frame`` to the network now as if ``src`` had sent it to
        ``dest`` (an adversary on the links; with ``wire``, bytes; on a
        stream, a write of its own on the stream that is up, without an
        opening: the first frame of a new stream if none is)."""
        if self._streams:
            self._write(src, dest, [frame], self.now, open_stream=False)
        else:
            self._send(src, [(dest, frame)], self.now)

    def _open_stream(self, src: ProcessId, dest: ProcessId) -> list[bytes]:
        proc = self.endpoints.get(src)
        return proc.opening(dest) if isinstance(proc, StreamWireProcess) else []

    def add_observer(self, observer: SimulationObserver) -> None:
        self.observers.append(observer)

    def quiescent(self) -> bool:
        """No broadcast scheduled and the engine settled. EpTO: no ball in
        flight and no process holding an undelivered event. Token ring (whose
        heartbeats never stop): no process still joining, and every member of
        the view has had its own messages delivered and delivered the same
        prefix, every stable position."""
        if self._scheduled_broadcasts:
            return False
        return self.engine.settled()

    def entries_processed(self) -> int:
        """Event copies received in balls, summed over every process that ever
        ran (token ring: messages received)."""
        return self.engine.entries_processed()

    # -- running ------------------------------------------------------------

    def _drain(self, pid: ProcessId, proc: Adapter, now: float) -> None:
        """Hand ``proc``'s messages to the network and its deliveries to the observers."""
        out = proc.messages_to_send()
        if out:
            self._send(pid, out, now)
        observers = self.observers
        for delivery in proc.deliveries():
            for obs in observers:
                obs.on_delivery(pid, delivery, now)
