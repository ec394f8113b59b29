"""The network model of the virtual-time network: latency, loss, partitions
and links, for the two kinds of traffic the simulated processes produce.

* **Datagrams** (EpTO balls and Cyclon messages): every copy independently
  takes the latency model's time and is dropped with probability ``loss``.
  Copies of a ball are never copied: receivers share the ball.
* **Reliable FIFO links** (the token ring's TCP connections): a message never
  overtakes an earlier one on the same directed link (its arrival is
  ``max(now + latency, last arrival on that link)``). Loss is what TCP shows
  of it: with probability ``loss`` a send *breaks* the link (both directions)
  for ``break_duration`` (or, with ``ROUND_TRIP``, for one round trip of that
  link: twice a latency drawn for it, what a TCP reconnection takes); the
  message, everything in flight on the link and
  everything sent while it is down are lost, and the link then reconnects.
  :meth:`VirtualNetwork.disconnect` breaks every link of a process until
  :meth:`VirtualNetwork.reconnect`.

For both, a partition drops what is sent across it and what *arrives*
across it while it lasts.

* **Streams** (wire mode of a stream engine, the token ring's full
  endpoints; ``_wire.py``): TCP streams over the reliable FIFO links. What
  one turn of a process has for a peer is one write, which opens a new
  stream with the sender's opening frames when the link's epoch changed
  since the last one; anything that drops a write (a partition at either
  end, a break) closes the stream, and so may the receiver
  (:meth:`VirtualNetwork.close_stream`): a stream never skips a frame.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Literal

import attrs

from epto import ConfigurationError, LocalProtocolError, ProcessId
from epto.wire import Ball

from ._calendar import ARRIVE, ARRIVE_MANY, LINK, PEER, CalendarQueue
from ._latency import ConstantLatency, LatencyModel, PlanetLabLatency
from ._wire import StreamWrite

Sides = dict[ProcessId, int]
"""A partition: process -> side (processes not listed are on side -1)."""


@attrs.frozen(kw_only=True, slots=True)
class NetworkStatistics:
    """What the network did with the messages handed to it (EpTO balls, or
    token-ring messages on links)."""

    sent: int
    """Ball copies (token-ring messages) handed to the network (one per destination)."""
    arrived: int
    """Copies handed to a live process's ``receive``."""
    lost: int
    """Copies dropped by the loss model (for links: by a broken link)."""
    cut: int
    """Copies dropped because a partition separated sender and receiver."""
    to_departed: int
    """Copies that arrived after their destination had left."""
    in_flight: int
    peer_messages_sent: int = 0
    """Peer sampling (Cyclon) messages handed to the network."""
    peer_messages_arrived: int = 0
    """Peer sampling messages handed to a live process."""


ROUND_TRIP: Literal["round-trip"] = "round-trip"
"""``break_duration`` for links that stay down one round trip of their own."""


class VirtualNetwork(CalendarQueue):
    """Latency, loss and partitions over the calendar queue."""

    def __init__(
        self,
        *,
        seed: int,
        latency: LatencyModel | None,
        loss: float,
        quantum: float | None,
        break_duration: float | Literal["round-trip"] | None = None,
        max_items_per_instant: int | None = None,
    ) -> None:
        super().__init__(quantum, max_items_per_instant)
        if not (isinstance(loss, int | float) and 0 <= loss < 1):
            raise ConfigurationError(f"loss must be in [0, 1), got {loss!r}")
        self.latency: LatencyModel = latency if latency is not None else ConstantLatency(0.0)
        self.loss = float(loss)
        if break_duration is None:
            break_duration = self.latency.maximum
        self._break_round_trip = break_duration == ROUND_TRIP
        if self._break_round_trip:
            break_duration = 0.0
        if not (isinstance(break_duration, int | float) and 0 <= break_duration < math.inf):
            raise ConfigurationError(
                "break_duration must be a non-negative number or "
                f"{ROUND_TRIP!r}, got {break_duration!r}"
            )
        self.break_duration = float(break_duration)
        """Links: how long a link broken by the loss model stays down (unless
        it stays down for one round trip of the link)."""
        self._net_rng = random.Random(f"epto-sim/{seed}/network")
        self._links: dict[tuple[ProcessId, ProcessId], float] = {}
        self._partitions: list[Sides] = []
        self._sent = self._arrived = self._lost = self._cut = self._to_departed = 0
        self._in_flight = 0
        self._peer_sent = self._peer_arrived = 0
        self._constant = isinstance(self.latency, ConstantLatency)
        # PlanetLab per link (the default of ``epto simulate``): the send loop
        # reads the matrix itself, one index per copy instead of a call.
        self._link_table = (
            self.latency.link_table() if isinstance(self.latency, PlanetLabLatency) else None
        )
        # Reliable FIFO links: last arrival per directed link, link epochs
        # (a break bumps them: what is in flight is lost), links down.
        self._last_arrival: dict[tuple[ProcessId, ProcessId], float] = {}
        self._epochs: dict[tuple[ProcessId, ProcessId], int] = {}
        self._process_epochs: dict[ProcessId, int] = {}
        self._broken: set[tuple[ProcessId, ProcessId]] = set()
        self._disconnected: dict[ProcessId, Sides] = {}
        # Streams (wire mode over links): closes per directed link (a part of
        # its epoch), the stream each sender opened last per link.
        self._streams = False
        self._closes: dict[tuple[ProcessId, ProcessId], int] = {}
        self._opened: dict[tuple[ProcessId, ProcessId], tuple[int, int, int, int]] = {}

    # -- latency and partitions ----------------------------------------------

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
        sides = _sides(groups)
        self.call_at(start, lambda: self._partitions.append(sides))
        self.call_at(end, lambda: self.heal(sides))

    def split(self, groups: Iterable[Collection[ProcessId]]) -> Sides:
        """Partition the processes now, until :meth:`heal` of what this returns."""
        sides = _sides(groups)
        self._partitions.append(sides)
        return sides

    def heal(self, sides: Sides | None = None) -> None:
        """End the partition ``sides`` (every partition when ``None``)."""
        if sides is None:
            kept = [id(d) for d in self._disconnected.values()]
            self._partitions = [p for p in self._partitions if id(p) in kept]
        else:
            self._partitions = [p for p in self._partitions if p is not sides]

    def _separated(self, a: ProcessId, b: ProcessId) -> bool:
        return any(p.get(a, -1) != p.get(b, -1) for p in self._partitions)

    def disconnect(self, pid: ProcessId) -> None:
        """Cut ``pid`` off from everyone until :meth:`reconnect`; its links break
        (what is in flight on them is lost)."""
        if pid not in self._disconnected:
            self._disconnected[pid] = self.split([[pid]])
        self._process_epochs[pid] = self._process_epochs.get(pid, 0) + 1

    def reconnect(self, pid: ProcessId) -> None:
        sides = self._disconnected.pop(pid, None)
        if sides is not None:
            self.heal(sides)

    def break_link(self, a: ProcessId, b: ProcessId, duration: float) -> None:
        """Break both directions of the link between ``a`` and ``b`` for
        ``duration``: what is in flight on it and what is sent meanwhile is lost.
        (Links only: datagrams are not affected.)"""
        epochs = self._epochs
        broken = self._broken
        for link in ((a, b), (b, a)):
            epochs[link] = epochs.get(link, 0) + 1
            broken.add(link)
        mark = (epochs[(a, b)], epochs[(b, a)])

        def repair() -> None:
            # A later break of the same link keeps it down for its own duration.
            if (epochs[(a, b)], epochs[(b, a)]) == mark:
                broken.discard((a, b))
                broken.discard((b, a))

        self.call_at(self.now + duration, repair)

    # -- datagrams ------------------------------------------------------------

    def _send_peer(self, src: ProcessId, dest: ProcessId, message: object, now: float) -> None:
        self._peer_sent += 1
        rng = self._net_rng
        if self.loss and rng.random() < self.loss:
            return
        lat = self._links.get((src, dest)) if self._links else None
        if lat is None:
            lat = self.latency.sample(src, dest, rng)
        self._push(now + lat, (PEER, dest, src, message))

    def _send_balls(
        self, src: ProcessId, out: Sequence[tuple[ProcessId, Ball]], now: float
    ) -> None:
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
                self._push(now + self.latency.maximum, (ARRIVE_MANY, dests, src, ball))
            return
        links = self._links
        sample = self.latency.sample
        table = None if links else self._link_table
        if table is not None:
            matrix, nodes = table
            row = (src % nodes) * nodes
        ceil = math.ceil
        push = heapq.heappush
        get = buckets.get
        sent = 0
        for dest, ball in out:
            if loss and rng.random() < loss:
                self._lost += 1
                continue
            if table is not None:
                at = now + matrix[row + dest % nodes]
            else:
                lat = links.get((src, dest)) if links else None
                if lat is None:
                    lat = sample(src, dest, rng)
                at = now + lat
            sent += 1
            if quantum is not None:
                # CalendarQueue._push's rounding, inlined: never before ``now + lat``.
                k = ceil(at / quantum)
                due = k * quantum
                at = due if due >= at else (k + 1) * quantum
            item = (ARRIVE, dest, src, ball)
            bucket = get(at)
            if bucket is None:
                buckets[at] = [item]
                push(times, at)
            else:
                bucket.append(item)
        self._in_flight += sent

    # -- reliable FIFO links --------------------------------------------------

    def _link_epoch(self, src: ProcessId, dest: ProcessId) -> tuple[int, int, int, int]:
        pe = self._process_epochs
        link = (src, dest)
        closes = self._closes.get(link, 0)
        return (self._epochs.get(link, 0), pe.get(src, 0), pe.get(dest, 0), closes)

    def _send_links(self, src: ProcessId, out: Iterable[tuple[ProcessId, Any]], now: float) -> None:
        for dest, message in out:
            at = self._link_arrival(src, dest, now)
            if at is not None:
                self._in_flight += 1
                self._push(at, (LINK, dest, src, (message, self._link_epoch(src, dest))))

    def _link_arrival(self, src: ProcessId, dest: ProcessId, now: float) -> float | None:
        """Count one message (or stream write) handed to the link ``src ->
        dest``: its arrival time, or None when it is dropped (cut by a
        partition, the link down, or broken now by the loss model)."""
        self._sent += 1
        link = (src, dest)
        if self._partitions and self._separated(src, dest):
            self._cut += 1
            return None
        if link in self._broken:
            self._lost += 1
            return None
        rng = self._net_rng
        if self.loss and rng.random() < self.loss:
            self._lost += 1
            down = self.break_duration
            if self._break_round_trip:
                lat = self._links.get(link) if self._links else None
                if lat is None:
                    lat = self.latency.sample(src, dest, rng)
                down = max(2 * lat, self.quantum or 0.0)
            self.break_link(src, dest, down)
            return None
        lat = self._links.get(link) if self._links else None
        if lat is None:
            lat = self.latency.sample(src, dest, rng)
        last = self._last_arrival
        at = max(now + lat, last.get(link, 0.0))
        last[link] = at
        return at

    # -- streams (wire mode over links) ---------------------------------------

    def _send_streams(
        self, src: ProcessId, out: Iterable[tuple[ProcessId, Any]], now: float
    ) -> None:
        """Stream endpoints' frames: one write per destination (its frames in
        order), on the link's current stream, which a write opens with the
        sender's opening frames (:meth:`_open_stream`)."""
        writes: dict[ProcessId, list[object]] = {}
        for dest, frame in out:
            writes.setdefault(dest, []).append(frame)
        for dest, frames in writes.items():
            self._write(src, dest, frames, now, open_stream=True)

    def _write(
        self,
        src: ProcessId,
        dest: ProcessId,
        frames: Sequence[object],
        now: float,
        *,
        open_stream: bool,
    ) -> None:
        """One write on the stream ``src -> dest`` (``open_stream``: starting
        a new stream with the opening frames; not for an adversary's frame)."""
        at = self._link_arrival(src, dest, now)
        if at is None:
            # Whatever dropped it broke the stream: what follows opens a new one.
            self.close_stream(src, dest)
            return
        link = (src, dest)
        stream = self._link_epoch(src, dest)
        if open_stream and self._opened.get(link) != stream:
            frames = [*self._open_stream(src, dest), *frames]
            self._opened[link] = stream
        self._in_flight += 1
        write = StreamWrite(tuple(frames), stream)
        self._push(at, (LINK, dest, src, (write, stream)))

    def _open_stream(self, src: ProcessId, dest: ProcessId) -> Sequence[object]:
        """The frames a new stream from ``src`` to ``dest`` starts with."""
        return ()

    def close_stream(self, src: ProcessId, dest: ProcessId) -> None:
        """Close the stream ``src -> dest`` (one direction): what is in
        flight on it is lost, and the next write opens a new stream."""
        link = (src, dest)
        self._closes[link] = self._closes.get(link, 0) + 1

    def _link_up(self, src: ProcessId, dest: ProcessId, epoch: tuple[int, int, int, int]) -> bool:
        """Whether a message sent on ``src -> dest`` in ``epoch`` may arrive now;
        counts it as lost or cut if not."""
        if self._partitions and self._separated(src, dest):
            self._cut += 1
            if self._streams:
                self.close_stream(src, dest)  # a stream never skips a frame
            return False
        if self._link_epoch(src, dest) != epoch:
            self._lost += 1
            return False
        return True

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


def _sides(groups: Iterable[Collection[ProcessId]]) -> Sides:
    sides: Sides = {}
    for i, group in enumerate(groups):
        for pid in group:
            if pid in sides:
                raise LocalProtocolError(f"process {pid} is in two groups of a partition")
            sides[pid] = i
    return sides
