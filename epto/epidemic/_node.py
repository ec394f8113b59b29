"""A node: one EpTO process and its peer sampler, as one sans-IO object.

A driver (the virtual-time network, the trio or ZeroMQ transports) runs a
:class:`Node` the same way whichever peer sampler it uses: feed every message
that arrives to :meth:`Node.receive`, call :meth:`Node.handle_timer` when
:meth:`Node.get_timer` is due, send what :meth:`Node.messages_to_send`
returns (resolving destinations with :meth:`Node.address_of` when it needs
addresses), and drain deliveries. Balls (mappings) go to the EpTO process;
Cyclon messages go to the Cyclon sampler.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Literal, TypeAlias

import attrs

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Ball, Delivery, Event, EventId, ProcessId
from ._config import Config
from ._cyclon import Cyclon, CyclonConfig, CyclonStatistics
from ._peer_messages import Leave, PeerDescriptor, PeerMessage, ShuffleReply, ShuffleRequest
from ._process import Process, ProcessStatistics
from ._sampler import FullView, Membership

NodeMessage: TypeAlias = Ball | PeerMessage
"""What nodes send each other: an EpTO ball or a peer sampling message."""

_PEER_MESSAGES = (ShuffleRequest, ShuffleReply, Leave)


@attrs.frozen(kw_only=True, slots=True)
class NodeStatistics:
    """The process's counters, the sampler's (None for a full view), and the
    messages the node itself rejected, by fault label."""

    process: ProcessStatistics
    sampler: CyclonStatistics | None
    rejected: Mapping[str, int]


class Node:
    """An EpTO process with its peer sampler.

    ``sampler="full"`` (the default) samples uniformly from ``members``: an
    iterable of ids, a shared :class:`Membership`, or a mapping from id to
    transport address (which :meth:`address_of` then answers from).
    A :class:`CyclonConfig` runs Cyclon instead, bootstrapped from ``seeds``
    (descriptors of peers already in the group); ``address`` is what this node
    advertises to others in its Cyclon descriptor.

    The Cyclon sampler draws from its own random stream, derived from ``rng``,
    so the same seed gives the same run.
    """

    def __init__(
        self,
        pid: ProcessId,
        config: Config,
        *,
        rng: random.Random,
        now: float,
        sampler: Literal["full"] | CyclonConfig = "full",
        members: Membership | Iterable[ProcessId] | Mapping[ProcessId, bytes] = (),
        seeds: Iterable[PeerDescriptor] = (),
        address: bytes = b"",
        signer: Callable[[Event], bytes] | None = None,
        incarnation: int = 0,
    ) -> None:
        self.pid = pid
        self.address = bytes(address)
        self._addresses: Mapping[ProcessId, bytes] = {}
        self.cyclon: Cyclon | None
        self.full_view: FullView | None
        if isinstance(sampler, CyclonConfig):
            self.cyclon = Cyclon(
                pid,
                sampler,
                address=self.address,
                seeds=seeds,
                rng=random.Random(rng.getrandbits(64)),
                now=now,
            )
            self.full_view = None
            peers: FullView | Cyclon = self.cyclon
        elif sampler == "full":
            if isinstance(members, Mapping):
                self._addresses = dict(members)
                members = members.keys()
            self.cyclon = None
            self.full_view = FullView(pid, members)
            peers = self.full_view
        else:
            raise LocalProtocolError(f"sampler must be 'full' or a CyclonConfig, got {sampler!r}")
        self.process = Process(
            pid, config, peers=peers, rng=rng, now=now, signer=signer, incarnation=incarnation
        )
        self._closed = False
        self._rejected: dict[str, int] = {}

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """EpTO-broadcast ``payload``; returns its event id."""
        if self._closed:
            raise LocalProtocolError("broadcast on a node that has left")
        return self.process.broadcast(payload, now)

    def receive(self, sender: ProcessId, message: object, now: float) -> None:
        """Feed one message from ``sender``.

        Raises :class:`RemoteProtocolError` for a message that is neither a
        ball nor a peer sampling message this node runs; the fault is counted
        (in :attr:`NodeStatistics.rejected`, or in the sampler's counters for
        a malformed Cyclon message) and the node is unchanged.
        """
        if self._closed:
            return
        if isinstance(message, Mapping):
            self.process.receive(sender, message, now)
        elif isinstance(message, _PEER_MESSAGES):
            if self.cyclon is not None:
                self.cyclon.receive(sender, message, now)
            elif not isinstance(message, Leave):
                # A full view has no use for shuffles; a Leave is harmless and
                # left to whoever manages the membership.
                self._reject("unexpected-peer-message", message)
        else:
            self._reject("unknown-message", message)

    def handle_timer(self, now: float) -> None:
        """Run the EpTO round and the Cyclon shuffle that are due."""
        if self._closed:
            return
        if self.cyclon is not None:
            self.cyclon.handle_timer(now)
        self.process.handle_timer(now)

    def leave(self, now: float) -> None:
        """Leave the group: Cyclon tells its view; the node stops gossiping.

        Messages queued before (and the Leave messages) are still returned by
        :meth:`messages_to_send`; later inputs are ignored.
        """
        if self._closed:
            return
        if self.cyclon is not None:
            self.cyclon.leave(now)
        self._closed = True

    # -- outputs ------------------------------------------------------------

    def messages_to_send(self) -> list[tuple[ProcessId, NodeMessage]]:
        """``(destination, message)`` pairs, peer sampling messages first; drains."""
        out: list[tuple[ProcessId, NodeMessage]] = []
        if self.cyclon is not None:
            out.extend(self.cyclon.messages_to_send())
        if not self._closed:
            out.extend(self.process.messages_to_send())
        else:
            self.process.messages_to_send()
        return out

    def get_timer(self) -> float:
        """The earliest deadline of the process and the sampler."""
        if self._closed:
            return float("inf")
        timer = self.process.get_timer()
        if self.cyclon is not None:
            timer = min(timer, self.cyclon.get_timer())
        return timer

    def address_of(self, pid: ProcessId) -> bytes | None:
        """Where to send to ``pid``, if the node knows (Cyclon descriptors, or
        the address mapping given as ``members``)."""
        if self.cyclon is not None:
            return self.cyclon.address_of(pid)
        return self._addresses.get(pid)

    def next_delivery(self) -> Delivery | None:
        return self.process.next_delivery()

    def deliveries(self) -> Iterator[Delivery]:
        return self.process.deliveries()

    # -- introspection ------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def config(self) -> Config:
        """The EpTO configuration of the process."""
        return self.process.config

    def memory_sizes(self) -> dict[str, int]:
        """The process's container sizes, and Cyclon's view and pending
        requests (``cyclon_view``, ``cyclon_pending``) when it runs one."""
        sizes = self.process.memory_sizes()
        if self.cyclon is not None:
            stats = self.cyclon.statistics()
            sizes["cyclon_view"] = stats.view_size
            sizes["cyclon_pending"] = stats.pending
        return sizes

    def descriptor(self) -> PeerDescriptor:
        """This node as a Cyclon seed for others."""
        return PeerDescriptor(pid=self.pid, address=self.address, age=0)

    def statistics(self) -> NodeStatistics:
        return NodeStatistics(
            process=self.process.statistics(),
            sampler=self.cyclon.statistics() if self.cyclon is not None else None,
            rejected=dict(self._rejected),
        )

    def _reject(self, fault: str, message: object) -> None:
        self._rejected[fault] = self._rejected.get(fault, 0) + 1
        raise RemoteProtocolError(
            f"node cannot handle a {type(message).__name__} message", fault=fault
        )
