"""The virtual-time network: a seeded discrete-event simulation of many
processes, EpTO (:class:`epto.epidemic.Process`, or :class:`epto.epidemic.Node` with Cyclon) or
token-ring (:class:`epto.tokenring.TokenRingProcess`).

This module holds the run loop; the calendar queue is in ``_calendar.py``,
the network model (latency, loss, partitions, reliable FIFO links) in
``_network.py``, the members (joins, crashes, churn, broadcasts) in
``_members.py``, what differs between EpTO and the token ring in
``_engines.py``, the :class:`Cluster` harness in ``_cluster.py``. Queue items:

* a process's timer: a round timer re-armed from ``get_timer()`` when it
  fires (EpTO), or a versioned timer kept at ``get_timer()`` after every
  drain of the process's outputs (token ring);
* the arrival of a ball at one process, or at several when the latency is the
  same for every destination (constant latency: one queue item per ball);
* a Cyclon message, or a message on a reliable FIFO link (token ring);
* scripted actions (a broadcast, a crash, a join, a partition starting or
  healing, any callable).

The run loop dispatches on item kinds only; which kinds a process's items
take is its engine's choice.

Randomness comes from streams derived from the seed: the network's
(latency, loss), the schedule's (round phases, drift, churn, workload), and
the peer choices': one stream shared by every process over the full view
(each process draws only its gossip targets; a stream per process cost 2.5 kB
of state each, a tenth of a simulated process), one per Cyclon node (which
also draws its shuffles). Changing the loss rate does not move round phases;
the same seed gives the same run, byte for byte.

The static full view is one :class:`epto.epidemic.Membership` shared by every process
and updated on churn; nothing is copied per process. With
``pss=CyclonConfig(...)`` every process is instead an :class:`epto.epidemic.Node`
running Cyclon: a newcomer joins through ``pss_seeds`` live processes drawn
at random, and Cyclon's messages cross the same network (latency, loss,
partitions) as a queue kind of their own, counted apart from balls.

Outputs are drained after timers and broadcasts, and after every arrival
when ``Simulation.drain_every_input`` is set (the engine's default: EpTO
processes only produce output in a round, ``receive`` only fills the next
ball, EpTO paper Algorithm 1; token-ring processes answer every input).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from epto import ProcessId
from epto.wire import Ball

from ._calendar import ARRIVE, ARRIVE_MANY, LINK, PEER, TIMER, VERSIONED_TIMER
from ._engines import engine_for
from ._members import Adapter, Engine, EngineConfig, Members, SimulationPort

__all__ = ["Simulation"]


class Simulation(Members):
    """Many processes over a virtual-time network.

    ``config`` is the processes' configuration: an :class:`epto.Config` runs
    EpTO, a :class:`epto.tokenring.TokenRingConfig` runs a token ring
    (:attr:`mode`). For EpTO its ``round_interval`` is the nominal round
    length δ. ``drift`` ``d`` gives each process its own round length, uniform
    in ``[δ(1-d), δ(1+d)]`` and fixed for its life (a clock that runs fast or
    slow: the EpTO paper's Lemma 5 ratio is ``(1+d)/(1-d)``). ``jitter`` ``j``
    delays each round by a fresh uniform amount in ``[0, jδ]`` without
    shifting the next ones (scheduling noise). A process's first round comes
    at a uniformly random phase within its first interval, unless the caller
    gives it. A token ring has no rounds: drift and jitter must stay 0.

    ``round_interval`` is the step of :meth:`run_rounds` and of
    :meth:`schedule_churn` (default: ``Config.round_interval``, or a token
    ring's ``heartbeat_interval``).

    ``loss`` is the probability that a ball copy is dropped; for a token ring
    it is the probability that a send breaks its link for ``break_duration``
    (default: the latency model's maximum), see ``_network.py``. A partition
    drops every copy that *arrives* while it separates sender and receiver.

    ``max_items_per_instant`` bounds the queue items due at one instant of
    virtual time (``None``: 1,000,000 or 1,000 per live process, whichever is
    larger): past it, :meth:`run_until` raises
    :class:`~epto.transports.simulation.SimulationStalled` rather than spin
    forever on a run that makes no progress in virtual time.
    """

    def _engine_for(self, config: EngineConfig, port: SimulationPort) -> Engine:
        return engine_for(self, port, config)

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
        procs = self.endpoints
        jitter = self.jitter
        rng = self.schedule_rng
        every_input = self.drain_every_input
        push = self._push
        flush = self._flush
        armed = self._armed
        check_at = self._instant_limit()
        while times and times[0] <= end:
            t = times[0]
            self.now = t
            items = buckets[t]
            i = 0
            # Arrivals counted locally (two attribute updates per copy add
            # up over millions of copies) and written back before any other
            # kind of item runs, which may read the counters.
            landed = 0
            try:
                # Items scheduled for ``t`` while it runs join ``items``.
                while True:
                    n = len(items)
                    if i >= n:
                        break
                    if n > check_at:
                        # Stall detection, once per batch, never per item.
                        check_at = self._check_stall(t, n, len(procs))
                    while i < n:
                        kind, a, b, c = items[i]
                        i += 1
                        if kind == ARRIVE:
                            # The hot path: ``_arrive`` inlined.
                            proc = procs.get(a)
                            if proc is None:
                                self._in_flight -= 1
                                self._to_departed += 1
                            elif self._partitions and self._separated(b, a):
                                self._in_flight -= 1
                                self._cut += 1
                            else:
                                landed += 1
                                proc.receive(b, c, t)
                                if every_input:
                                    self._in_flight -= landed
                                    self._arrived += landed
                                    landed = 0
                                    flush(a, proc, t)
                            continue
                        if landed:
                            self._in_flight -= landed
                            self._arrived += landed
                            landed = 0
                        if kind == TIMER:
                            proc = procs.get(a)
                            if proc is None:
                                continue
                            proc.handle_timer(t)
                            flush(a, proc, t)
                            due = proc.get_timer()
                            if jitter:
                                due += jitter * proc.process.config.round_interval * rng.random()  # type: ignore[union-attr]
                            push(due, (TIMER, a, None, None))
                        elif kind == ARRIVE_MANY:
                            self._in_flight -= len(a)
                            for dest in a:
                                self._arrive(procs, dest, b, c, t, every_input)
                        elif kind == PEER:
                            node = procs.get(a)
                            if node is not None and not (
                                self._partitions and self._separated(b, a)
                            ):
                                self._peer_arrived += 1
                                node.receive(b, c, t)
                                flush(a, node, t)
                        elif kind == LINK:
                            self._in_flight -= 1
                            proc = procs.get(a)
                            if proc is None:
                                self._to_departed += 1
                            elif self._link_up(b, a, c[1]):
                                self._arrived += 1
                                proc.receive(b, c[0], t)
                                if every_input:
                                    flush(a, proc, t)
                        elif kind == VERSIONED_TIMER:
                            live = armed.get(a)
                            if live is not None and live[1] == b:
                                del armed[a]
                                proc = procs[a]
                                proc.handle_timer(t)
                                flush(a, proc, t)
                        else:
                            a()
            finally:
                self._in_flight -= landed
                self._arrived += landed
                # On an exception, the items already run must not run again.
                del items[:i]
            heapq.heappop(times)
            del buckets[t]
        if end > self.now:
            self.now = end

    def _arrive(
        self,
        procs: Mapping[ProcessId, Adapter],
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
        """Run for ``rounds`` round intervals."""
        self.run_until(self.now + rounds * self.round_interval)
