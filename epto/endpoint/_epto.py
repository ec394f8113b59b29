"""The EpTO endpoint: one :class:`epto.epidemic.Node` (process and peer sampler), its
frame codec and sealer, the members' addresses, and the protocol decisions
every driver used to make around them.

Rules:

* a broadcast larger than ``limits.max_payload_size`` is refused before the
  process sees it (it could never be framed for the others);
* every frame is encoded for its receiver (``to=dest``): sealed frames are
  bound to it, and the codec (built with ``me=pid``) refuses frames bound to
  another receiver. Without a sealer a frame does not depend on its receiver,
  so a ball sent to K peers is encoded once;
* a signed group signs this node's events as the process creates them and
  verifies every decoded ball (the codec's ``ball_filter``) before ordering;
* a copy of an event the process already holds is not decoded again: the
  codec hands over the held event (``FrameCodec.decode(held=)``), and a copy
  of a held id with another content is dropped (the held one wins) and
  counted as ``rejected["conflicting-copy"]``;
* holes: a delivery whose sequence number skips some of its source's is
  counted (``holes_detected``): events this node will never deliver in order.
  Sequence numbers are counted within one incarnation of the source
  (:mod:`epto._incarnation`): a restarted source's first event skips nothing
  of the start before it;
* incarnation (``config.incarnation``, or drawn from ``now``, the wall clock,
  when None): the high bits of every sequence number this node gives, so a
  restarted member never reuses an event id; :meth:`EptoHandle.resume_after`
  (``endpoint.engine``) starts the order after what an earlier incarnation delivered. An event of
  this node's own id from a later incarnation stops it (``stopped``): that
  start is the member now;
* flushed: this node's last event has been relayed TTL rounds, so leaving
  loses nothing of it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Mapping

import attrs

from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import Delivery, EventId, ProcessId
from .._incarnation import next_incarnation
from ..epidemic._cyclon import CyclonConfig
from ..epidemic._node import Node
from ..epidemic._peer_messages import PeerDescriptor
from ..epidemic._process import Process
from ._config import Address, NodeConfig
from ._engines import EptoAdapter
from ._handles import EngineHandle
from ._protocol import Transmit
from ._signatures import Signatures


@attrs.frozen(kw_only=True, slots=True)
class EptoEndpointStatistics:
    """The counters of an EpTO endpoint."""

    rounds: int
    broadcasts: int
    delivered: int
    delivered_out_of_order: int
    holes_detected: int
    """Sequence numbers skipped in some source's delivered events."""
    late_rejected: int
    """Copies that arrived after the order had passed them."""
    balls_received: int
    balls_sent: int
    rejected: Mapping[str, int]
    """Input refused, by fault (``"truncated"``, ``"bad-magic"``, ...)."""
    pending: int
    """Events received and not yet delivered."""
    members: int
    """Members known: the full view (this node included), or the Cyclon view plus one."""
    encode_failures: int
    unaddressed: int
    """Messages for a process whose address this node does not know."""


class EptoEndpoint:
    """EpTO behind the endpoint protocol (:class:`epto.endpoint.Endpoint`).

    ``rng`` seeds what the configuration leaves unseeded (the process's
    peer choices when ``config.seed`` is None, the sealer's nonce prefix):
    the caller injects it, so a driver that wants fresh runs passes one
    seeded from the operating system and a test passes a seeded one;
    ``now`` is in seconds of the wall clock; ``wall`` (default ``now``)
    starts the sealer's nonce counter above anything an earlier run of this
    process used. Every endpoint is built in this shape from one
    :class:`NodeConfig`.
    """

    def __init__(
        self, config: NodeConfig, now: float, *, rng: random.Random, wall: float | None = None
    ) -> None:
        self.config = config
        self.protocol = config.protocol_config()
        self.incarnation = (
            config.incarnation if config.incarnation is not None else next_incarnation(None, now)
        )
        seed = config.seed if config.seed is not None else rng.getrandbits(64)
        signatures = Signatures(config.pid, config.signing_key, config.roster)
        signer = signatures.signer
        self._verifier = signatures.verifier
        self._codec = config.codec(now if wall is None else wall, rng, ball_filter=self._verifier)
        self._shared_frames = self._codec.sealer is None
        self._addresses: dict[ProcessId, Address] = dict(config.members)
        self._addresses.pop(config.pid, None)
        advertise = (config.advertise or config.bind).encode()
        if isinstance(config.sampler, CyclonConfig):
            seeds = [
                PeerDescriptor(pid=pid, address=address.encode(), age=0)
                for pid, address in self._addresses.items()
            ]
            self._node = Node(
                config.pid,
                self.protocol,
                rng=random.Random(seed),
                now=now,
                sampler=config.sampler,
                seeds=seeds,
                address=advertise,
                signer=signer,
                incarnation=self.incarnation,
            )
        else:
            self._node = Node(
                config.pid,
                self.protocol,
                rng=random.Random(seed),
                now=now,
                members=[config.pid, *self._addresses],
                address=advertise,
                signer=signer,
                incarnation=self.incarnation,
            )
        self._held_event = self._node.process.held_event
        self.adapter = EptoAdapter(self._node, limits=config.limits, incarnation=self.incarnation)
        """The node at the message level: the payload limit, holes, flushed,
        a later incarnation (:mod:`._engines`); ``adapter.engine`` is the node."""
        self._rejected: dict[str, int] = {}
        self._encode_failures = 0
        self._unaddressed = 0
        self.engine = EptoHandle(self)
        """EpTO's own operations (a full view's members, the clock, a restart's
        resumption): :class:`~epto.endpoint.EptoHandle`."""

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    @property
    def stopped(self) -> str | None:
        # An EpTO node is never put out of the group; it stops only for a
        # later start of itself.
        superseded_by = self.adapter.superseded_by
        if superseded_by is None:
            return None
        return (
            f"member {self.config.pid} runs again elsewhere as incarnation "
            f"{superseded_by} (this process is incarnation {self.incarnation})"
        )

    # -- membership (full view) ---------------------------------------------

    def _add_member(self, pid: ProcessId, address: Address) -> None:
        if pid == self.config.pid:
            return
        self._addresses[pid] = address
        if self._node.full_view is not None:
            self._node.full_view.membership.add(pid)

    def _remove_member(self, pid: ProcessId) -> None:
        self._addresses.pop(pid, None)
        if self._node.full_view is not None:
            self._node.full_view.membership.discard(pid)

    def addresses(self) -> list[Address]:
        """The addresses of the members this node was given or told of (a
        driver may open links to them ahead of the first ball)."""
        return list(self._addresses.values())

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        return self.adapter.broadcast(payload, now)

    def _process(self) -> Process:
        return self._node.process

    def receive(self, data: bytes, now: float, *, peer_host: str | None = None) -> bool:
        try:
            # Balls verified by the codec's filter, copies of held events reused.
            sender, message = self._codec.decode_message(data, now, held=self._held_event)
        except RemoteProtocolError as err:
            self.reject(err.fault)
            return False
        # The node counts what it refuses (statistics merge its counters).
        with contextlib.suppress(RemoteProtocolError):
            self._node.receive(sender, message, now)
        return True

    def reject(self, fault: str) -> None:
        self._rejected[fault] = self._rejected.get(fault, 0) + 1

    def handle_timer(self, now: float) -> None:
        self._node.handle_timer(now)

    def leave(self, now: float) -> None:
        self._node.leave(now)

    # -- outputs ------------------------------------------------------------

    def get_timer(self) -> float:
        return self._node.get_timer()

    def address_of(self, pid: ProcessId) -> Address | None:
        address = self._addresses.get(pid)
        if address is None:
            raw = self._node.address_of(pid)
            if raw is not None:
                try:
                    address = raw.decode()
                except UnicodeDecodeError:
                    return None
        return address

    def frames_to_send(self, now: float) -> list[Transmit]:
        out: list[Transmit] = []
        me = self.config.pid
        encode = self._codec.encode
        shared: dict[int, list[bytes]] | None = {} if self._shared_frames else None
        for dest, message in self._node.messages_to_send():
            address = self.address_of(dest)
            if address is None:
                self._unaddressed += 1
                continue
            frames = shared.get(id(message)) if shared is not None else None
            if frames is None:
                try:
                    frames = encode(me, message, to=dest)
                except LocalProtocolError:
                    self._encode_failures += 1
                    continue
                if shared is not None:
                    shared[id(message)] = frames
            for data in frames:
                out.append(Transmit(dest, address, data))
        return out

    def next_delivery(self) -> Delivery | None:
        return self.adapter.next_delivery()

    def flushed(self) -> bool:
        return self.adapter.flushed()

    def statistics(self) -> EptoEndpointStatistics:
        node = self._node
        s = node.process.statistics()
        rejected = dict(self._rejected)
        if self._codec.copies_conflicting:
            rejected["conflicting-copy"] = self._codec.copies_conflicting
        node_stats = node.statistics()
        sampler_rejected = node_stats.sampler.rejected if node_stats.sampler else {}
        verifier_rejected = self._verifier.rejected if self._verifier is not None else {}
        for counts in (node_stats.rejected, sampler_rejected, s.rejected, verifier_rejected):
            for fault, count in counts.items():
                rejected[fault] = rejected.get(fault, 0) + count
        if node.full_view is not None:
            members = len(node.full_view.membership)
        else:
            members = node_stats.sampler.view_size + 1 if node_stats.sampler else 1
        return EptoEndpointStatistics(
            rounds=s.rounds,
            broadcasts=s.broadcasts,
            delivered=s.delivered,
            delivered_out_of_order=s.delivered_out_of_order,
            holes_detected=self.adapter.holes,
            late_rejected=s.rejected_stale,
            balls_received=s.balls_received,
            balls_sent=s.balls_sent,
            rejected=rejected,
            pending=s.pending,
            members=members,
            encode_failures=self._encode_failures,
            unaddressed=self._unaddressed,
        )


class EptoHandle(EngineHandle):
    """EpTO's own operations (:class:`~epto.endpoint.EptoEndpoint`)."""

    __slots__ = ("_endpoint",)

    def __init__(self, endpoint: EptoEndpoint) -> None:
        super().__init__()
        self._endpoint = endpoint

    def add_member(self, pid: ProcessId, address: Address) -> None:
        """Add a member to a full view (Cyclon learns members by itself)."""
        with self._input:
            self._endpoint._add_member(pid, address)

    def remove_member(self, pid: ProcessId) -> None:
        with self._input:
            self._endpoint._remove_member(pid)

    def advance_clock(self, ts: int) -> None:
        """Move the EpTO clock to at least ``ts``
        (:meth:`epto.epidemic.Process.advance_clock`: a restored snapshot's cut)."""
        with self._input:
            self._endpoint._process().advance_clock(ts)

    def resume_after(self, ts: int) -> None:
        """Deliver and broadcast only after ``ts``, what an earlier start of
        this member delivered last (:meth:`epto.epidemic.Process.resume_after`);
        before the first round."""
        with self._input:
            self._endpoint._process().resume_after(ts)

    @property
    def incarnation(self) -> int:
        """This start of the member (docs/node.md, *Restart*)."""
        return self._endpoint.incarnation

    @property
    def superseded_by(self) -> int | None:
        """The later incarnation of this member whose event reached this node
        (it has stopped), or None."""
        return self._endpoint.adapter.superseded_by
