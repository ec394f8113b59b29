"""The configuration and the statistics of a token-ring node on TCP
(:class:`~epto.transports.trio_tcp.TokenRingNode`), and the error its
deliveries end with once the member is excluded.

:class:`TokenRingNodeConfig` is flat (the token ring's fields and the
transport's side by side, as users build it); :meth:`TokenRingNodeConfig.tcp`
is its transport part, a :class:`~.tcp_config.TcpNodeConfig`, with the idle
timeout the token ring's timeouts call for.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from epto import ConfigurationError, GroupKey, Limits, LocalProtocolError, ProcessId
from epto._incarnation import check_incarnation
from epto.endpoint import Address, NodeConfig, OverflowPolicy, parse_host_port
from epto.tokenring import TokenRingConfig

from .tcp_config import TcpNodeConfig, TcpNodeStatistics, check_tcp_fields

__all__ = ["MemberExcludedError", "TokenRingNodeConfig", "TokenRingNodeStatistics"]


def _stream_limits() -> Limits:
    # A catch-up carries up to 4096 sequenced messages (TokenRingProcess); a
    # payload is at most the default window budget (TokenRingConfig.check_limits).
    return Limits.for_frame_size(1 << 20, max_events_per_ball=4096, max_payload_size=524_224)


@attrs.frozen(kw_only=True)
class TokenRingNodeConfig:
    """How to run one token-ring node on TCP.

    Bootstrap members all pass the same ``members`` (pid to ``"host:port"``,
    this node included). A new identity joining a running group passes
    ``contacts`` instead (some current members); it learns the other members'
    addresses from them, and they learn its address from the hello at the
    start of its streams (see :mod:`epto.transports._addresses`). Times are in
    seconds. The transport's fields (``bind`` to ``idle_timeout``, but
    ``members`` and the token ring's) mean what they mean in
    :class:`~.tcp_config.TcpNodeConfig` (:meth:`tcp`).
    """

    pid: ProcessId
    bind: Address = "127.0.0.1:0"
    """Where this node listens; port 0 picks a free port (see ``node.address``)."""
    members: Mapping[ProcessId, Address] = attrs.field(factory=dict)
    contacts: Mapping[ProcessId, Address] = attrs.field(factory=dict)
    """Join a running group through these members (a new identity)."""
    advertise: Address | None = None
    """The address announced to the others in hellos; default the bound
    address, whose unspecified host (``0.0.0.0``) a receiver replaces by the
    address the connection comes from."""
    tokenring: TokenRingConfig = attrs.field(factory=TokenRingConfig)
    incarnation: int | None = None
    """This start of the member (``epto.endpoint.NodeConfig.incarnation``):
    None draws it when the node starts, one above the number kept in
    ``data_dir`` and at least the wall clock's seconds since 2025. A member
    started again under its id with a higher incarnation is admitted back
    by the group in place of the earlier one (docs/token-ring.md,
    *Restart*)."""
    data_dir: str | None = None
    """The member's own directory (``NodeConfig.data_dir``): its last
    incarnation is kept there and locked while the node runs, so that a
    second live process with this id and directory is refused
    (:class:`epto.MemberRunningError`). A start that finds an earlier
    incarnation there is a *restart*: the member never founds a group at
    position 0 then, it asks the other members to admit it back (unless
    ``fresh_group``). The member's vote is kept there too
    (``tokenring.durability``, ``"fsync"`` by default): a restart on it
    votes as the member, so a majority restarted at once comes back on its
    own (docs/token-ring.md, *A majority restarted at once*)."""
    fresh_group: bool = False
    """Found a new group at position 0 with ``members`` even if ``data_dir``
    says this member ran before: the explicit way to start a whole group
    again after every member went down at once, or a majority of them
    without their votes (docs/token-ring.md, *Restart*, *A majority
    restarted at once*). Every member of
    the new group must be started this way (or for the first time), and no
    process of the former group may still run. Ignored with ``contacts``."""
    group: int = 0
    """Group id carried by every frame; frames of other groups are refused."""
    group_key: GroupKey | None = None
    """Seal every frame under this key (AEAD), bound to its receiver."""
    signing_key: bytes | None = None
    """This member's Ed25519 private key (32 bytes, ``epto.keys.load_signing_key``):
    its broadcasts are signed (docs/security.md)."""
    roster: Mapping[ProcessId, bytes] | None = None
    """Public keys of the members (``epto.keys.load_roster``): events whose
    signature does not verify are refused and counted in
    ``statistics().rejected`` (``bad-signature``, ``unsigned``,
    ``unknown-source``, ``altered``). A signed group sets both."""
    limits: Limits = attrs.field(factory=_stream_limits)
    """Frame bounds (every member must use the same). Token states and
    catch-ups grow with the unstable messages, hence 1 MiB frames by default."""
    seed: int | None = None
    delivery_buffer: int = 100_000
    overflow: OverflowPolicy = "fail"
    reconnect_interval: float = 0.05
    """Least time between two connection attempts to one peer."""
    connect_timeout: float = 1.0
    send_queue: int = 10_000
    """Frames queued for one peer (waiting for the stream to write them, or
    for a stream to the peer to be up); beyond that new frames for it are
    dropped and counted in ``frames_dropped``."""
    flush_timeout: float = 5.0
    """Seconds ``aclose()`` waits for this node's own broadcasts to be delivered."""
    max_connections: int = 256
    """Incoming streams open at once (authenticated or not). A connection
    beyond it is closed at once and counted in
    ``statistics().connections_refused["too-many-connections"]``. A member
    keeps one incoming stream per peer that sends to it."""
    max_connections_per_address: int = 64
    """Incoming streams open at once from one remote IP address; beyond it a
    new connection is closed at once (``"too-many-from-address"``)."""
    handshake_timeout: float = 5.0
    """Seconds a new incoming stream has to deliver its first frame, which
    must authenticate (with ``group_key``) or decode (without), else it is
    closed (``"handshake-timeout"``; a first frame that does not pass is
    ``"handshake-rejected"``)."""
    first_frame_limit: int = 4096
    """Largest first frame of an incoming stream, in bytes: before a frame of
    the stream authenticated, at most this much (and its length prefix) is
    buffered for it; a longer announced length closes the stream
    (``"first-frame-too-large"``). Every stream of this driver opens with a
    small address frame (at most 318 bytes), so this bounds what an outsider
    makes a node hold per connection without limiting what members send:
    after the first frame, frames up to ``limits.max_frame_size``."""
    link_delays: Mapping[ProcessId, float] = attrs.field(factory=dict)
    """Seconds every frame to a peer waits before it is written (peer id to
    delay; absent: none): emulates a wide-area link on one machine, for
    measurements and tests (``TcpNodeConfig.link_delays``)."""
    idle_timeout: float | None = None
    """Seconds an incoming stream may go without a frame that is accepted
    (authenticates, or decodes without a key) before it is closed
    (``"idle-timeout"``). ``None``: ``max(30, 2 * tokenring.exclude_timeout)``.
    Every member sends every other member a heartbeat each
    ``tokenring.heartbeat_interval`` (a joining process a join each
    ``change_timeout``), so a live member's stream is never idle that long; a
    given value must be at least ``3 * max(tokenring.suspect_timeout,
    tokenring.change_timeout)``."""

    def __attrs_post_init__(self) -> None:
        for what, book in (("members", self.members), ("contacts", self.contacts)):
            for pid, address in book.items():
                if not isinstance(pid, int) or not 0 <= pid < 2**64:
                    raise ConfigurationError(f"{what}: process id out of range: {pid!r}")
                parse_host_port(address)
        if self.contacts and set(self.members) - {self.pid}:
            raise ConfigurationError(
                "TokenRingNodeConfig: bootstrap with 'members' or join through 'contacts', not both"
            )
        if self.pid in self.contacts:
            raise ConfigurationError("TokenRingNodeConfig: a node cannot be its own contact")
        if self.advertise is not None:
            parse_host_port(self.advertise)
        if self.incarnation is not None:
            try:
                check_incarnation(self.incarnation)
            except LocalProtocolError as exc:
                raise ConfigurationError(f"TokenRingNodeConfig.incarnation: {exc}") from None
        # A full view change sends the unstable window in one frame.
        self.tokenring.check_limits(self.limits)
        check_tcp_fields(self, "TokenRingNodeConfig")
        if self.idle_timeout is not None:
            ring = self.tokenring
            least = 3 * max(ring.suspect_timeout, ring.change_timeout)
            if not self.idle_timeout >= least:
                raise ConfigurationError(
                    "TokenRingNodeConfig.idle_timeout must be at least 3 * max("
                    f"tokenring.suspect_timeout, tokenring.change_timeout) = {least!r} "
                    f"(live members send heartbeats more often), got {self.idle_timeout!r}"
                )

    def idle_after(self) -> float:
        """The idle timeout in effect (see :attr:`idle_timeout`)."""
        if self.idle_timeout is not None:
            return self.idle_timeout
        return max(30.0, 2 * self.tokenring.exclude_timeout)

    def node_config(self) -> NodeConfig:
        """The node configuration every endpoint is built from
        (:class:`epto.endpoint.NodeConfig`, ``mode="token-ring"``): this
        configuration's member, group and engine fields."""
        return NodeConfig(
            pid=self.pid,
            bind=self.bind,
            members=self.members,
            contacts=self.contacts,
            advertise=self.advertise,
            mode="token-ring",
            tokenring=self.tokenring,
            group=self.group,
            group_key=self.group_key,
            signing_key=self.signing_key,
            roster=self.roster,
            limits=self.limits,
            seed=self.seed,
            incarnation=self.incarnation,
            data_dir=self.data_dir,
            delivery_buffer=self.delivery_buffer,
            overflow=self.overflow,
            flush_timeout=self.flush_timeout,
        )

    def tcp(self) -> TcpNodeConfig:
        """The transport's part of this configuration (the idle timeout in
        effect: :meth:`idle_after`)."""
        return TcpNodeConfig(
            bind=self.bind,
            advertise=self.advertise,
            limits=self.limits,
            delivery_buffer=self.delivery_buffer,
            overflow=self.overflow,
            flush_timeout=self.flush_timeout,
            reconnect_interval=self.reconnect_interval,
            connect_timeout=self.connect_timeout,
            send_queue=self.send_queue,
            max_connections=self.max_connections,
            max_connections_per_address=self.max_connections_per_address,
            handshake_timeout=self.handshake_timeout,
            first_frame_limit=self.first_frame_limit,
            idle_timeout=self.idle_after(),
            link_delays=self.link_delays,
        )


class MemberExcludedError(LocalProtocolError):
    """This process is out of the group's view for good (excluded by a view
    change, its delivered prefix diverged, or it fell too far behind). The node
    has stopped; to take part again, start the member again (the same id, a
    new process: a later incarnation, which the group admits back; see
    docs/token-ring.md, *Restart*). :attr:`reason` is the process's
    ``exclusion``: ``"removed from the view"``, ``"diverged"`` or ``"too far
    behind"``. A process whose member runs again in a later incarnation stops
    with :class:`epto.SupersededError` instead."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


@attrs.frozen(kw_only=True, slots=True)
class TokenRingNodeStatistics(TcpNodeStatistics):
    """The process's counters and the transport's (:class:`~.tcp_config.TcpNodeStatistics`)."""

    role: str
    view: int
    instance: int
    core: tuple[ProcessId, ...]
    members: tuple[ProcessId, ...]
    holds_token: bool
    """This member holds the token now."""
    quorum: bool = False
    """This member is in a view and heard from a majority of its members
    (itself included) within ``tokenring.suspect_timeout``: a member cut
    off from the majority reports False within that time, before the
    majority can have moved it out of the core (and long before it excludes
    it, ``exclude_timeout``); True again once it hears them."""
    incarnation: int = 0
    """This start of the member."""
