"""One entry point for a trio node, whichever ordering engine the configuration picks.

::

    config = NodeConfig(pid=1, bind="127.0.0.1:9001", members=members, mode="auto")
    async with open_node(config) as node:  # TrioNode or TokenRingNode
        node.broadcast(b"hello")
        async for delivery in node:  # epto.Delivery, in the group's total order
            print(delivery.event.payload)

``mode="epto"`` runs :class:`~epto.transports.trio_udp.TrioNode` (EpTO over
UDP datagrams). ``mode="token-ring"`` runs
:class:`~epto.transports.trio_tcp.TokenRingNode` (the token ring over TCP
streams, which gives it the reliable FIFO links it assumes). ``mode="auto"``
picks by group size (:meth:`NodeConfig.resolved_mode`).

Addresses: in token-ring mode every ``"host:port"`` of the configuration
(``bind``, ``members``, ``contacts``, ``advertise``) is a **TCP** address, the
same text an EpTO node would use for UDP. A group therefore keeps one address
list whichever mode it runs in; the ports must be free for TCP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, Self

import attrs

from epto import Delivery, EventId, Limits, ProcessId
from epto.endpoint import Address, NodeConfig

from .trio_tcp import MemberExcludedError, TokenRingNode, TokenRingNodeConfig
from .trio_udp import TrioNode

__all__ = [
    "GroupNode",
    "GroupStatistics",
    "MemberExcludedError",
    "open_node",
    "token_ring_node_config",
]


class GroupStatistics(Protocol):
    """The counters both engines' statistics have."""

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
    """What both engines' trio nodes offer (an async context manager)."""

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

    def _both_are_group_nodes(node: TrioNode | TokenRingNode) -> GroupNode:
        return node  # checked by mypy: both classes have the protocol's surface


def open_node(config: NodeConfig) -> TrioNode | TokenRingNode:
    """The node ``config`` asks for, not started yet: enter it with ``async with``.

    Both kinds have ``broadcast(payload) -> EventId``, async iteration of
    :class:`epto.Delivery`, ``statistics()`` (``broadcasts``, ``delivered``,
    ``rejected``, ``delivery_queue``, ``deliveries_dropped`` in both, plus each
    engine's own counters), ``pid``, ``address``, ``mode``, ``aclose()`` and
    ``abort()``. Raises :class:`epto.ConfigurationError` for a configuration the
    engine cannot run (the token ring with a Cyclon sampler).
    """
    if config.resolved_mode() == "token-ring":
        return TokenRingNode(token_ring_node_config(config))
    return TrioNode(config)


def token_ring_node_config(config: NodeConfig) -> TokenRingNodeConfig:
    """The :class:`TokenRingNodeConfig` of a :class:`NodeConfig` (token-ring mode).

    ``bind``, ``members``, ``contacts`` and ``advertise`` are used as TCP
    addresses. ``limits`` left at its default (``epto.Limits()``, sized for one
    UDP datagram) becomes the token ring's stream limits (1 MiB frames, since
    token states and catch-ups grow with the unstable messages); any other
    value is used as it is. ``signing_key`` and ``roster`` sign and verify
    the token ring's events as they do EpTO's. ``incarnation`` and
    ``data_dir`` make a member started again under its id come back as that
    member (docs/token-ring.md, *Restart*). EpTO's parameters (``epto``, ``round_interval``,
    ``clock``, ``tagged_delivery``, ``group_size``) do not apply.
    """
    members: dict[ProcessId, Address] = dict(config.members)
    if not config.contacts:
        members.setdefault(config.pid, config.advertise or config.bind)
    result = TokenRingNodeConfig(
        pid=config.pid,
        bind=config.bind,
        members=members,
        contacts=dict(config.contacts),
        advertise=config.advertise,
        group=config.group,
        group_key=config.group_key,
        signing_key=config.signing_key,
        roster=dict(config.roster) if config.roster is not None else None,
        seed=config.seed,
        delivery_buffer=config.delivery_buffer,
        overflow=config.overflow,
        flush_timeout=config.flush_timeout,
        incarnation=config.incarnation,
        data_dir=config.data_dir,
    )
    # Set together: the window budgets are checked against the limits.
    limits = result.limits if config.limits == Limits() else config.limits
    return attrs.evolve(result, tokenring=config.tokenring, limits=limits)
