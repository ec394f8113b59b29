"""Parameters of optimistic delivery in a token-ring group (:class:`OptimisticConfig`)."""

from __future__ import annotations

import math
from typing import Literal

import attrs

from .._errors import ConfigurationError

Planner = Literal["optimal", "fast-seto", "seto", "none"]
PLANNERS: tuple[str, ...] = ("optimal", "fast-seto", "seto", "none")


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigurationError(f"OptimisticConfig.{attribute.name} must be > 0, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ConfigurationError(f"OptimisticConfig.{attribute.name} must be >= 0, got {value!r}")


def _planner(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in PLANNERS:
        raise ConfigurationError(
            f"OptimisticConfig.planner must be one of {', '.join(PLANNERS)}, got {value!r}"
        )


@attrs.frozen(kw_only=True, slots=True)
class OptimisticConfig:
    """How a token-ring member delivers optimistically (docs/optimistic.md).

    Give it as ``TokenRingConfig(optimistic=OptimisticConfig())``. Times are in
    the unit of ``now`` (seconds by default), like every token-ring timeout.
    """

    planner: Planner = attrs.field(default="optimal", validator=_planner)
    """How the coordinator computes the delays from the measured latencies and
    rates: ``"optimal"`` (the linear program's optimum), ``"fast-seto"`` (the
    heuristic), ``"seto"`` (SETO's steady state, with the coordinator as the
    reference sequencer) or ``"none"`` (no delay: deliver on arrival)."""
    probe_interval: float = attrs.field(default=0.5, validator=_positive)
    """How often a member measures the round trip to every other member."""
    probe_window: int = attrs.field(default=8)
    """Round trips kept per peer; the one-way estimate is half their median."""
    report_interval: float = attrs.field(default=1.0, validator=_positive)
    """How often a member checks whether its latencies or its send rate drifted
    from what it last reported to the coordinator (and reports if so)."""
    rate_window: float = attrs.field(default=10.0, validator=_positive)
    """Seconds over which a member measures its send rate."""
    drift: float = attrs.field(default=0.2, validator=_non_negative)
    """Relative change of a latency (or of a send rate, times 5) that makes a
    member report again and the coordinator plan again."""
    drift_floor: float = attrs.field(default=0.0005, validator=_non_negative)
    """Latency changes below this (absolute) never count as drift."""
    resolution: float = attrs.field(default=0.0001, validator=_positive)
    """Latencies are rounded to this before planning, so that the plan is a
    deterministic function of what was measured at this resolution."""
    max_delay: float = attrs.field(default=5.0, validator=_positive)
    """Largest delay a member accepts in a plan (a larger one is refused)."""
    replan_interval: float = attrs.field(default=1.0, validator=_non_negative)
    """Least time between two plans of the coordinator (view changes excepted)."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.probe_window, int) or not 1 <= self.probe_window <= 1024:
            raise ConfigurationError(
                f"OptimisticConfig.probe_window must be in [1, 1024], got {self.probe_window!r}"
            )

    def scaled(self, factor: float) -> OptimisticConfig:
        """The same configuration with every time multiplied by ``factor``."""
        times = (
            "probe_interval",
            "report_interval",
            "rate_window",
            "drift_floor",
            "resolution",
            "max_delay",
            "replan_interval",
        )
        return attrs.evolve(self, **{name: getattr(self, name) * factor for name in times})
