"""Sequencing atoms over TCP with trio: the generic TCP node running an
:class:`epto.endpoint.AtomsEndpoint` (reliable FIFO links, as the engine
assumes).

::

    graph = SequencingGraph.build({0: {1, 2, 3}, 1: {2, 3, 4}})
    members = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", ...}
    config = NodeConfig(pid=2, members=members, mode="atoms", atoms=AtomsConfig(graph=graph))
    async with AtomsNode(config) as node:
        node.engine.publish(1, b"hello")   # to group 1, in the pairwise order
        async for delivery in node:
            print(delivery.event.source, delivery.event.payload)

Every node builds the same graph from the same membership, and every node
of ``members`` must run. The groups change while the nodes run through
the coordinator (by default the smallest node of ``members``)::

    coordinator.engine.add_group(7, {1, 3, 5})  # a new epoch, installed everywhere
    coordinator.engine.remove_group(0)
    coordinator.engine.replace_crashed(4)       # node 4 is down: its atoms move

(docs/atoms.md, "Groups that change at run time").
"""

from __future__ import annotations

import random
import time

import attrs

from epto import ConfigurationError, Limits, LocalProtocolError
from epto.endpoint import AtomsEndpoint, AtomsHandle, NodeConfig

from ._trio.tcp_config import node_transport
from .trio_tcp import TcpNode, TcpNodeConfig

__all__ = ["AtomsNode"]


class AtomsNode(TcpNode[AtomsEndpoint]):
    """One node of a sequencing-atoms deployment on TCP; an async context manager.

    Built from one :class:`epto.endpoint.NodeConfig` with ``mode="atoms"``,
    like every node: ``config.members`` maps every node of the deployment
    to ``"host:port"`` (this node listens on its own entry unless ``bind``
    or ``tcp`` says otherwise); ``config.atoms``
    (:class:`epto.atoms.AtomsConfig`) holds what every node must share: the
    graph, ``nodes`` (by default those of ``members``), ``coordinator`` and
    ``suspect_after`` (the crash detector's silence, seconds). ``group``,
    ``group_key``, ``seed`` and, for a signed group, ``signing_key`` and
    ``roster`` mean what they mean for every engine (docs/security.md).
    ``tcp`` (:class:`TcpNodeConfig`) holds the transport's other settings;
    by default they come from the configuration, with the stream limits of
    :class:`TcpNodeConfig` when ``config.limits`` is left at its default. In
    a given ``tcp``, the fields it shares with the configuration (``bind``,
    ``advertise``, ``delivery_buffer``, ``overflow``, ``flush_timeout``,
    ``limits``) must be left at their defaults or agree with it, as for
    :class:`~epto.transports.trio_tcp.TokenRingNode`; otherwise
    :class:`epto.ConfigurationError` names the field.
    """

    mode = "atoms"

    def __init__(self, config: NodeConfig, *, tcp: TcpNodeConfig | None = None) -> None:
        if config.resolved_mode() != "atoms" or config.atoms is None:
            raise ConfigurationError("AtomsNode needs NodeConfig(mode='atoms', atoms=...)")
        pid = config.pid
        if pid not in config.members:
            raise LocalProtocolError(f"members has no entry for this node ({pid})")
        default_bind = NodeConfig(pid=pid).bind
        bind = config.members[pid] if config.bind == default_bind else config.bind
        limits = TcpNodeConfig().limits if config.limits == Limits() else config.limits
        tcp = node_transport("AtomsNode", config, tcp, bind=bind, limits=limits)
        endpoint_config = attrs.evolve(config, limits=tcp.limits)
        self.config = endpoint_config
        """The configuration (with the transport's limits)."""

        def make_endpoint(now: float) -> AtomsEndpoint:
            return AtomsEndpoint(
                endpoint_config, now, rng=random.Random(config.seed), wall=time.time()
            )

        super().__init__(tcp, make_endpoint)
        self.graph = config.atoms.graph

    @property
    def engine(self) -> AtomsHandle:
        """Sequencing atoms' own operations (:class:`epto.endpoint.AtomsHandle`):
        ``publish(group, payload)``, and at the coordinator ``reconfigure``,
        ``add_group``, ``remove_group``, ``replace_crashed``; ``epoch``. Each
        is refused unless the node runs, and leaves at the node's next turn."""
        return self.endpoint.engine
