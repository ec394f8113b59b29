"""A seeded, deterministic virtual-time network for token-ring groups.

Links are reliable and FIFO while up, like TCP connections: every directed
link delivers in send order, with a random delay per message, so messages on
different links overtake one another. Loss is modelled the way a reliable
transport shows it: a link *breaks* (everything in flight on it and
everything sent while it is down is lost) and later reconnects. On top of that:
crashes, disconnections of a process (all its links down), partitions, and
joins of new identities. Everything is driven by one ``random.Random``: the
same seed gives the same run.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterable
from typing import Protocol

from .._event import EventId, ProcessId
from ._config import TokenRingConfig
from ._messages import Message
from ._process import TokenRingProcess


class Latency(Protocol):
    """One-way delay of a message; the latency models of
    ``epto.transports.virtual`` (constant, uniform, PlanetLab) fit."""

    def sample(self, src: int, dst: int, rng: random.Random) -> float: ...


class _Uniform:
    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi

    def sample(self, src: int, dst: int, rng: random.Random) -> float:
        return rng.uniform(self.lo, self.hi)


class TokenRingCluster:
    """Processes ``0 .. n-1`` (bootstrap members) on a simulated network.

    ``delay`` is ``(low, high)`` for a uniform one-way delay per message, or a
    latency model object with ``sample(src, dst, rng)``.
    """

    def __init__(
        self,
        n: int,
        config: TokenRingConfig,
        *,
        seed: int,
        delay: tuple[float, float] | Latency = (0.001, 0.005),
        loss: float = 0.0,
        break_duration: float = 0.05,
    ) -> None:
        self.rng = random.Random(seed)
        self.config = config
        self.latency: Latency = _Uniform(*delay) if isinstance(delay, tuple) else delay
        self.loss = loss
        """Probability that sending a message breaks its link (for
        ``break_duration``): the message and what is in flight are lost."""
        self.break_duration = break_duration
        self.stats = dict.fromkeys(("sent", "arrived", "lost", "cut", "to_departed"), 0)
        self.position: dict[EventId, int] = {}
        self.joined_at: dict[ProcessId, float] = {}
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self.procs: dict[ProcessId, TokenRingProcess] = {}
        self.crashed: set[ProcessId] = set()
        self.disconnected: set[ProcessId] = set()
        self._groups: dict[ProcessId, int] | None = None
        self._broken: set[tuple[ProcessId, ProcessId]] = set()
        self._epoch: dict[tuple[ProcessId, ProcessId], int] = {}
        self._last_arrival: dict[tuple[ProcessId, ProcessId], float] = {}
        self._timer_version: dict[ProcessId, int] = {}
        self.delivered: dict[ProcessId, list[EventId]] = {}
        self.delivered_at: dict[ProcessId, dict[EventId, float]] = {}
        self.broadcast_at: dict[EventId, float] = {}
        self.messages = 0
        members = list(range(n))
        for pid in members:
            proc = TokenRingProcess(
                pid, config, rng=random.Random(self.rng.random()), now=0.0, members=members
            )
            self._add(proc)

    # -- wiring -------------------------------------------------------------

    def _add(self, proc: TokenRingProcess) -> None:
        self.procs[proc.pid] = proc
        self.joined_at[proc.pid] = self.now
        self.delivered.setdefault(proc.pid, [])
        self.delivered_at.setdefault(proc.pid, {})
        self._flush(proc)

    def _push(self, at: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (at, next(self._counter), action))

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` at virtual time ``when``."""
        self._push(when, action)

    def _up(self, a: ProcessId, b: ProcessId) -> bool:
        if a in self.crashed or b in self.crashed:
            return False
        if a in self.disconnected or b in self.disconnected:
            return False
        if (a, b) in self._broken:
            return False
        return self._groups is None or self._groups.get(a) == self._groups.get(b)

    def _flush(self, proc: TokenRingProcess) -> None:
        pid = proc.pid
        for event in proc.deliveries():
            eid = event.event.id
            self.delivered[pid].append(eid)
            self.delivered_at[pid][eid] = self.now
            self.position[eid] = event.event.ts
        for dest, message in proc.messages_to_send():
            self._transmit(pid, dest, message)
        version = self._timer_version.get(pid, 0) + 1
        self._timer_version[pid] = version
        deadline = proc.get_timer()
        if deadline < math.inf:
            self._push(max(deadline, self.now), lambda: self._fire(pid, version))

    def _drop(self, src: ProcessId, dest: ProcessId) -> None:
        if dest in self.crashed:
            self.stats["to_departed"] += 1
        elif self._groups is not None and self._groups.get(src) != self._groups.get(dest):
            self.stats["cut"] += 1
        else:
            self.stats["lost"] += 1

    def _transmit(self, src: ProcessId, dest: ProcessId, message: Message) -> None:
        self.messages += 1
        self.stats["sent"] += 1
        link = (src, dest)
        if not self._up(src, dest) or dest not in self.procs:
            self._drop(src, dest)
            return
        if self.loss and self.rng.random() < self.loss:
            self.break_link(src, dest, self.break_duration)
            self.stats["lost"] += 1
            return
        delay = self.latency.sample(src, dest, self.rng)
        arrival = max(self.now + delay, self._last_arrival.get(link, 0.0))
        self._last_arrival[link] = arrival
        epoch = self._epoch.get(link, 0)

        def arrive() -> None:
            if self._epoch.get(link, 0) != epoch or not self._up(src, dest):
                self._drop(src, dest)
                return
            self.stats["arrived"] += 1
            proc = self.procs[dest]
            proc.receive(src, message, self.now)
            self._flush(proc)

        self._push(arrival, arrive)

    def _fire(self, pid: ProcessId, version: int) -> None:
        if self._timer_version.get(pid) != version or pid in self.crashed:
            return
        proc = self.procs[pid]
        proc.handle_timer(self.now)
        self._flush(proc)

    def _break_links_of(self, pids: Iterable[ProcessId]) -> None:
        chosen = set(pids)
        for a in self.procs:
            for b in self.procs:
                if a in chosen or b in chosen:
                    self._epoch[(a, b)] = self._epoch.get((a, b), 0) + 1

    # -- the run ------------------------------------------------------------

    def run_until(self, until: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= until:
            at, _, action = heapq.heappop(heap)
            self.now = max(self.now, at)
            action()
        self.now = max(self.now, until)

    # -- scenario actions -----------------------------------------------------

    def broadcast(self, pid: ProcessId, payload: bytes) -> EventId | None:
        proc = self.procs[pid]
        if pid in self.crashed or proc.excluded or proc.role.value == "joining":
            return None
        eid = proc.broadcast(payload, self.now)
        self.broadcast_at[eid] = self.now
        self._flush(proc)
        return eid

    def crash(self, pid: ProcessId) -> None:
        self.crashed.add(pid)

    def disconnect(self, pid: ProcessId) -> None:
        self.disconnected.add(pid)
        self._break_links_of([pid])

    def reconnect(self, pid: ProcessId) -> None:
        self.disconnected.discard(pid)

    def partition(self, *groups: Iterable[ProcessId]) -> None:
        self._groups = {p: i for i, group in enumerate(groups) for p in group}
        self._break_links_of(self.procs)

    def heal(self) -> None:
        self._groups = None

    def break_link(self, a: ProcessId, b: ProcessId, duration: float) -> None:
        """Break both directions of a link for ``duration``: in-flight messages are lost."""
        for link in ((a, b), (b, a)):
            self._epoch[link] = self._epoch.get(link, 0) + 1
            self._broken.add(link)

        def repair() -> None:
            self._broken.discard((a, b))
            self._broken.discard((b, a))

        self._push(self.now + duration, repair)

    def join(self, pid: ProcessId, contacts: Iterable[ProcessId]) -> TokenRingProcess:
        proc = TokenRingProcess(
            pid,
            self.config,
            rng=random.Random(self.rng.random()),
            now=self.now,
            contacts=tuple(contacts),
        )
        self._add(proc)
        return proc

    # -- results ------------------------------------------------------------

    def staying(self) -> list[ProcessId]:
        """Processes alive and not excluded (still in the view or joining)."""
        return [p for p, proc in self.procs.items() if p not in self.crashed and not proc.excluded]

    def in_flight(self) -> int:
        s = self.stats
        return s["sent"] - s["arrived"] - s["lost"] - s["cut"] - s["to_departed"]

    def latencies(self, pids: Iterable[ProcessId] | None = None) -> list[float]:
        """Delivery latency (delivery time minus broadcast time) of every
        delivery at ``pids`` (default: every process)."""
        out: list[float] = []
        for pid in self.procs if pids is None else pids:
            for eid, at in self.delivered_at[pid].items():
                sent = self.broadcast_at.get(eid)
                if sent is not None:
                    out.append(at - sent)
        return out
