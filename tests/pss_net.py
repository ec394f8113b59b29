"""A small deterministic discrete-event driver for Cyclon samplers and Nodes.

Both expose ``receive``, ``handle_timer``, ``get_timer`` and
``messages_to_send``; this driver delivers messages after a seeded random
latency, fires timers in time order, and drops messages to absent peers
(crashed or not yet joined), as a network would.
"""

from __future__ import annotations

import heapq
import itertools
import random
from typing import Any

import epto
import epto.epidemic


class Net:
    def __init__(self, seed: int, *, latency: tuple[float, float] = (0.005, 0.05)) -> None:
        self.rng = random.Random(seed)
        self.latency = latency
        self.now = 0.0
        self.nodes: dict[int, Any] = {}
        self._queue: list[tuple[float, int, int, int, Any]] = []
        self._armed: dict[int, float] = {}
        self._seq = itertools.count()
        self.rejected = 0
        self.sent = 0

    def add(self, pid: int, node: Any) -> None:
        self.nodes[pid] = node
        self._flush(pid, node)

    def remove(self, pid: int) -> Any:
        """Crash ``pid``: it vanishes; messages to it are dropped."""
        self._armed.pop(pid, None)
        return self.nodes.pop(pid)

    def flush(self, pid: int) -> None:
        """Send what ``pid`` has queued (after an input the driver made, like a broadcast)."""
        self._flush(pid, self.nodes[pid])

    def _flush(self, pid: int, node: Any) -> None:
        lo, hi = self.latency
        for dest, msg in node.messages_to_send():
            self.sent += 1
            when = self.now + self.rng.uniform(lo, hi)
            heapq.heappush(self._queue, (when, next(self._seq), dest, pid, msg))
        timer = node.get_timer()
        if self._armed.get(pid) != timer and timer != float("inf"):
            self._armed[pid] = timer
            heapq.heappush(self._queue, (timer, next(self._seq), pid, -1, None))

    def run_until(self, t: float) -> None:
        queue = self._queue
        nodes = self.nodes
        while queue and queue[0][0] <= t:
            when, _, dest, sender, msg = heapq.heappop(queue)
            node = nodes.get(dest)
            if node is None:
                continue
            self.now = when
            if sender == -1:
                if self._armed.get(dest) != when:
                    continue
                del self._armed[dest]
                node.handle_timer(when)
            else:
                try:
                    node.receive(sender, msg, when)
                except epto.RemoteProtocolError:
                    self.rejected += 1
            self._flush(dest, node)
        self.now = t


def address(pid: int) -> bytes:
    return b"10.0.%d.%d:9000" % (pid // 256, pid % 256)


def seed_of(pid: int) -> epto.epidemic.PeerDescriptor:
    return epto.epidemic.PeerDescriptor(pid=pid, address=address(pid), age=0)


def in_degrees(samplers: dict[int, epto.epidemic.Cyclon]) -> dict[int, int]:
    deg = dict.fromkeys(samplers, 0)
    for c in samplers.values():
        for d in c.view():
            if d.pid in deg:
                deg[d.pid] += 1
    return deg
