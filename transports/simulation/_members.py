"""The members of the virtual-time network: EpTO processes (or Cyclon nodes)
and token-ring processes joining, crashing and broadcasting, and their
outputs handed to the network (``_network.py``) and to the observers. The
run loop is :class:`Simulation` (``_virtual.py``)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Literal

import attrs

from epto import (
    Ball,
    Config,
    ConfigurationError,
    CyclonConfig,
    Delivery,
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
from epto.tokenring import Role, TokenRingConfig, TokenRingProcess

from ._calendar import RING_TIMER, TIMER
from ._latency import LatencyModel
from ._network import VirtualNetwork

_Member = Process | Node | TokenRingProcess
_SENDING_ROLES = (Role.CORE, Role.EXTERNAL)


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


class Members(VirtualNetwork):
    """Processes, churn and broadcasts; see :class:`Simulation`."""

    def __init__(
        self,
        config: Config | TokenRingConfig,
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
        self._ring = config if isinstance(config, TokenRingConfig) else None
        if self._ring is not None and (drift or jitter or sampler is not None or pss != "full"):
            raise ConfigurationError(
                "a token ring has no rounds nor peer sampling: drift, jitter, sampler and "
                "pss do not apply"
            )
        if round_interval is None:
            round_interval = (
                config.heartbeat_interval
                if isinstance(config, TokenRingConfig)
                else config.round_interval
            )
        if not (isinstance(round_interval, int | float) and 0 < round_interval < math.inf):
            raise ConfigurationError(f"round_interval must be positive, got {round_interval!r}")
        self.round_interval = float(round_interval)
        self.seed = seed
        self.drift = float(drift)
        self.jitter = float(jitter)
        self.membership = Membership()
        """Live processes (for a token ring: not excluded from the view)."""
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
        self.schedule_rng = random.Random(f"epto-sim/{seed}/schedule")
        """The schedule's random stream (phases, drift, churn, workloads)."""
        self.processes: dict[ProcessId, _Member] = {}
        """Live processes: :class:`epto.Process`, :class:`epto.Node` with
        Cyclon, or :class:`epto.tokenring.TokenRingProcess`."""
        self.joined_at: dict[ProcessId, float] = {}
        self.left_at: dict[ProcessId, float] = {}
        self.broadcasts: dict[EventId, tuple[ProcessId, float]] = {}
        """Every event broadcast: ``event id -> (source, time)``."""
        self.observers: list[SimulationObserver] = []
        self._next_pid = 0
        self._entries_of_departed = 0
        self._scheduled_broadcasts = 0
        self._armed: dict[ProcessId, tuple[float, int]] = {}
        """Token ring: the live timer item of each process, ``(due, version)``."""
        self._versions = 0
        self.drain_every_input = False

    @property
    def mode(self) -> Literal["epto", "token-ring"]:
        return "epto" if self._ring is None else "token-ring"

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
        if self._ring is not None:
            if phase is not None or interval is not None or config is not None:
                raise LocalProtocolError("phase, interval and config are EpTO options")
            self._next_pid = max(self._next_pid, pid + 1)
            return self._add_ring_member(self._ring, pid, members, contacts)
        if members is not None or contacts is not None:
            raise LocalProtocolError("members and contacts are token-ring options")
        self._next_pid = max(self._next_pid, pid + 1)
        base = config if config is not None else self.config
        assert isinstance(base, Config)
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
        proc: Process | Node
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
        # A Cyclon node may ask for its first shuffle before now (its phase).
        self._push(max(proc.get_timer(), self.now), (TIMER, pid, None, None))
        for obs in self.observers:
            obs.on_join(pid, self.now)
        return pid

    def _add_ring_member(
        self,
        cfg: TokenRingConfig,
        pid: ProcessId,
        members: Sequence[ProcessId] | None,
        contacts: Collection[ProcessId] | None,
    ) -> ProcessId:
        rng = random.Random(f"epto-sim/{self.seed}/process/{pid}")
        if members is None and contacts is None:
            live = [p for p in self.membership if self.can_broadcast(p)]
            live.sort()
            contacts = self.schedule_rng.sample(live, min(self.pss_seeds, len(live)))
            if not contacts:
                members = [pid]
        if members is not None:
            proc = TokenRingProcess(pid, cfg, rng=rng, now=self.now, members=list(members))
        else:
            proc = TokenRingProcess(
                pid, cfg, rng=rng, now=self.now, contacts=sorted(contacts or ())
            )
        self.membership.add(pid)
        self.processes[pid] = proc
        self.joined_at[pid] = self.now
        for obs in self.observers:
            obs.on_join(pid, self.now)
        self._flush(pid, proc, self.now)
        return pid

    def add_processes(self, n: int) -> list[ProcessId]:
        """Start ``n`` processes; for a token ring with no process yet, they
        are the bootstrap members of a group of ``n``."""
        if self._ring is not None and not self.processes:
            pids = list(range(self._next_pid, self._next_pid + n))
            return [self.add_process(pid, members=pids) for pid in pids]
        return [self.add_process() for _ in range(n)]

    def remove_process(self, pid: ProcessId) -> None:
        """Crash ``pid`` now: no goodbye; messages in flight to it are dropped."""
        proc = self.processes.pop(pid)
        self.membership.discard(pid)
        self.left_at[pid] = self.now
        if isinstance(proc, TokenRingProcess):
            self._armed.pop(pid, None)
        else:
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
        proc = self.processes.get(pid)
        if proc is None:
            return False
        return not isinstance(proc, TokenRingProcess) or proc.role in _SENDING_ROLES

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
        """Schedule a broadcast; skipped if ``pid`` cannot broadcast by then."""

        self._scheduled_broadcasts += 1

        def action() -> None:
            self._scheduled_broadcasts -= 1
            if self.can_broadcast(pid):
                self.broadcast(pid, payload)

        self.call_at(at, action)

    def add_observer(self, observer: SimulationObserver) -> None:
        self.observers.append(observer)

    # -- running ------------------------------------------------------------

    def _send(
        self, src: ProcessId, out: Sequence[tuple[ProcessId, NodeMessage]], now: float
    ) -> None:
        if self.pss == "full":
            if self._ring is not None:
                self._send_links(src, out, now)
            else:
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

    def _flush(self, pid: ProcessId, proc: _Member, now: float) -> None:
        out = proc.messages_to_send()
        if out:
            self._send(pid, out, now)  # type: ignore[arg-type]
        observers = self.observers
        for delivery in proc.deliveries():
            for obs in observers:
                obs.on_delivery(pid, delivery, now)
        if self._ring is not None:
            self._arm(pid, proc)  # type: ignore[arg-type]

    def _arm(self, pid: ProcessId, proc: TokenRingProcess) -> None:
        """Keep one live timer item per token-ring process, due at ``get_timer()``."""
        due = proc.get_timer()
        if due == math.inf:
            self._armed.pop(pid, None)
            if proc.excluded:
                self.membership.discard(pid)
            return
        due = max(due, self.now)
        armed = self._armed.get(pid)
        if armed is None or armed[0] != due:
            self._versions += 1
            self._armed[pid] = (due, self._versions)
            self._push(due, (RING_TIMER, pid, self._versions, None))


def _process(member: Process | Node) -> Process:
    return member.process if isinstance(member, Node) else member
