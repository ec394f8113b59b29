"""One entry point for a trio node, whichever ordering engine the configuration picks.

::

    config = NodeConfig(pid=1, bind="127.0.0.1:9001", members=members, mode="auto")
    async with open_node(config) as node:  # UdpNode, TokenRingNode or AtomsNode
        node.broadcast(b"hello")
        async for delivery in node:  # epto.Delivery, in the group's total order
            print(delivery.event.payload)

``mode="epto"`` runs :class:`~epto.transports.trio_udp.UdpNode` (EpTO over
UDP datagrams). ``mode="token-ring"`` runs
:class:`~epto.transports.trio_tcp.TokenRingNode` (the token ring over TCP
streams, which gives it the reliable FIFO links it assumes). ``mode="auto"``
picks by group size (:meth:`NodeConfig.resolved_mode`). ``mode="atoms"``
runs :class:`~epto.transports.trio_atoms.AtomsNode` (sequencing atoms over
TCP, for many overlapping groups: its order is pairwise, not total; see
docs/atoms.md).

Addresses: in token-ring mode every ``"host:port"`` of the configuration
(``bind``, ``members``, ``contacts``, ``advertise``) is a **TCP** address, the
same text an EpTO node would use for UDP. A group therefore keeps one address
list whichever mode it runs in; the ports must be free for TCP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, Self

from epto import Delivery, EventId, ProcessId
from epto.endpoint import NodeConfig

from .trio_atoms import AtomsNode
from .trio_tcp import MemberExcludedError, TokenRingNode
from .trio_udp import UdpNode

__all__ = [
    "GroupNode",
    "GroupStatistics",
    "MemberExcludedError",
    "open_node",
]


class GroupStatistics(Protocol):
    """The counters every engine's node statistics have."""

    @property
    def broadcasts(self) -> int: ...

    @property
    def delivered(self) -> int: ...

    @property
    def rejected(self) -> Mapping[str, int]: ...

    @property
    def delivery_queue(self) -> int: ...

    @property
    def deliveries_dropped(self) -> int: ...


class GroupNode(Protocol):
    """What every engine's trio node offers (an async context manager)."""

    mode: str
    address: str

    @property
    def pid(self) -> ProcessId: ...

    def broadcast(self, payload: bytes) -> EventId: ...

    def statistics(self) -> GroupStatistics: ...

    def __aiter__(self) -> Self: ...

    async def __anext__(self) -> Delivery: ...

    async def aclose(self) -> None: ...

    def abort(self) -> None: ...


if TYPE_CHECKING:

    def _all_are_group_nodes(node: UdpNode | TokenRingNode | AtomsNode) -> GroupNode:
        return node  # checked by mypy: every node class has the protocol's surface


def open_node(config: NodeConfig) -> UdpNode | TokenRingNode | AtomsNode:
    """The node ``config`` asks for, not started yet: enter it with ``async with``.

    Every kind has ``broadcast(payload) -> EventId``, async iteration of
    :class:`epto.Delivery`, ``statistics()`` (``broadcasts``, ``delivered``,
    ``rejected``, ``delivery_queue``, ``deliveries_dropped`` in all, plus each
    engine's own counters), ``pid``, ``address``, ``mode``, ``aclose()`` and
    ``abort()`` (:class:`GroupNode`); engine-specific operations are on
    ``node.engine`` where the engine has them. Raises
    :class:`epto.ConfigurationError` for a configuration the engine cannot
    run (the token ring with a Cyclon sampler).

    In token-ring mode the node is ``TokenRingNode(config)``: ``bind``,
    ``members``, ``contacts`` and ``advertise`` are TCP addresses, ``limits``
    left at its default (``epto.Limits()``, sized for one UDP datagram)
    becomes the token ring's stream limits
    (:meth:`~epto.transports.trio_tcp.TokenRingNode.stream_limits`), and the
    transport's other settings derive from the configuration. EpTO's
    parameters (``epto``, ``round_interval``, ``clock``, ``tagged_delivery``,
    ``group_size``) do not apply.

    In atoms mode the node is ``AtomsNode(config)`` (``config.atoms`` holds
    the sequencing graph; ``members`` are TCP addresses): ``broadcast``
    publishes to a group of this node's, and ``node.engine.publish(group,
    payload)`` to a chosen one.
    """
    mode = config.resolved_mode()
    if mode == "token-ring":
        return TokenRingNode(config)
    if mode == "atoms":
        return AtomsNode(config)
    return UdpNode(config)
