"""Sequencing atoms over TCP with trio: the generic TCP node running an
:class:`epto.endpoint.AtomsEndpoint` (reliable FIFO links, as the engine
assumes).

::

    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}})
    addresses = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", ...}
    async with AtomsNode(2, graph, addresses) as node:
        node.engine.publish(1, b"hello")   # to group 1, in the pairwise order
        async for delivery in node:
            print(delivery.event.source, delivery.event.payload)

Every node builds the same graph from the same membership, and every node
of ``addresses`` must run. The groups change while the nodes run through
the coordinator (by default the smallest node of ``addresses``)::

    coordinator.engine.add_group(7, {1, 3, 5})  # a new epoch, installed everywhere
    coordinator.engine.remove_group(0)
    coordinator.engine.replace_crashed(4)       # node 4 is down: its atoms move

(docs/atoms.md, "Groups that change at run time").
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Mapping

import attrs

from epto import GroupKey, LocalProtocolError, ProcessId
from epto.atoms import SequencingGraph
from epto.endpoint import Address, AtomsEndpoint, AtomsHandle

from .trio_tcp import TcpNode, TcpNodeConfig

__all__ = ["AtomsNode"]


class AtomsNode(TcpNode[AtomsEndpoint]):
    """One node of a sequencing-atoms deployment on TCP; an async context manager.

    ``addresses`` maps every node of the deployment to ``"host:port"``; this
    node listens on its own entry unless ``tcp`` says otherwise. ``nodes``
    (by default those of ``addresses``), ``coordinator`` and
    ``suspect_after`` (the crash detector's silence, seconds) are
    :class:`epto.atoms.AtomsProcess`'s and must be the same at every node.
    A signed group sets ``signing_key`` and ``roster`` at every node
    (docs/security.md).
    """

    mode = "atoms"

    def __init__(
        self,
        pid: ProcessId,
        graph: SequencingGraph,
        addresses: Mapping[ProcessId, Address],
        *,
        tcp: TcpNodeConfig | None = None,
        frame_group: int = 0,
        group_key: GroupKey | None = None,
        seed: int | None = None,
        nodes: Collection[ProcessId] | None = None,
        coordinator: ProcessId | None = None,
        suspect_after: float | None = None,
        signing_key: bytes | None = None,
        roster: Mapping[ProcessId, bytes] | None = None,
    ) -> None:
        if pid not in addresses:
            raise LocalProtocolError(f"addresses has no entry for this node ({pid})")
        config = tcp if tcp is not None else TcpNodeConfig(bind=addresses[pid])
        if tcp is not None and tcp.bind == TcpNodeConfig().bind:
            config = attrs.evolve(tcp, bind=addresses[pid])

        def make_endpoint(now: float) -> AtomsEndpoint:
            return AtomsEndpoint(
                pid,
                graph,
                addresses=addresses,
                now=now,
                wall=time.time(),
                limits=config.limits,
                frame_group=frame_group,
                group_key=group_key,
                rng=random.Random(seed),
                nodes=nodes,
                coordinator=coordinator,
                suspect_after=suspect_after,
                signing_key=signing_key,
                roster=roster,
            )

        super().__init__(config, make_endpoint)
        self.graph = graph

    @property
    def engine(self) -> AtomsHandle:
        """Sequencing atoms' own operations (:class:`epto.endpoint.AtomsHandle`):
        ``publish(group, payload)``, and at the coordinator ``reconfigure``,
        ``add_group``, ``remove_group``, ``replace_crashed``; ``epoch``. Each
        is refused unless the node runs, and leaves at the node's next turn."""
        return self.endpoint.engine
