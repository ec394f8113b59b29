"""How to run one node, whichever engine and transport: :class:`NodeConfig`.

It lives in the sans-IO layer because the endpoints (:mod:`epto.endpoint`)
are built from it; the drivers (``epto.transports``) re-export it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Literal, TypeAlias

import attrs

from .._defaults import DEFAULT_CLOCK, DEFAULT_ROUND_INTERVAL
from .._errors import ConfigurationError, LocalProtocolError
from .._event import ProcessId
from .._incarnation import check_incarnation
from ..atoms._config import AtomsConfig
from ..epidemic._config import Config
from ..epidemic._cyclon import CyclonConfig
from ..tokenring import TokenRingConfig, choose_mode
from ..wire._codec import FrameCodec
from ..wire._frames import FrameRegistry
from ..wire._limits import Limits
from ..wire._seal import GroupKey, GroupSealer
from ..wire._signing import EventSigner, SignatureVerifier

OverflowPolicy: TypeAlias = Literal["fail", "drop"]

Mode: TypeAlias = Literal["epto", "token-ring", "atoms", "auto"]
"""The ordering engine of a node: EpTO, the token ring, sequencing atoms
(overlapping groups), or EpTO or the token ring chosen by group size."""

Address: TypeAlias = str
"""Where a member is reached: ``"host:port"`` for the socket transports, any
name on the in-memory hub."""


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


def _check_incarnation(_inst: object, _attr: object, value: int | None) -> None:
    if value is not None:
        try:
            check_incarnation(value)
        except LocalProtocolError as exc:
            raise ConfigurationError(f"NodeConfig.incarnation: {exc}") from None


def _check_members(_inst: object, _attr: object, value: Mapping[int, Address]) -> None:
    for pid, address in value.items():
        if not isinstance(pid, int) or not 0 <= pid < 2**64:
            raise LocalProtocolError(f"members: process id must be in [0, 2**64), got {pid!r}")
        if not isinstance(address, str):
            raise LocalProtocolError(f"members: address of {pid} must be a str, got {address!r}")


@attrs.frozen(kw_only=True)
class NodeConfig:
    """How to run one node; the same object serves every engine and transport.

    Every endpoint is built from it the same way
    (``XEndpoint(config, now, rng=..., wall=...)``): the fields every engine
    shares (``pid``, ``members``, ``group``, ``group_key``, ``limits``,
    ``signing_key``, ``roster``, ``seed``, ``incarnation``) are at the top,
    each engine's own settings nested (``epto``, ``tokenring``, ``atoms``).

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
    round_interval: float = DEFAULT_ROUND_INTERVAL
    """Seconds between rounds when ``epto`` is None."""
    clock: Literal["logical", "global"] = DEFAULT_CLOCK
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
    atoms: AtomsConfig | None = None
    """Sequencing atoms' settings (``mode="atoms"``, where it is required):
    the graph every node builds from the same membership, and what every
    node must share. ``members`` maps every node to its address."""
    contacts: Mapping[ProcessId, Address] = attrs.field(factory=dict, validator=_check_members)
    """Token ring only: a new identity joins a running group through these
    members (``members`` then stays empty); the group admits it by a view change."""
    fresh_group: bool = False
    """Token ring only: found a new group at position 0 with ``members`` even
    if ``data_dir`` says this member ran before, the explicit way to start a
    whole group again after every member went down at once, or a majority of
    them without their votes (docs/token-ring.md, *Restart*, *A majority
    restarted at once*). Every member of the new group must be started this
    way (or for the first time), and no process of the former group may still
    run. Ignored with ``contacts`` and by the other engines."""
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

    incarnation: int | None = attrs.field(default=None, validator=_check_incarnation)
    """This start of the member (docs/node.md, *Restart*): the number that
    tells it from every earlier process that ran under ``pid``. None (the
    default): the node draws it when it starts, one above the number kept in
    ``data_dir`` and at least the wall clock's seconds since 2025; an int
    fixes it (a test, or an application that keeps it elsewhere; it must grow
    from one start to the next)."""
    data_dir: str | None = None
    """The member's own directory (the delivery log's root, a replica's data
    directory): the node keeps its last incarnation there
    (``member-<pid>.json``) and holds a lock on it while it runs
    (``member-<pid>.lock``), so that a second live process with this id and
    directory is refused (:class:`epto.MemberRunningError`). None: no files;
    the incarnation comes from the wall clock alone."""

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("epto", "token-ring", "atoms", "auto"):
            raise ConfigurationError(
                "NodeConfig.mode must be 'epto', 'token-ring', 'atoms' or 'auto', "
                f"got {self.mode!r}"
            )
        mode = self.resolved_mode()
        if mode == "atoms" and self.atoms is None:
            raise ConfigurationError("NodeConfig: mode='atoms' needs atoms=AtomsConfig(graph=...)")
        if mode == "atoms" and self.contacts:
            raise ConfigurationError("NodeConfig.contacts is for joining a token ring")
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

    def resolved_mode(self) -> Literal["epto", "token-ring", "atoms"]:
        """The engine this configuration runs.

        ``"auto"`` picks the token ring for a group of at most
        :data:`epto.tokenring.AUTO_TOKEN_RING_MAX_GROUP` members (``group_size``,
        or the members and contacts given, this node included) and EpTO above;
        with a Cyclon sampler (partial views, groups too large to list) it picks
        EpTO. ``"token-ring"`` with a Cyclon sampler raises
        :class:`epto.ConfigurationError`: the token ring needs every member.
        """
        if self.mode == "atoms":
            if isinstance(self.sampler, CyclonConfig):
                raise ConfigurationError(
                    "NodeConfig: mode='atoms' needs the full view (sampler='full')"
                )
            return "atoms"
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
        return endpoint_codec(
            pid=self.pid,
            group=self.group,
            limits=self.limits,
            group_key=self.group_key,
            wall=now,
            rng=rng,
            ball_filter=ball_filter,
        )


def endpoint_codec(
    *,
    pid: ProcessId,
    group: int,
    limits: Limits,
    group_key: GroupKey | None,
    wall: float,
    rng: random.Random,
    registry: FrameRegistry | None = None,
    ball_filter: SignatureVerifier | None = None,
) -> FrameCodec:
    """The frame codec of one endpoint, whichever engine: the one place a
    codec and its sealer are built.

    A ``group_key`` seals every frame (AEAD) with a nonce counter started at
    ``wall`` (wall-clock seconds: above anything an earlier run of this
    process used) and a prefix drawn from ``rng``. The codec knows this
    endpoint's id (``me``), so sealed frames bound to another receiver are
    refused (``bad-tag``). ``registry`` is the engine's frame kinds (default:
    EpTO's); a ``ball_filter`` verifier checks every decoded ball.
    """
    sealer = None
    if group_key is not None:
        sealer = GroupSealer(group_key, counter_start=int(wall * 1e6), rng=rng)
    return FrameCodec(
        group=group,
        limits=limits,
        registry=registry,
        sealer=sealer,
        me=pid,
        ball_filter=ball_filter.filter_ball if ball_filter is not None else None,
    )


def parse_host_port(address: Address) -> tuple[str, int]:
    """``"host:port"`` to ``(host, port)``."""
    if isinstance(address, str):
        host, sep, port = address.rpartition(":")
        if sep and host and port.isdigit():
            return host.strip("[]"), int(port)
    raise LocalProtocolError(f"address must be 'host:port', got {address!r}")
