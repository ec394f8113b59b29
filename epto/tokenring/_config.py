"""The token-ring configuration: one validated value object.

Times are in the caller's unit (seconds in the examples and the simulator).
The defaults suit a LAN or a simulated network with link delays of a few
milliseconds; scale every timeout with the link latency of the deployment.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from .._errors import ConfigurationError
from .._event import ProcessId
from ..optimistic._config import OptimisticConfig
from ..wire._limits import HEADER_SIZE, SEAL_OVERHEAD, SIGNATURE_SIZE, Limits

AUTO_TOKEN_RING_MAX_GROUP = 30
"""Largest group for which ``mode="auto"`` picks the token ring over EpTO."""

UNSTABLE_MESSAGE_OVERHEAD = 96
"""Bytes a consensus message spends on one unstable message besides its
payload and signature: its sequence number and event header (37) and its id
in the one token state that comes with the payloads (at most 20, as a run of
one), rounded up. The batches' own bytes (first position, counts, holders)
are charged to ``max_unstable_bytes`` by the holder."""
CONSENSUS_FIXED_OVERHEAD = 1024
"""Bytes of a consensus message besides the unstable messages, as the frame
check counts them: ballots, counters, the token state's header. Member,
source, start and incarnation lists take 8 to 44 bytes per identity on top
(the incarnation list also names up to 64 members that left the view, 12
bytes each); the default budgets leave over 100 KiB of a 1 MiB frame for
them."""


DURABILITY = ("fsync", "write", "off")
"""The values of :attr:`TokenRingConfig.durability`."""


def _identities(value: Iterable[ProcessId] | None) -> frozenset[ProcessId] | None:
    return None if value is None else frozenset(value)


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ConfigurationError(f"TokenRingConfig.{attribute.name} must be > 0, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        raise ConfigurationError(f"TokenRingConfig.{attribute.name} must be >= 0, got {value!r}")


@attrs.frozen(kw_only=True, slots=True)
class TokenRingConfig:
    """Parameters of a token-ring process.

    ``k`` is the resiliency level: a message is delivered once ``k`` core
    members are known to hold it (the sequencer and the next ``k - 1`` core
    members that accepted the token). ``None`` (the default) means a majority of
    the view's members, the smallest ``k`` for which no delivered message can
    be lost by a later view change (docs/token-ring.md); deliveries then wait
    while the core is smaller than that majority. An explicit ``k`` is capped
    by the size of the current core (token list): it trades that guarantee for
    latency.
    """

    k: int | None = None
    token_hold: float = attrs.field(default=0.005, validator=_non_negative)
    """How long the holder keeps the token before sequencing and passing it;
    messages received meanwhile are sequenced together. The floor of an
    adaptive hold (``max_hold``)."""
    broadcast_hold: float = attrs.field(default=0.005, validator=_non_negative)
    """Least time between two sends of this member's own broadcasts: a
    broadcast made sooner than this after the previous send waits (at most
    this long) and leaves with the others made meanwhile, in one message per
    member. A broadcast after a quiet period leaves at the driver's next
    pull; held broadcasts also leave with anything else this member sends (an
    order notice, a heartbeat); at the token's holder they leave with the
    token it passes (which sequences them then anyway), at most the token's
    hold later. The floor of an adaptive hold (``max_hold``). 0: broadcasts
    leave at the driver's next pull. Not
    applied with ``optimistic`` delivery, whose delay plans assume
    broadcasts leave at once (docs/token-ring.md, *Broadcast*)."""
    max_hold: float = attrs.field(default=0.0, validator=_non_negative)
    """Longest the two holds above grow to under a sustained load (each is
    then its floor); 0 (the default): they do not grow. A member with
    several own broadcasts in flight (not
    delivered back to it yet) holds new ones ``broadcast_hold`` times their
    number, and a holder whose token carries several messages sequenced in
    the last round keeps it ``token_hold`` times their number, both at most
    ``max_hold`` (the token also at most ``token_timeout / (2 * core
    size)``). One command in flight at a time (a sequential caller) keeps
    the floors; a stream's frames and wake-ups per command fall with the
    longer holds, its latency grows with them. A hold whose floor is
    ``max_hold`` or more does not adapt. Not the default: a caller that keeps
    several commands in flight and waits for them (a closed loop) has them
    held too, and its throughput falls with the longer latency
    (docs/benchmarks-replication.md, *Adaptive holds*)."""
    heartbeat_interval: float = attrs.field(default=0.05, validator=_positive)
    """Every member sends a heartbeat to every other member this often."""
    suspect_timeout: float = attrs.field(default=0.3, validator=_positive)
    """Aggressive failure-detector timeout: a core member silent this long is
    moved to the external set (light i-view change)."""
    exclude_timeout: float = attrs.field(default=5.0, validator=_positive)
    """Conservative timeout: a member silent this long is excluded from the view
    (full view change); it must rejoin under a new identity."""
    readmit_after: float = attrs.field(default=1.0, validator=_non_negative)
    """An external member heard without interruption this long, and up to date,
    is moved back to the core (light i-view change)."""
    token_timeout: float = attrs.field(default=1.0, validator=_positive)
    """A core member that sees no token progress this long asks for an i-view
    change, which regenerates the token."""
    change_timeout: float = attrs.field(default=0.4, validator=_positive)
    """A proposer that has not decided after this long retries with a higher
    ballot; member ranks stagger the retries."""
    fetch_timeout: float = attrs.field(default=0.1, validator=_positive)
    """How long a process waits for a missing message before fetching it."""
    log_retention: int = attrs.field(default=10_000)
    """Delivered messages kept to serve members that fetch what they missed; a
    member that falls further behind must rejoin under a new identity. At
    least ``max_unstable_messages``; delivered messages the token's unstable
    window still covers are kept whatever this says."""
    max_batch: int = attrs.field(default=1024)
    """Most messages one token visit sequences (the token lists them in
    batches of at most 1024 ids). Everything the token carries until every
    core member holds it (about one visit per core member) is what a full view
    change exchanges in one message; ``max_unstable_bytes`` and
    ``max_unstable_messages`` bound it."""
    max_unstable_bytes: int = attrs.field(default=512 * 1024)
    """Most payload and signature bytes of the messages the token carries
    (sequenced, not yet known to every core member), plus 16 bytes and 8 per
    member of the view for each batch they are listed in: the holder stops
    sequencing while one more message would exceed it (a message larger than
    the budget is sequenced alone once the window is empty). A full view
    change sends this window in one Promise, Accept and Decided, so it must
    fit the transport's frame (:meth:`check_limits`)."""
    allowed_joiners: frozenset[ProcessId] | None = attrs.field(default=None, converter=_identities)
    """Identities that may join the group by a view change (``None``: any).
    Without a group key anyone can claim an identity, and an identity that
    joins is a member: the protocol tolerates members that crash, not members
    that lie. A signed group's TCP node admits its roster only."""
    max_unstable_messages: int = attrs.field(default=4096)
    """Most messages the token carries (the same window, counted in messages;
    a consensus message lists them in one list of at most
    ``Limits.max_events_per_ball``)."""

    durability: str = "fsync"
    """How a driver with the member's data directory keeps the member's
    vote (its acceptor state and the token states it accepted, with the
    window's payloads: :meth:`TokenRingProcess.take_durable`), written
    before any frame that depends on it leaves, so that a member restarted
    with its directory votes as itself and a majority restarted at once
    comes back on its own (docs/token-ring.md, *A majority restarted at
    once*). ``"fsync"`` (the default): written and flushed to the disk
    (``fsync``) before the frames leave: survives the process and the
    machine crashing. ``"write"``: written, not flushed: survives the
    process crashing (a SIGKILL), not the machine (a power loss may lose
    the latest records: restart such a member without its directory, or its
    vote may be one it already gave differently). ``"off"``: nothing kept (a
    restarted member has no vote; a majority restarted at once waits for
    the operator). Without a data directory nothing is kept."""

    optimistic: OptimisticConfig | None = attrs.field(default=None)
    """Deliver optimistically too (docs/optimistic.md): every message is
    delivered first with the tag ``OPTIMISTIC``, at its arrival plus a planned
    delay, then with the tag ``FINAL`` in the total order. None (the default):
    only the total order, tagged ``IN_ORDER``."""

    def __attrs_post_init__(self) -> None:
        if self.optimistic is not None and not isinstance(self.optimistic, OptimisticConfig):
            raise ConfigurationError(
                "TokenRingConfig.optimistic must be an epto.optimistic.OptimisticConfig or None"
            )
        if self.durability not in DURABILITY:
            raise ConfigurationError(
                f"TokenRingConfig.durability must be one of {', '.join(DURABILITY)}, "
                f"got {self.durability!r}"
            )
        if self.k is not None and (not isinstance(self.k, int) or self.k < 1):
            raise ConfigurationError(f"TokenRingConfig.k must be None or >= 1, got {self.k!r}")
        if self.log_retention < 1:
            raise ConfigurationError("TokenRingConfig.log_retention must be >= 1")
        if self.max_batch < 1:
            raise ConfigurationError("TokenRingConfig.max_batch must be >= 1")
        if self.max_unstable_bytes < 1 or self.max_unstable_messages < 1:
            raise ConfigurationError(
                "TokenRingConfig.max_unstable_bytes and max_unstable_messages must be >= 1"
            )
        if self.log_retention < self.max_unstable_messages:
            # A full view change gathers the unstable window from the members'
            # logs: a member must keep at least a window of what it delivered.
            raise ConfigurationError(
                f"TokenRingConfig.log_retention={self.log_retention} must be at least "
                f"max_unstable_messages={self.max_unstable_messages} (the unstable "
                "window a view change may need from the log)"
            )
        if self.exclude_timeout <= self.suspect_timeout:
            raise ConfigurationError(
                "TokenRingConfig.exclude_timeout must exceed suspect_timeout "
                f"({self.exclude_timeout!r} <= {self.suspect_timeout!r})"
            )
        if self.suspect_timeout <= self.heartbeat_interval:
            raise ConfigurationError(
                "TokenRingConfig.suspect_timeout must exceed heartbeat_interval"
            )

    def consensus_bytes(self) -> int:
        """Largest frame body a Promise, Accept or Decided of a full view
        change needs for a window at the budgets (see :meth:`check_limits`)."""
        return (
            self.max_unstable_bytes
            + self.max_unstable_messages * UNSTABLE_MESSAGE_OVERHEAD
            + CONSENSUS_FIXED_OVERHEAD
        )

    def check_limits(self, limits: Limits) -> None:
        """Raise ``ConfigurationError`` unless a full view change fits frames of
        ``limits`` (sealed): the window at the budgets plus its overhead
        (:meth:`consensus_bytes`) fits ``max_frame_size``, its message count
        fits ``max_events_per_ball``, and one message of ``max_payload_size``
        (signed) fits ``max_unstable_bytes``, so that a window never exceeds
        the budgets."""
        room = limits.max_frame_size - HEADER_SIZE - SEAL_OVERHEAD
        if self.consensus_bytes() > room:
            raise ConfigurationError(
                f"TokenRingConfig.max_unstable_bytes={self.max_unstable_bytes} with "
                f"max_unstable_messages={self.max_unstable_messages} needs consensus "
                f"frames of {self.consensus_bytes()} bytes, more than the "
                f"{room} a frame of max_frame_size={limits.max_frame_size} carries"
            )
        if self.max_unstable_messages > limits.max_events_per_ball:
            raise ConfigurationError(
                f"TokenRingConfig.max_unstable_messages={self.max_unstable_messages} "
                f"exceeds Limits.max_events_per_ball={limits.max_events_per_ball}"
            )
        if limits.max_payload_size + SIGNATURE_SIZE > self.max_unstable_bytes:
            raise ConfigurationError(
                f"Limits.max_payload_size={limits.max_payload_size} (signed) exceeds "
                f"TokenRingConfig.max_unstable_bytes={self.max_unstable_bytes}"
            )

    def scaled(self, factor: float) -> TokenRingConfig:
        """The same configuration with every time multiplied by ``factor`` (for
        example 1000 for a caller whose unit is the millisecond)."""
        # Every float field is a time: a hold, an interval or a timeout (a
        # list written by hand once left broadcast_hold out).
        times = [f.name for f in attrs.fields(TokenRingConfig) if f.type in (float, "float")]
        scaled = {name: getattr(self, name) * factor for name in times}
        optimistic = None if self.optimistic is None else self.optimistic.scaled(factor)
        return attrs.evolve(self, optimistic=optimistic, **scaled)

    def timing_floors(self, group_size: int, latency: float) -> dict[str, float]:
        """The shortest timeouts a group of ``group_size`` members can live
        with when one-way link delays (scheduling delays included) reach
        ``latency`` (docs/token-ring.md, *Timing*):

        * ``token_timeout``: ``group_size * (2 * token_hold + 3 * latency)``.
          An idle holder keeps the token ``token_timeout / (2 * core)`` (a
          busy one at most that), so a rotation takes ``token_timeout / 2``
          plus one link delay per member; a shorter timeout declares the
          token lost before it comes round, and every view change that
          regenerates it does so again (a livelock);
        * ``suspect_timeout``: two heartbeat intervals and four delays;
        * ``change_timeout``: four delays (two round trips of consensus);
        * ``readmit_after``: eight delays; ``exclude_timeout``: twenty, and
          above the suspicion floor;
        * ``fetch_timeout``: half a delay.
        """
        if not (isinstance(group_size, int) and group_size >= 1):
            raise ConfigurationError(f"group size must be >= 1, got {group_size!r}")
        if not latency >= 0:
            raise ConfigurationError(f"latency must be >= 0, got {latency!r}")
        suspect = 2 * self.heartbeat_interval + 4 * latency
        return {
            "token_timeout": group_size * (2 * self.token_hold + 3 * latency),
            "suspect_timeout": suspect,
            "change_timeout": 4 * latency,
            "readmit_after": 8 * latency,
            "exclude_timeout": max(20 * latency, 2 * suspect),
            "fetch_timeout": latency / 2,
        }

    def check_timing(self, group_size: int, latency: float) -> None:
        """Raise ``ConfigurationError`` naming every timeout below its floor
        for ``group_size`` members and one-way delays up to ``latency``
        (:meth:`timing_floors`); :meth:`fitted` corrects them instead."""
        floors = self.timing_floors(group_size, latency)
        short = [
            f"{name}={getattr(self, name)!r} < {floor:.4g}"
            for name, floor in floors.items()
            if getattr(self, name) < floor
        ]
        if short:
            raise ConfigurationError(
                f"TokenRingConfig cannot work for {group_size} members at one-way delays "
                f"up to {latency!r}: {', '.join(short)} (a token timeout below one "
                "rotation regenerates the token for ever; raise them, or use "
                "TokenRingConfig.fitted)"
            )

    def fitted(self, group_size: int, latency: float) -> TokenRingConfig:
        """This configuration with every timeout raised to its floor for
        ``group_size`` members and one-way delays up to ``latency``
        (:meth:`timing_floors`); itself when none is below."""
        floors = self.timing_floors(group_size, latency)
        raised: dict[str, Any] = {n: f for n, f in floors.items() if getattr(self, n) < f}
        if not raised:
            return self
        fit = attrs.evolve(self, **raised)
        if fit.exclude_timeout <= fit.suspect_timeout:
            fit = attrs.evolve(fit, exclude_timeout=2 * fit.suspect_timeout)
        return fit

    def effective_k(self, members: int, core: int) -> int:
        """The resiliency level used in a view of ``members`` with ``core`` core members."""
        if self.k is None:
            return members // 2 + 1
        return max(1, min(self.k, core))


def choose_mode(group_size: int, mode: str = "auto") -> str:
    """``"epto"`` or ``"token-ring"`` for ``mode`` in ``{"epto", "token-ring", "auto"}``.

    ``auto`` picks the token ring for groups of at most
    :data:`AUTO_TOKEN_RING_MAX_GROUP` processes (deterministic agreement, low
    latency in small groups) and EpTO above (no leader, no failure detector,
    scales to thousands).
    """
    if mode in ("epto", "token-ring"):
        return mode
    if mode != "auto":
        raise ConfigurationError(f"mode must be 'epto', 'token-ring' or 'auto', got {mode!r}")
    if group_size < 1:
        raise ConfigurationError(f"group size must be >= 1, got {group_size!r}")
    return "token-ring" if group_size <= AUTO_TOKEN_RING_MAX_GROUP else "epto"
