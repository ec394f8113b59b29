"""Byte endpoints in the simulator (``Simulation(wire=True)``): each EpTO
process runs as a full :class:`epto.endpoint.EptoEndpoint` (framing, sealing
with a group key, signatures, splitting), and what travels on the simulated
links is the bytes of its frames.

A message-level simulation encodes nothing (the same adapter, without the
framing); a wire simulation makes the endpoint's own decisions too (a frame
too large, forged or bound to another receiver is refused and counted in the
endpoint's statistics), at the cost of encoding every ball: meant for small
groups, off by default.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from epto import Config, Delivery, EventId, GroupKey, Limits, ProcessId
from epto.endpoint import EptoEndpoint, NodeConfig
from epto.epidemic import Node, Process


def address(pid: ProcessId) -> str:
    """The simulated address of ``pid`` (never dialled: the simulator routes by id)."""
    return f"sim:{pid}"


class WireProcess:
    """An EpTO process behind its full endpoint, driven by the simulator as
    it drives an adapter: inputs are frames (bytes), outputs are
    ``(destination, frame)``; everything else is the endpoint's adapter's."""

    __slots__ = ("_now", "adapter", "endpoint", "engine", "pid", "process")

    def __init__(
        self,
        pid: ProcessId,
        config: Config,
        *,
        now: float,
        seed: int,
        limits: Limits,
        members: list[ProcessId],
        group_key: GroupKey | None,
    ) -> None:
        node_config = NodeConfig(
            pid=pid,
            bind=address(pid),
            members={p: address(p) for p in members if p != pid},
            epto=config,
            limits=limits,
            group_key=group_key,
            seed=seed,
            incarnation=0,
        )
        self.endpoint = EptoEndpoint(node_config, now, rng=random.Random(seed), wall=max(0.0, now))
        self.adapter = self.endpoint.adapter
        self.engine: Node | Process = self.adapter.engine
        self.process: Process = self.adapter.process
        self.pid = pid
        self._now = now

    # The simulator's message path: the frame names its sender.

    def receive(self, sender: ProcessId, data: Any, now: float) -> None:
        self._now = now
        if isinstance(data, bytes):
            self.endpoint.receive(data, now)
        else:
            self.endpoint.reject("not-a-frame")

    def handle_timer(self, now: float) -> None:
        self._now = now
        self.endpoint.handle_timer(now)

    def get_timer(self) -> float:
        return self.endpoint.get_timer()

    def messages_to_send(self) -> list[tuple[ProcessId, Any]]:
        return [(t.dest, t.data) for t in self.endpoint.frames_to_send(self._now)]

    def broadcast(self, payload: bytes, now: float) -> EventId:
        self._now = now
        return self.endpoint.broadcast(payload, now)

    def next_delivery(self) -> Delivery | None:
        return self.adapter.next_delivery()

    def deliveries(self) -> Iterator[Delivery]:
        return self.adapter.deliveries()

    def can_broadcast(self) -> bool:
        return self.adapter.can_broadcast()

    def busy(self) -> bool:
        return self.adapter.busy()

    def flushed(self) -> bool:
        return self.adapter.flushed()

    # Membership: the simulator tells every endpoint of joins and crashes.

    def add_member(self, pid: ProcessId) -> None:
        self.endpoint.engine.add_member(pid, address(pid))

    def remove_member(self, pid: ProcessId) -> None:
        self.endpoint.engine.remove_member(pid)

    def rejected(self) -> dict[str, int]:
        """Frames this endpoint refused, by fault."""
        return dict(self.endpoint.statistics().rejected)
