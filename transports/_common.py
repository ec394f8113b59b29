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

import contextlib
import random
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, Protocol, TypeAlias

import attrs

from epto import (
    Config,
    ConfigurationError,
    CyclonConfig,
    Delivery,
    EventId,
    EventSigner,
    FrameCodec,
    GroupKey,
    GroupSealer,
    Limits,
    LocalProtocolError,
    Node,
    PeerDescriptor,
    RemoteProtocolError,
    SignatureVerifier,
)
from epto import ProcessId as ProcessId
from epto.tokenring import TokenRingConfig, choose_mode

OverflowPolicy: TypeAlias = Literal["fail", "drop"]

Mode: TypeAlias = Literal["epto", "token-ring", "auto"]
"""The ordering engine of a node: EpTO, the token ring, or chosen by group size."""

Address: TypeAlias = str
"""Where a member is reached: ``"host:port"`` for the socket transports, any
name on the in-memory hub."""


class DeliveryOverflowError(LocalProtocolError):
    """The application fell behind the group by more than ``delivery_buffer``
    deliveries under the ``"fail"`` policy. The node has stopped: a replica that
    silently skipped deliveries would diverge from the group."""


class Codec(Protocol):
    """Messages to datagrams and back (implemented by :class:`epto.FrameCodec`)."""

    def encode(self, sender: ProcessId, message: Any) -> list[bytes]: ...

    def decode(self, data: bytes, now: float = 0.0) -> Any:
        """A frame with ``sender`` and ``message``; raises ``RemoteProtocolError``."""
        ...


def _check_signing_key(_inst: object, _attr: object, value: bytes | None) -> None:
    if value is not None and (not isinstance(value, bytes) or len(value) != 32):
        raise ConfigurationError(
            "NodeConfig.signing_key must be the 32-byte Ed25519 private key "
            "(epto.keys.load_signing_key(path)[0])"
        )


def _check_roster(_inst: object, _attr: object, value: Mapping[int, bytes] | None) -> None:
    if value is None:
        return
    for pid, public in value.items():
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise ConfigurationError(f"NodeConfig.roster: process id out of range: {pid!r}")
        if not isinstance(public, bytes) or len(public) != 32:
            raise ConfigurationError(
                f"NodeConfig.roster: the public key of {pid} must be 32 bytes (Ed25519)"
            )


def _check_members(_inst: object, _attr: object, value: Mapping[int, Address]) -> None:
    for pid, address in value.items():
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise LocalProtocolError(f"members: process id must be in [0, 2**64), got {pid!r}")
        if not isinstance(address, str):
            raise LocalProtocolError(f"members: address of {pid} must be a str, got {address!r}")


@attrs.frozen(kw_only=True)
class NodeConfig:
    """How to run one node; the same object serves every transport.

    With the default full-view sampler, ``members`` maps every member (this
    node included or not) to its address. With ``sampler=CyclonConfig(...)``,
    ``members`` are the seeds the node starts its partial view with.
    ``epto`` fixes the protocol parameters; when it is None they are derived
    from ``group_size`` (or the number of members) with
    :meth:`epto.Config.for_group` and ``round_interval``.

    ``mode`` picks the ordering engine (:meth:`resolved_mode`): ``"epto"``,
    ``"token-ring"`` (``tokenring`` holds its parameters; a full view only,
    run by :func:`epto.transports.trio_node.open_node` over TCP), or
    ``"auto"``: the token ring for groups of at most
    :data:`epto.tokenring.AUTO_TOKEN_RING_MAX_GROUP` members, EpTO above.
    """

    pid: ProcessId
    bind: Address = "127.0.0.1:0"
    """Where this node listens; port 0 picks a free port (see ``node.address``)."""
    members: Mapping[ProcessId, Address] = attrs.field(factory=dict, validator=_check_members)
    sampler: Literal["full"] | CyclonConfig = "full"
    advertise: Address | None = None
    """The address other members should use (Cyclon descriptors); default ``bind``."""
    epto: Config | None = None
    group_size: int | None = None
    """Expected group size for derived parameters (default: the members given)."""
    round_interval: float = 0.125
    """Seconds between rounds when ``epto`` is None."""
    clock: Literal["logical", "global"] = "logical"
    """Used when ``epto`` is None. The global clock reads wall time (see docs)."""
    tagged_delivery: bool = False
    """Used when ``epto`` is None: deliver late events tagged OUT_OF_ORDER."""
    group: int = 0
    """Group id carried by every frame; frames of other groups are refused."""
    group_key: GroupKey | None = None
    """Seal every frame under this key (AEAD); unsealed or foreign frames are refused."""
    limits: Limits = attrs.field(factory=Limits)
    """Frame, ball and payload bounds (every member must use the same)."""
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
    mode: Mode = "epto"
    """``"epto"``, ``"token-ring"`` or ``"auto"`` (see :meth:`resolved_mode`)."""
    tokenring: TokenRingConfig = attrs.field(factory=TokenRingConfig)
    """Token-ring parameters, used when the mode resolves to the token ring."""
    contacts: Mapping[ProcessId, Address] = attrs.field(factory=dict, validator=_check_members)
    """Token ring only: a new identity joins a running group through these
    members (``members`` then stays empty); the group admits it by a view change."""
    signing_key: bytes | None = attrs.field(default=None, validator=_check_signing_key)
    """This node's Ed25519 private key (32 bytes, ``epto.keys.load_signing_key(path)[0]``):
    every event it broadcasts is signed (docs/security.md). A signed group sets
    both ``signing_key`` and ``roster`` on every member."""
    roster: Mapping[ProcessId, bytes] | None = attrs.field(default=None, validator=_check_roster)
    """Process id to Ed25519 public key (``epto.keys.load_roster(path)``): events
    whose signature does not verify against it are refused before ordering and
    counted in ``statistics().rejected`` (``bad-signature``, ``unsigned``,
    ``unknown-source``, ``altered``, ``equivocation``). With ``signing_key``
    too, it must hold this node's own public key."""

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("epto", "token-ring", "auto"):
            raise ConfigurationError(
                f"NodeConfig.mode must be 'epto', 'token-ring' or 'auto', got {self.mode!r}"
            )
        mode = self.resolved_mode()
        if mode == "epto" and self.contacts:
            raise ConfigurationError(
                "NodeConfig.contacts is for joining a token ring; an EpTO node joins "
                "with the members in 'members' (full view) or Cyclon seeds"
            )
        if mode == "token-ring" and self.contacts and set(self.members) - {self.pid}:
            raise ConfigurationError(
                "NodeConfig: a token-ring node either bootstraps with 'members' or joins "
                "through 'contacts', not both"
            )
        if self.signing_key is not None and self.roster is not None:
            own = EventSigner(self.pid, self.signing_key).public_key
            listed = self.roster.get(self.pid)
            if listed is None:
                raise ConfigurationError(
                    f"NodeConfig.roster has no public key for this node (pid {self.pid}); "
                    "the others would refuse its events"
                )
            if listed != own:
                raise ConfigurationError(
                    f"NodeConfig.roster lists another public key for pid {self.pid} than "
                    "the one of signing_key"
                )

    def resolved_mode(self) -> Literal["epto", "token-ring"]:
        """The engine this configuration runs.

        ``"auto"`` picks the token ring for a group of at most
        :data:`epto.tokenring.AUTO_TOKEN_RING_MAX_GROUP` members (``group_size``,
        or the members and contacts given, this node included) and EpTO above;
        with a Cyclon sampler (partial views, groups too large to list) it picks
        EpTO. ``"token-ring"`` with a Cyclon sampler raises
        :class:`epto.ConfigurationError`: the token ring needs every member.
        """
        if self.mode == "token-ring":
            if isinstance(self.sampler, CyclonConfig):
                raise ConfigurationError(
                    "NodeConfig: mode='token-ring' needs the full view (sampler='full'); "
                    "Cyclon partial views are for EpTO"
                )
            return "token-ring"
        if self.mode == "auto":
            if isinstance(self.sampler, CyclonConfig):
                return "epto"
            n = self.group_size or len(set(self.members) | set(self.contacts) | {self.pid})
            return "token-ring" if choose_mode(n, "auto") == "token-ring" else "epto"
        return "epto"

    def protocol_config(self) -> Config:
        if self.epto is not None:
            return self.epto
        n = self.group_size or len(set(self.members) | {self.pid})
        return Config.for_group(
            max(2, n),
            clock=self.clock,
            round_interval=self.round_interval,
            tagged_delivery=self.tagged_delivery,
        )

    def codec(
        self,
        now: float,
        rng: random.Random,
        *,
        ball_filter: SignatureVerifier | None = None,
    ) -> FrameCodec:
        """The frame codec of this node (sealing when a group key is set).

        ``now`` (wall seconds) starts the nonce counter above anything a
        previous run of this process used. The codec knows this node's id
        (``me``), so sealed frames bound to another receiver are refused
        (``bad-tag``); a ``ball_filter`` verifier checks every decoded ball.
        """
        sealer = None
        if self.group_key is not None:
            sealer = GroupSealer(self.group_key, counter_start=int(now * 1e6), rng=rng)
        return FrameCodec(
            group=self.group,
            limits=self.limits,
            sealer=sealer,
            me=self.pid,
            ball_filter=ball_filter.filter_ball if ball_filter is not None else None,
        )


@attrs.frozen(kw_only=True, slots=True)
class TransportStatistics:
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
    """Members known: the full view (this node included), or the Cyclon view plus one."""
    encode_failures: int = 0
    """Messages the core wanted sent that the codec could not encode (they
    are dropped and counted; the node goes on)."""


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


class Outgoing(NamedTuple):
    """One message the core wants sent: to process ``dest``, reached at ``address``."""

    dest: ProcessId
    address: Address
    message: object


class CoreAdapter:
    """One :class:`epto.Node` (EpTO process and peer sampler) plus what a
    driver needs around it: the frame codec, member addresses, flush
    tracking, hole detection and rejection counters.

    Security is done here once for every driver: frames are bound to their
    receiver (``encode(message, to=dest)``, a codec with ``me=pid``), a
    ``signing_key`` signs this node's events as the process creates them, and a
    ``roster`` verifies every ball received, as bytes (the codec's
    ``ball_filter``) or by reference (:meth:`receive`).

    Sans-IO: every method takes ``now`` (seconds) where time matters; drivers
    move the bytes.
    """

    def __init__(self, config: NodeConfig, now: float, rng: random.Random | None = None) -> None:
        self.config = config
        self.pid = config.pid
        self.protocol = config.protocol_config()
        system = rng if rng is not None else random.Random(random.SystemRandom().getrandbits(64))
        seed = config.seed if config.seed is not None else system.getrandbits(64)
        self.signer = (
            EventSigner(config.pid, config.signing_key) if config.signing_key is not None else None
        )
        self.verifier = SignatureVerifier(config.roster) if config.roster is not None else None
        signer = self.signer.signature if self.signer is not None else None
        self.codec = config.codec(now, system, ball_filter=self.verifier)
        self.addresses: dict[ProcessId, Address] = dict(config.members)
        self.addresses.pop(config.pid, None)
        advertise = (config.advertise or config.bind).encode()
        if isinstance(config.sampler, CyclonConfig):
            seeds = [
                PeerDescriptor(pid=pid, address=address.encode(), age=0)
                for pid, address in self.addresses.items()
            ]
            self.node = Node(
                config.pid,
                self.protocol,
                rng=random.Random(seed),
                now=now,
                sampler=config.sampler,
                seeds=seeds,
                address=advertise,
                signer=signer,
            )
        else:
            self.node = Node(
                config.pid,
                self.protocol,
                rng=random.Random(seed),
                now=now,
                members=[config.pid, *self.addresses],
                address=advertise,
                signer=signer,
            )
        self.buffer = DeliveryBuffer(config.delivery_buffer, config.overflow)
        self.rejected: dict[str, int] = {}
        self.datagrams_sent = 0
        self.datagrams_received = 0
        self.send_failures = 0
        self.encode_failures = 0
        self.holes = 0
        self._last_seq: dict[ProcessId, int] = {}
        self._last_broadcast_round = -1

    # -- membership (full view) ---------------------------------------------

    def add_member(self, pid: ProcessId, address: Address) -> None:
        """Add a member to a full view (Cyclon learns members by itself)."""
        if pid == self.pid:
            return
        self.addresses[pid] = address
        if self.node.full_view is not None:
            self.node.full_view.membership.add(pid)

    def remove_member(self, pid: ProcessId) -> None:
        self.addresses.pop(pid, None)
        if self.node.full_view is not None:
            self.node.full_view.membership.discard(pid)

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        limit = self.config.limits.max_payload_size
        if len(payload) > limit:
            raise LocalProtocolError(
                f"payload of {len(payload)} bytes exceeds limits.max_payload_size={limit}"
            )
        eid = self.node.broadcast(payload, now)  # raises to the caller, changes nothing
        self._last_broadcast_round = self.node.process.statistics().rounds
        return eid

    def receive_datagram(self, data: bytes, now: float) -> None:
        """Decode one datagram and feed it; bad input is counted, never raised."""
        self.datagrams_received += 1
        try:
            frame = self.codec.decode(data, now)  # balls verified by the codec's filter
        except RemoteProtocolError as err:
            self.reject(err.fault)
            return
        self._feed(frame.sender, frame.message, now)

    def receive(self, sender: ProcessId, message: object, now: float) -> None:
        """Feed one decoded message (the in-memory hub skips the bytes); in a
        signed group its events are verified first, as the codec does for bytes."""
        if self.verifier is not None and isinstance(message, Mapping):
            message = self.verifier.filter_ball(dict(message.items()), now)
        self._feed(sender, message, now)

    def _feed(self, sender: ProcessId, message: object, now: float) -> None:
        # The node counts what it refuses (statistics merge its counters).
        with contextlib.suppress(RemoteProtocolError):
            self.node.receive(sender, message, now)

    def reject(self, fault: str) -> None:
        self.rejected[fault] = self.rejected.get(fault, 0) + 1

    def handle_timer(self, now: float) -> None:
        self.node.handle_timer(now)

    def leave(self, now: float) -> None:
        """Tell the peer sampler's view that this node leaves (Cyclon)."""
        self.node.leave(now)

    # -- outputs ------------------------------------------------------------

    def timer(self) -> float:
        return self.node.get_timer()

    def address_of(self, pid: ProcessId) -> Address | None:
        address = self.addresses.get(pid)
        if address is None:
            raw = self.node.address_of(pid)
            if raw is not None:
                try:
                    address = raw.decode()
                except UnicodeDecodeError:
                    return None
        return address

    def outgoing(self) -> list[Outgoing]:
        """``(dest, address, message)`` for every message the core wants sent."""
        out: list[Outgoing] = []
        for dest, message in self.node.messages_to_send():
            address = self.address_of(dest)
            if address is None:
                self.send_failures += 1
                continue
            out.append(Outgoing(dest, address, message))
        return out

    def encode(self, message: object, *, to: ProcessId) -> list[bytes]:
        """The frames of ``message`` for process ``to`` (sealed frames are bound
        to it). A message the codec cannot encode is counted in
        ``encode_failures`` and dropped (``[]``): the driver's loop goes on."""
        try:
            return self.codec.encode(self.pid, message, to=to)
        except LocalProtocolError:
            self.encode_failures += 1
            return []

    def pump(self) -> int:
        """Move the core's deliveries into the buffer; returns how many."""
        moved = 0
        buffer = self.buffer
        last_seq = self._last_seq
        for delivery in self.node.deliveries():
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
        rounds = self.node.process.statistics().rounds
        return rounds > self._last_broadcast_round + self.protocol.ttl

    def statistics(self) -> TransportStatistics:
        s = self.node.process.statistics()
        rejected = dict(self.rejected)
        node_stats = self.node.statistics()
        sampler_rejected = node_stats.sampler.rejected if node_stats.sampler else {}
        verifier_rejected = self.verifier.rejected if self.verifier is not None else {}
        for counts in (node_stats.rejected, sampler_rejected, s.rejected, verifier_rejected):
            for fault, count in counts.items():
                rejected[fault] = rejected.get(fault, 0) + count
        if self.node.full_view is not None:
            members = len(self.node.full_view.membership)
        else:
            members = node_stats.sampler.view_size + 1 if node_stats.sampler else 1
        return TransportStatistics(
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
            rejected=rejected,
            delivery_queue=len(self.buffer),
            deliveries_dropped=self.buffer.dropped,
            pending=s.pending,
            members=members,
            encode_failures=self.encode_failures,
        )


def require_epto(config: NodeConfig, node: str, hint: str) -> None:
    """Raise :class:`epto.ConfigurationError` unless ``config`` runs EpTO (the
    node classes that run only EpTO call this)."""
    if config.resolved_mode() != "epto":
        raise ConfigurationError(
            f"{node} runs EpTO, and this configuration (mode={config.mode!r}) resolves "
            f"to the token ring; {hint}"
        )


def parse_host_port(address: Address) -> tuple[str, int]:
    """``"host:port"`` to ``(host, port)``."""
    if isinstance(address, str):
        host, sep, port = address.rpartition(":")
        if sep and host and port.isdigit():
            return host.strip("[]"), int(port)
    raise LocalProtocolError(f"address must be 'host:port', got {address!r}")
