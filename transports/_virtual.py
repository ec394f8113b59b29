"""The virtual-time network: a seeded discrete-event simulation of many
:class:`epto.Process` objects.

The scheduler is a calendar queue: a ``heapq`` of distinct due times (plain
floats, cheap to compare) and, per due time, a list of items, each a plain
tuple ``(kind, a, b, c)``. Items due at the same time run in the order they
were scheduled, including items scheduled while that time is being run. With a
``quantum`` (the command line uses 1 time unit, the integer "ticks" of the
EpTO paper's simulator) every due time is rounded up to a multiple of it, so
thousands of arrivals share one queue entry; without one, time is exact.
Kinds:

* a process's round timer (``handle_timer``), re-armed from ``get_timer()``;
* the arrival of a ball at one process, or at several when the latency is the
  same for every destination (constant latency: one queue item per ball);
* scripted actions (a broadcast, a crash, a join, a partition starting or
  healing, any callable).

Randomness comes from three streams derived from the seed: the network's
(latency, loss), the schedule's (round phases, drift, churn, workload) and
one per process (its peer choices). Changing the loss rate does not move round
phases; the same seed gives the same run, byte for byte.

The static full view is one :class:`epto.Membership` shared by every process
and updated on churn; nothing is copied per process. With
``pss=CyclonConfig(...)`` every process is instead an :class:`epto.Node`
running Cyclon: a newcomer joins through ``pss_seeds`` live processes drawn
at random, and Cyclon's messages cross the same network (latency, loss,
partitions) as a queue kind of their own, counted apart from balls.

EpTO processes only produce output in a round (``receive`` only fills the next
ball, EpTO paper Algorithm 1), so outputs are drained after timers and
broadcasts; set ``Simulation.drain_every_input = True`` to drain after every
arrival too, for a core that behaves otherwise.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from epto import (
    Ball,
    Config,
    ConfigurationError,
    CyclonConfig,
    Delivery,
    DeliveryTag,
    EventId,
    FullView,
    LocalProtocolError,
    Membership,
    Node,
    NodeMessage,
    PeerDescriptor,
    PeerSampler,
    Process,
    ProcessId,
)
from epto.check import CheckReport, check

from ._latency import ConstantLatency, LatencyModel

_TIMER = 0
_ARRIVE = 1
_ARRIVE_MANY = 2
_CALL = 3
_PEER = 4

_Member = Process | Node


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


@attrs.frozen(kw_only=True, slots=True)
class NetworkStatistics:
    """What the network did with the balls handed to it."""

    sent: int
    """Ball copies handed to the network (one per destination)."""
    arrived: int
    """Copies handed to a live process's ``receive``."""
    lost: int
    """Copies dropped by the loss model."""
    cut: int
    """Copies dropped because a partition separated sender and receiver."""
    to_departed: int
    """Copies that arrived after their destination had left."""
    in_flight: int
    peer_messages_sent: int = 0
    """Peer sampling (Cyclon) messages handed to the network."""
    peer_messages_arrived: int = 0
    """Peer sampling messages handed to a live process."""


class Simulation:
    """Many EpTO processes over a virtual-time network.

    ``config`` is the processes' configuration; its ``round_interval`` is the
    nominal round length δ. ``drift`` ``d`` gives each process its own round
    length, uniform in ``[δ(1-d), δ(1+d)]`` and fixed for its life (a clock
    that runs fast or slow: the EpTO paper's Lemma 5 ratio is
    ``(1+d)/(1-d)``). ``jitter`` ``j`` delays each round by a fresh uniform
    amount in ``[0, jδ]`` without shifting the next ones (scheduling noise).
    A process's first round comes at a uniformly random phase within its
    first interval, unless the caller gives it.

    ``loss`` is the probability that a ball copy is dropped. A partition drops
    every copy that *arrives* while it separates sender and receiver.
    """

    def __init__(
        self,
        config: Config,
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
    ) -> None:
        if not (isinstance(loss, int | float) and 0 <= loss < 1):
            raise ConfigurationError(f"loss must be in [0, 1), got {loss!r}")
        if not (isinstance(drift, int | float) and 0 <= drift < 1):
            raise ConfigurationError(f"drift must be in [0, 1), got {drift!r}")
        if not (isinstance(jitter, int | float) and 0 <= jitter < 1):
            raise ConfigurationError(f"jitter must be in [0, 1), got {jitter!r}")
        if quantum is not None and not (
            isinstance(quantum, int | float) and math.isfinite(quantum) and quantum > 0
        ):
            raise ConfigurationError(f"quantum must be a positive number, got {quantum!r}")
        self.quantum = None if quantum is None else float(quantum)
        self.config = config
        self.seed = seed
        self.latency: LatencyModel = latency if latency is not None else ConstantLatency(0.0)
        self.loss = float(loss)
        self.drift = float(drift)
        self.jitter = float(jitter)
        self.membership = Membership()
        self._sampler = sampler
        if not (pss == "full" or isinstance(pss, CyclonConfig)):
            raise ConfigurationError(f"pss must be 'full' or a CyclonConfig, got {pss!r}")
        if sampler is not None and pss != "full":
            raise ConfigurationError("give either sampler or pss=CyclonConfig, not both")
        if not (isinstance(pss_seeds, int) and pss_seeds >= 1):
            raise ConfigurationError(f"pss_seeds must be a positive integer, got {pss_seeds!r}")
        self.pss = pss
        """``"full"`` or the Cyclon configuration every process runs."""
        self.pss_seeds = pss_seeds
        self._peer_sent = self._peer_arrived = 0
        self._net_rng = random.Random(f"epto-sim/{seed}/network")
        self.schedule_rng = random.Random(f"epto-sim/{seed}/schedule")
        """The schedule's random stream (phases, drift, churn, workloads)."""
        self.now = 0.0
        self._times: list[float] = []
        self._buckets: dict[float, list[tuple[Any, ...]]] = {}
        self.processes: dict[ProcessId, _Member] = {}
        """Live processes: :class:`epto.Process`, or :class:`epto.Node` with Cyclon."""
        self.joined_at: dict[ProcessId, float] = {}
        self.left_at: dict[ProcessId, float] = {}
        self.broadcasts: dict[EventId, tuple[ProcessId, float]] = {}
        """Every event broadcast: ``event id -> (source, time)``."""
        self.observers: list[SimulationObserver] = []
        self._links: dict[tuple[ProcessId, ProcessId], float] = {}
        self._partitions: list[dict[ProcessId, int]] = []
        self._next_pid = 0
        self._entries_of_departed = 0
        self._sent = self._arrived = self._lost = self._cut = self._to_departed = 0
        self._in_flight = 0
        self._scheduled_broadcasts = 0
        self._constant = isinstance(self.latency, ConstantLatency)
        self.drain_every_input = False

    # -- membership ---------------------------------------------------------

    def add_process(
        self,
        pid: ProcessId | None = None,
        *,
        phase: float | None = None,
        interval: float | None = None,
        config: Config | None = None,
    ) -> ProcessId:
        """Start a process now (a new id unless ``pid`` is given).

        Its first round is due at ``now + phase`` (``phase`` defaults to a
        uniform draw in ``[0, interval)``), then every ``interval`` (defaults
        to the drifted round length).
        """
        if pid is None:
            pid = self._next_pid
        if pid in self.processes or pid in self.left_at:
            raise LocalProtocolError(f"process id {pid} was already used in this simulation")
        self._next_pid = max(self._next_pid, pid + 1)
        base = config if config is not None else self.config
        rng = self.schedule_rng
        if interval is None:
            interval = base.round_interval
            if self.drift:
                interval *= 1.0 + self.drift * (2.0 * rng.random() - 1.0)
        if interval != base.round_interval:
            base = attrs.evolve(base, round_interval=interval)
        if phase is None:
            phase = interval * rng.random()
        if not phase >= 0:
            raise LocalProtocolError(f"phase must be non-negative, got {phase!r}")
        proc_rng = random.Random(f"epto-sim/{self.seed}/process/{pid}")
        proc: _Member
        if isinstance(self.pss, CyclonConfig):
            # Join through random live processes (the first one starts alone).
            contacts = sorted(self.membership.sample_excluding(self.pss_seeds, pid, rng))
            proc = Node(
                pid,
                base,
                rng=proc_rng,
                now=self.now + phase - interval,
                sampler=self.pss,
                seeds=[PeerDescriptor(pid=c, address=b"") for c in contacts],
            )
            self.membership.add(pid)
        else:
            self.membership.add(pid)
            peers = (
                self._sampler(pid, self.membership)
                if self._sampler is not None
                else FullView(pid, self.membership)
            )
            proc = Process(pid, base, peers=peers, rng=proc_rng, now=self.now + phase - interval)
        self.processes[pid] = proc
        self.joined_at[pid] = self.now
        for p in self._partitions:
            p.setdefault(pid, -1)
        # A Cyclon node may ask for its first shuffle before now (its phase).
        self._push(max(proc.get_timer(), self.now), (_TIMER, pid, None, None))
        for obs in self.observers:
            obs.on_join(pid, self.now)
        return pid

    def add_processes(self, n: int) -> list[ProcessId]:
        return [self.add_process() for _ in range(n)]

    def remove_process(self, pid: ProcessId) -> None:
        """Crash ``pid`` now: no goodbye; balls in flight to it are dropped."""
        proc = self.processes.pop(pid)
        self.membership.discard(pid)
        self.left_at[pid] = self.now
        self._entries_of_departed += _process(proc).statistics().entries_received
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
        """Replace ``per_round`` processes every ``every`` (default δ) from
        ``start`` (default one δ from now) until ``stop``: the EpTO paper's α.

        A fractional ``per_round`` is carried over: 0.5 replaces one process
        every other round.
        """
        if not (isinstance(per_round, int | float) and per_round >= 0):
            raise ConfigurationError(f"churn must be non-negative, got {per_round!r}")
        step = every if every is not None else self.config.round_interval
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

    # -- network ------------------------------------------------------------

    def set_link_latency(self, src: ProcessId, dst: ProcessId, latency: float | None) -> None:
        """Fix the latency of every message from ``src`` to ``dst`` (``None``
        returns the link to the latency model)."""
        if latency is None:
            self._links.pop((src, dst), None)
        else:
            if not (math.isfinite(latency) and latency >= 0):
                raise ConfigurationError(f"latency must be non-negative, got {latency!r}")
            self._links[(src, dst)] = float(latency)
        self._constant = isinstance(self.latency, ConstantLatency) and not self._links

    def partition(
        self, groups: Iterable[Collection[ProcessId]], *, start: float, end: float
    ) -> None:
        """From ``start`` to ``end``, processes of different groups cannot reach
        each other; processes in no group (including later joiners) form one
        more group together. Copies arriving across the cut are dropped."""
        sides: dict[ProcessId, int] = {}
        for i, group in enumerate(groups):
            for pid in group:
                if pid in sides:
                    raise LocalProtocolError(f"process {pid} is in two groups of a partition")
                sides[pid] = i

        def begin() -> None:
            for pid in self.processes:
                sides.setdefault(pid, -1)
            self._partitions.append(sides)

        def heal() -> None:
            self._partitions = [p for p in self._partitions if p is not sides]

        self.call_at(start, begin)
        self.call_at(end, heal)

    def _separated(self, a: ProcessId, b: ProcessId) -> bool:
        return any(p.get(a, -1) != p.get(b, -1) for p in self._partitions)

    def _send(
        self, src: ProcessId, out: Sequence[tuple[ProcessId, NodeMessage]], now: float
    ) -> None:
        if self.pss == "full":
            self._send_balls(src, out, now)  # type: ignore[arg-type]
            return
        balls: list[tuple[ProcessId, Ball]] = []
        for dest, message in out:
            if isinstance(message, Mapping):
                balls.append((dest, message))
            else:
                self._send_peer(src, dest, message, now)
        if balls:
            self._send_balls(src, balls, now)

    def _send_peer(self, src: ProcessId, dest: ProcessId, message: object, now: float) -> None:
        self._peer_sent += 1
        rng = self._net_rng
        if self.loss and rng.random() < self.loss:
            return
        lat = self._links.get((src, dest)) if self._links else None
        if lat is None:
            lat = self.latency.sample(src, dest, rng)
        self._push(now + lat, (_PEER, dest, src, message))

    def _send_balls(self, src: ProcessId, out: list[tuple[ProcessId, Ball]], now: float) -> None:
        loss = self.loss
        rng = self._net_rng
        buckets = self._buckets
        times = self._times
        quantum = self.quantum
        self._sent += len(out)
        if self._constant:
            # One queue item per ball: every copy arrives at the same time.
            groups: dict[int, tuple[Ball, list[ProcessId]]] = {}
            for dest, ball in out:
                if loss and rng.random() < loss:
                    self._lost += 1
                    continue
                entry = groups.get(id(ball))
                if entry is None:
                    groups[id(ball)] = (ball, [dest])
                else:
                    entry[1].append(dest)
            for ball, dests in groups.values():
                self._in_flight += len(dests)
                self._push(now + self.latency.maximum, (_ARRIVE_MANY, dests, src, ball))
            return
        links = self._links
        sample = self.latency.sample
        ceil = math.ceil
        for dest, ball in out:
            if loss and rng.random() < loss:
                self._lost += 1
                continue
            lat = links.get((src, dest)) if links else None
            if lat is None:
                lat = sample(src, dest, rng)
            self._in_flight += 1
            at = now + lat
            if quantum is not None:
                at = ceil(at / quantum) * quantum
            item = (_ARRIVE, dest, src, ball)
            bucket = buckets.get(at)
            if bucket is None:
                buckets[at] = [item]
                heapq.heappush(times, at)
            else:
                bucket.append(item)

    def network_statistics(self) -> NetworkStatistics:
        return NetworkStatistics(
            sent=self._sent,
            arrived=self._arrived,
            lost=self._lost,
            cut=self._cut,
            to_departed=self._to_departed,
            in_flight=self._in_flight,
            peer_messages_sent=self._peer_sent,
            peer_messages_arrived=self._peer_arrived,
        )

    # -- scripting ----------------------------------------------------------

    def _push(self, at: float, item: tuple[Any, ...]) -> None:
        if self.quantum is not None:
            at = math.ceil(at / self.quantum) * self.quantum
        bucket = self._buckets.get(at)
        if bucket is None:
            self._buckets[at] = [item]
            heapq.heappush(self._times, at)
        else:
            bucket.append(item)

    def call_at(self, at: float, action: Callable[[], object]) -> None:
        """Run ``action()`` at virtual time ``at`` (not before now)."""
        if at < self.now:
            raise LocalProtocolError(f"cannot schedule at {at!r}, before now ({self.now!r})")
        self._push(at, (_CALL, action, None, None))

    def broadcast(self, pid: ProcessId, payload: bytes) -> EventId:
        """``pid`` broadcasts ``payload`` now."""
        proc = self.processes[pid]
        now = self.now
        eid = proc.broadcast(payload, now)
        self.broadcasts[eid] = (pid, now)
        for obs in self.observers:
            obs.on_broadcast(pid, eid, now)
        self._flush(pid, proc, now)
        return eid

    def broadcast_at(self, at: float, pid: ProcessId, payload: bytes) -> None:
        """Schedule a broadcast; skipped if ``pid`` has left by then."""

        self._scheduled_broadcasts += 1

        def action() -> None:
            self._scheduled_broadcasts -= 1
            if pid in self.processes:
                self.broadcast(pid, payload)

        self.call_at(at, action)

    def add_observer(self, observer: SimulationObserver) -> None:
        self.observers.append(observer)

    # -- running ------------------------------------------------------------

    def _flush(self, pid: ProcessId, proc: _Member, now: float) -> None:
        out = proc.messages_to_send()
        if out:
            self._send(pid, out, now)
        observers = self.observers
        for delivery in proc.deliveries():
            for obs in observers:
                obs.on_delivery(pid, delivery, now)

    def next_time(self) -> float | None:
        """When the next item is due, or None when nothing is scheduled."""
        return self._times[0] if self._times else None

    def step(self) -> bool:
        """Run every item due at the earliest scheduled time; False if none."""
        if not self._times:
            return False
        self.run_until(self._times[0])
        return True

    def run_until(self, end: float) -> None:
        """Run every item due at or before ``end``; ``now`` becomes ``end``."""
        times = self._times
        buckets = self._buckets
        procs = self.processes
        jitter = self.jitter
        rng = self.schedule_rng
        every_input = self.drain_every_input
        push = self._push
        while times and times[0] <= end:
            t = times[0]
            self.now = t
            items = buckets[t]
            i = 0
            try:
                # Items scheduled for ``t`` while it runs join ``items``.
                while i < len(items):
                    kind, a, b, c = items[i]
                    i += 1
                    if kind == _ARRIVE:
                        # The hot path: ``_arrive`` inlined.
                        self._in_flight -= 1
                        proc = procs.get(a)
                        if proc is None:
                            self._to_departed += 1
                        elif self._partitions and self._separated(b, a):
                            self._cut += 1
                        else:
                            self._arrived += 1
                            proc.receive(b, c, t)
                            if every_input:
                                self._flush(a, proc, t)
                    elif kind == _TIMER:
                        proc = procs.get(a)
                        if proc is None:
                            continue
                        proc.handle_timer(t)
                        self._flush(a, proc, t)
                        due = proc.get_timer()
                        if jitter:
                            due += jitter * proc.config.round_interval * rng.random()
                        push(due, (_TIMER, a, None, None))
                    elif kind == _ARRIVE_MANY:
                        self._in_flight -= len(a)
                        for dest in a:
                            self._arrive(procs, dest, b, c, t, every_input)
                    elif kind == _PEER:
                        node = procs.get(a)
                        if node is not None and not (self._partitions and self._separated(b, a)):
                            self._peer_arrived += 1
                            node.receive(b, c, t)
                            self._flush(a, node, t)
                    else:
                        a()
            finally:
                # On an exception, the items already run must not run again.
                del items[:i]
            heapq.heappop(times)
            del buckets[t]
        if end > self.now:
            self.now = end

    def _arrive(
        self,
        procs: Mapping[ProcessId, _Member],
        dest: ProcessId,
        src: ProcessId,
        ball: Ball,
        now: float,
        every_input: bool,
    ) -> None:
        proc = procs.get(dest)
        if proc is None:
            self._to_departed += 1
            return
        if self._partitions and self._separated(src, dest):
            self._cut += 1
            return
        self._arrived += 1
        proc.receive(src, ball, now)
        if every_input:
            self._flush(dest, proc, now)

    def run_rounds(self, rounds: float) -> None:
        """Run for ``rounds`` nominal round lengths."""
        self.run_until(self.now + rounds * self.config.round_interval)

    def quiescent(self) -> bool:
        """No broadcast scheduled, no ball in flight and no process holding an
        undelivered event."""
        if self._in_flight or self._scheduled_broadcasts:
            return False
        for proc in self.processes.values():
            st = proc.memory_sizes()
            if st.get("next_ball") or st.get("received"):
                return False
        return True

    def entries_processed(self) -> int:
        """Event copies received in balls, summed over every process that ever ran."""
        return self._entries_of_departed + sum(
            _process(p).statistics().entries_received for p in self.processes.values()
        )


def _process(member: _Member) -> Process:
    return member.process if isinstance(member, Node) else member


class DeliveryRecorder(SimulationObserver):
    """Records every delivery: per process, the event ids in delivery order,
    and the delay of each in-order delivery since its broadcast."""

    def __init__(self, simulation: Simulation) -> None:
        self._broadcasts = simulation.broadcasts
        self.sequences: dict[ProcessId, list[EventId]] = {}
        self.out_of_order: dict[ProcessId, list[EventId]] = {}
        self.delays: list[float] = []
        """Delivery time minus broadcast time, one per in-order delivery."""
        self.times: dict[ProcessId, list[float]] = {}
        for pid in simulation.processes:
            self.on_join(pid, simulation.now)

    def on_join(self, pid: ProcessId, now: float) -> None:
        self.sequences.setdefault(pid, [])
        self.times.setdefault(pid, [])

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        event = delivery.event
        eid = (event.source, event.seq)
        if delivery.tag is DeliveryTag.OUT_OF_ORDER:
            self.out_of_order.setdefault(pid, []).append(eid)
            return
        self.sequences[pid].append(eid)
        self.times[pid].append(now)
        sent = self._broadcasts.get(eid)
        if sent is not None:
            self.delays.append(now - sent[1])


class Cluster(Simulation):
    """A :class:`Simulation` of ``n`` processes with a :class:`DeliveryRecorder`
    attached: the harness that tests and the command line share.

    ``config`` defaults to :meth:`epto.Config.for_group` for ``n``. Processes
    are numbered ``0 .. n-1``; ``phases`` fixes their first rounds.
    """

    def __init__(
        self,
        n: int,
        *,
        seed: int = 0,
        config: Config | None = None,
        phases: Mapping[ProcessId, float] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            config if config is not None else Config.for_group(n), seed=seed, **options
        )
        self.recorder = DeliveryRecorder(self)
        self.add_observer(self.recorder)
        for pid in range(n):
            self.add_process(pid, phase=None if phases is None else phases.get(pid))

    def run_until_quiescent(self, max_rounds: float = 10_000) -> bool:
        """Run round by round until :meth:`quiescent`; False if ``max_rounds``
        passed first."""
        limit = self.now + max_rounds * self.config.round_interval
        while not self.quiescent():
            if self.now >= limit:
                return False
            self.run_rounds(1)
        return True

    def check(self, *, expected: Callable[[ProcessId, EventId], bool] | None = None) -> CheckReport:
        """:func:`epto.check.check` over every process that ever ran, with the
        set of broadcast events (so a never-broadcast delivery is caught)."""
        return check(self.recorder.sequences, broadcast=self.broadcasts, expected=expected)
