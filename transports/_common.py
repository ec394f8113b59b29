"""What every driver shares: the node configuration, the codec seam, the
sans-IO adapter that runs one EpTO process for a driver, the bounded delivery
buffer with its overflow policy, and the node statistics.

Every driver (memory, trio, ZeroMQ) runs the same loop around a
:class:`CoreAdapter` (the aioquic ``transmit()`` shape): feed what arrived,
run the round when the timer is due, send what the core wants sent, move
deliveries to the application, sleep until the next deadline. Nothing here
does I/O or reads a clock: drivers pass ``now`` in.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Literal, Protocol, TypeAlias

import attrs

from epto import Ball, Config, Delivery, EventId, FullView, LocalProtocolError, Membership, Process
from epto import ProcessId as ProcessId

OverflowPolicy: TypeAlias = Literal["fail", "drop"]

Address: TypeAlias = Hashable
"""Where a member is reached: ``"host:port"`` for the socket transports, any
hashable name on the in-memory hub."""


class DeliveryOverflowError(LocalProtocolError):
    """The application fell behind the group by more than ``delivery_buffer``
    deliveries under the ``"fail"`` policy. The node has stopped: a replica that
    silently skipped deliveries would diverge from the group."""


class Codec(Protocol):
    """Turns balls into datagrams and back.

    ``decode`` raises :class:`epto.RemoteProtocolError` (and nothing else) on
    input it cannot accept; its ``fault`` is the key of the rejection counter.
    """

    def encode(self, sender: ProcessId, ball: Ball) -> list[bytes]:
        """One or more datagrams that together carry ``ball`` (a ball is a set,
        so splitting it changes nothing)."""
        ...

    def decode(self, data: bytes) -> tuple[ProcessId, Ball]:
        """The sender and the ball one datagram carries."""
        ...


def _check_members(_inst: object, _attr: object, value: Mapping[int, Address]) -> None:
    for pid in value:
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise LocalProtocolError(f"members: process id must be in [0, 2**64), got {pid!r}")


@attrs.frozen(kw_only=True)
class NodeConfig:
    """How to run one node; the same object serves every transport.

    ``members`` maps every known member (this node included or not) to its
    address. ``epto`` fixes the protocol parameters; when it is None they are
    derived from the group size with :meth:`epto.Config.for_group` and
    ``round_interval``.
    """

    pid: ProcessId
    bind: Address = "127.0.0.1:0"
    """Where this node listens; port 0 picks a free port (see ``node.address``)."""
    members: Mapping[ProcessId, Address] = attrs.field(factory=dict, validator=_check_members)
    epto: Config | None = None
    round_interval: float = 0.125
    """Seconds between rounds when ``epto`` is None."""
    clock: Literal["logical", "global"] = "logical"
    """Used when ``epto`` is None. The global clock reads wall time (see docs)."""
    tagged_delivery: bool = False
    """Used when ``epto`` is None: deliver late events tagged OUT_OF_ORDER."""
    seed: int | None = None
    """Seeds the peer choices; None draws a seed from the operating system."""
    delivery_buffer: int = 100_000
    """Deliveries held for an application that reads slower than the group delivers."""
    overflow: OverflowPolicy = "fail"
    """What happens when ``delivery_buffer`` is full: ``"fail"`` stops the node and
    raises :class:`DeliveryOverflowError` to the reader; ``"drop"`` drops the new
    deliveries and counts them (``deliveries_dropped``)."""
    flush_timeout: float = 5.0
    """Seconds ``close()`` keeps running rounds so that this node's own events
    are gossiped TTL rounds before it leaves."""
    max_datagram: int = 60_000
    """Largest datagram sent; bigger balls are split."""
    max_payload: int = 16_384
    """Largest payload :meth:`broadcast` accepts."""

    def protocol_config(self) -> Config:
        if self.epto is not None:
            return self.epto
        n = max(2, len(set(self.members) | {self.pid}))
        return Config.for_group(
            n,
            clock=self.clock,
            round_interval=self.round_interval,
            tagged_delivery=self.tagged_delivery,
        )


@attrs.frozen(kw_only=True, slots=True)
class NodeStatistics:
    """Counters of one node (all transports report the same fields)."""

    rounds: int
    broadcasts: int
    delivered: int
    delivered_out_of_order: int
    holes_detected: int
    """Sequence numbers skipped in some source's delivered events: events this
    node knows it will never deliver in order."""
    late_rejected: int
    """Copies that arrived after the order had passed them (``rejected_stale``)."""
    balls_received: int
    balls_sent: int
    datagrams_sent: int
    datagrams_received: int
    send_failures: int
    rejected: Mapping[str, int]
    """Frames refused, by fault (``"truncated"``, ``"bad-magic"``, ...)."""
    delivery_queue: int
    """Deliveries waiting for the application."""
    deliveries_dropped: int
    pending: int
    """Events received and not yet delivered by the core."""
    members: int


class DeliveryBuffer:
    """The bounded queue between the core and the application.

    Drivers never block on it: rounds (and therefore gossip to the group) go on
    whatever the application does. When it is full the policy applies.
    """

    __slots__ = ("_items", "capacity", "dropped", "overflowed", "policy")

    def __init__(self, capacity: int, policy: OverflowPolicy) -> None:
        if capacity < 1:
            raise LocalProtocolError(f"delivery_buffer must be positive, got {capacity}")
        if policy not in ("fail", "drop"):
            raise LocalProtocolError(f"overflow must be 'fail' or 'drop', got {policy!r}")
        self.capacity = capacity
        self.policy = policy
        self._items: deque[Delivery] = deque()
        self.dropped = 0
        self.overflowed = False

    def put(self, delivery: Delivery) -> bool:
        """Queue one delivery; False when the policy refused it."""
        if len(self._items) >= self.capacity:
            if self.policy == "drop":
                self.dropped += 1
                return False
            self.overflowed = True
            return False
        self._items.append(delivery)
        return True

    def get(self) -> Delivery | None:
        return self._items.popleft() if self._items else None

    def __len__(self) -> int:
        return len(self._items)


class CoreAdapter:
    """One EpTO process plus what a driver needs around it: the member
    addresses, flush tracking, hole detection and rejection counters.

    Sans-IO: every method takes ``now`` (seconds) where time matters.
    """

    def __init__(self, config: NodeConfig, now: float) -> None:
        self.config = config
        self.pid = config.pid
        self.protocol = config.protocol_config()
        self.addresses: dict[ProcessId, Address] = dict(config.members)
        self.addresses.pop(config.pid, None)
        self.membership = Membership([config.pid, *self.addresses])
        seed = config.seed if config.seed is not None else random.SystemRandom().getrandbits(64)
        self.process = Process(
            config.pid,
            self.protocol,
            peers=FullView(config.pid, self.membership),
            rng=random.Random(seed),
            now=now,
        )
        self.buffer = DeliveryBuffer(config.delivery_buffer, config.overflow)
        self.rejected: dict[str, int] = {}
        self.datagrams_sent = 0
        self.datagrams_received = 0
        self.send_failures = 0
        self.holes = 0
        self._last_seq: dict[ProcessId, int] = {}
        self._last_broadcast_round = -1

    # -- membership ---------------------------------------------------------

    def add_member(self, pid: ProcessId, address: Address) -> None:
        if pid == self.pid:
            return
        self.addresses[pid] = address
        self.membership.add(pid)

    def remove_member(self, pid: ProcessId) -> None:
        self.addresses.pop(pid, None)
        self.membership.discard(pid)

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        if len(payload) > self.config.max_payload:
            raise LocalProtocolError(
                f"payload of {len(payload)} bytes exceeds max_payload={self.config.max_payload}"
            )
        eid = self.process.broadcast(payload, now)
        self._last_broadcast_round = self.process.statistics().rounds
        return eid

    def receive(self, sender: ProcessId, ball: Ball, now: float) -> None:
        self.datagrams_received += 1
        self.process.receive(sender, ball, now)

    def reject(self, fault: str) -> None:
        self.datagrams_received += 1
        self.rejected[fault] = self.rejected.get(fault, 0) + 1

    def handle_timer(self, now: float) -> None:
        self.process.handle_timer(now)

    # -- outputs ------------------------------------------------------------

    def timer(self) -> float:
        return self.process.get_timer()

    def outgoing(self) -> list[tuple[Address, Ball]]:
        """``(address, ball)`` for every ball the core wants sent."""
        out = []
        addresses = self.addresses
        for dest, ball in self.process.messages_to_send():
            address = addresses.get(dest)
            if address is None:
                self.send_failures += 1
                continue
            out.append((address, ball))
        return out

    def pump(self) -> int:
        """Move the core's deliveries into the buffer; returns how many."""
        moved = 0
        buffer = self.buffer
        last_seq = self._last_seq
        for delivery in self.process.deliveries():
            event = delivery.event
            previous = last_seq.get(event.source)
            if previous is not None and event.seq > previous + 1:
                self.holes += event.seq - previous - 1
            if previous is None or event.seq > previous:
                last_seq[event.source] = event.seq
            if buffer.put(delivery):
                moved += 1
            elif buffer.overflowed:
                break
        return moved

    def flushed(self) -> bool:
        """True once this node's last event has been gossiped TTL rounds."""
        if self._last_broadcast_round < 0:
            return True
        rounds = self.process.statistics().rounds
        return rounds > self._last_broadcast_round + self.protocol.ttl

    def statistics(self) -> NodeStatistics:
        s = self.process.statistics()
        return NodeStatistics(
            rounds=s.rounds,
            broadcasts=s.broadcasts,
            delivered=s.delivered,
            delivered_out_of_order=s.delivered_out_of_order,
            holes_detected=self.holes,
            late_rejected=s.rejected_stale,
            balls_received=s.balls_received,
            balls_sent=s.balls_sent,
            datagrams_sent=self.datagrams_sent,
            datagrams_received=self.datagrams_received,
            send_failures=self.send_failures,
            rejected=dict(self.rejected),
            delivery_queue=len(self.buffer),
            deliveries_dropped=self.buffer.dropped,
            pending=s.pending,
            members=len(self.membership),
        )


def parse_host_port(address: Address) -> tuple[str, int]:
    """``"host:port"`` or ``(host, port)`` to ``(host, port)``."""
    if isinstance(address, tuple) and len(address) == 2:
        return str(address[0]), int(address[1])
    if isinstance(address, str):
        host, sep, port = address.rpartition(":")
        if sep and host and port.isdigit():
            return host.strip("[]"), int(port)
    raise LocalProtocolError(f"address must be 'host:port', got {address!r}")
