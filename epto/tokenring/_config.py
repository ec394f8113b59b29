"""The token-ring configuration: one validated value object.

Times are in the caller's unit (seconds in the examples and the simulator).
The defaults suit a LAN or a simulated network with link delays of a few
milliseconds; scale every timeout with the link latency of the deployment.
"""

from __future__ import annotations

import attrs

from .._errors import ConfigurationError

AUTO_TOKEN_RING_MAX_GROUP = 30
"""Largest group for which ``mode="auto"`` picks the token ring over EpTO."""


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
    messages received meanwhile are sequenced together."""
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
    member that falls further behind must rejoin under a new identity."""
    max_batch: int = attrs.field(default=1024)
    """Most messages one token visit sequences (the token lists them in
    batches of at most 1024 ids). Everything the token carries until every
    core member holds it (about one visit per core member) is what a full view
    change exchanges in one message: keep it within the transport's frame."""

    def __attrs_post_init__(self) -> None:
        if self.k is not None and (not isinstance(self.k, int) or self.k < 1):
            raise ConfigurationError(f"TokenRingConfig.k must be None or >= 1, got {self.k!r}")
        if self.log_retention < 1:
            raise ConfigurationError("TokenRingConfig.log_retention must be >= 1")
        if self.max_batch < 1:
            raise ConfigurationError("TokenRingConfig.max_batch must be >= 1")
        if self.exclude_timeout <= self.suspect_timeout:
            raise ConfigurationError(
                "TokenRingConfig.exclude_timeout must exceed suspect_timeout "
                f"({self.exclude_timeout!r} <= {self.suspect_timeout!r})"
            )
        if self.suspect_timeout <= self.heartbeat_interval:
            raise ConfigurationError(
                "TokenRingConfig.suspect_timeout must exceed heartbeat_interval"
            )

    def scaled(self, factor: float) -> TokenRingConfig:
        """The same configuration with every time multiplied by ``factor`` (for
        example 1000 for a caller whose unit is the millisecond)."""
        times = (
            "token_hold",
            "heartbeat_interval",
            "suspect_timeout",
            "exclude_timeout",
            "readmit_after",
            "token_timeout",
            "change_timeout",
            "fetch_timeout",
        )
        return attrs.evolve(self, **{name: getattr(self, name) * factor for name in times})

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
