"""The one checked configuration object of an EpTO process."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

import attrs

from .._defaults import DEFAULT_C, DEFAULT_CLOCK, DEFAULT_ROUND_INTERVAL
from .._errors import ConfigurationError

_Validator: TypeAlias = Callable[[Any, "attrs.Attribute[Any]", Any], None]

ClockKind: TypeAlias = Literal["logical", "global"]
OrderingKind: TypeAlias = Literal["strict", "paper"]


def _positive_int(name: str) -> _Validator:
    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")

    return check


def _positive_float(name: str) -> _Validator:
    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ConfigurationError(f"{name} must be a positive finite number, got {value!r}")

    return check


def _one_of(name: str, allowed: tuple[str, ...]) -> _Validator:
    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if value not in allowed:
            raise ConfigurationError(f"{name} must be one of {allowed}, got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class Config:
    """Parameters of one EpTO process; validated when built.

    Every time value is in the caller's unit of ``now`` (seconds for the real
    transports, abstract time units in the simulator).
    """

    fanout: int = attrs.field(validator=_positive_int("fanout"))
    """K: peers each ball is sent to every round."""

    ttl: int = attrs.field(validator=_positive_int("ttl"))
    """TTL: rounds an event is relayed; it is stable once its copy's ttl exceeds this."""

    round_interval: float = attrs.field(
        default=DEFAULT_ROUND_INTERVAL,
        validator=_positive_float("round_interval"),
    )
    """δ: time between two rounds."""

    clock: ClockKind = attrs.field(
        default=DEFAULT_CLOCK,
        validator=_one_of("clock", ("logical", "global")),
    )
    """``"logical"`` (Alg. 4, no clock assumption) or ``"global"`` (Alg. 3).

    The global clock is made safe for unsynchronised clocks: a timestamp is
    ``max(now * clock_resolution, highest timestamp seen + 1)``, so a process
    whose clock lags never has its own events rejected, and never above
    :meth:`Process.stamp_limit` (a broadcast waits instead), so that no peer
    whose clock is within ``max_clock_skew`` refuses it (docs/parameters.md,
    *The global clock's guard*).
    """

    ordering: OrderingKind = attrs.field(
        default="strict",
        validator=_one_of("ordering", ("strict", "paper")),
    )
    """``"strict"``: the corrected conditions (total order always holds).
    ``"paper"``: the conditions as published, kept to reproduce their violation."""

    tagged_delivery: bool = False
    """Deliver events that arrive too late for the total order, once each, with
    :attr:`DeliveryTag.OUT_OF_ORDER` instead of dropping them."""

    clock_resolution: float = attrs.field(
        default=1_000_000.0,
        validator=_positive_float("clock_resolution"),
    )
    """Global clock ticks per unit of ``now`` (default: microseconds of seconds)."""

    max_clock_step: int = attrs.field(
        default=2**32,
        validator=_positive_int("max_clock_step"),
    )
    """Logical clock: the most received timestamps move the clock in one round.

    A received event whose ``ts`` is more than ``2 * max_clock_step`` above the
    clock the process had at the start of the round is refused (fault
    ``"ts-ahead"``); received timestamps move the clock at most
    ``max_clock_step`` above that clock. A peer therefore needs ``2**64 /
    max_clock_step`` rounds to push a clock to the end of its range, and a
    process that joins a group whose clocks are far ahead catches up one step
    a round (docs/epto.md, *Bounds on what a peer claims*).
    """

    max_clock_skew: float = attrs.field(
        default=60.0,
        validator=_positive_float("max_clock_skew"),
    )
    """Global clock: how far, in the unit of ``now``, a member's clock may run
    ahead of this process's. A received event whose ``ts`` is above
    ``(now + 2 * max_clock_skew) * clock_resolution`` is refused (fault
    ``"ts-ahead"``); received timestamps move the clock at most to
    ``(now + max_clock_skew) * clock_resolution``. A process stamps its own
    events at most ``floor(max_clock_skew * clock_resolution) - 1`` ticks
    ahead of ``now`` and holds the rest of a burst until its clock allows
    them, so a correct member's events are never refused. With the global
    clock, ``max_clock_skew * clock_resolution`` must be at least one tick."""

    def __attrs_post_init__(self) -> None:
        if self.clock == "global":
            ticks = self.max_clock_skew * self.clock_resolution
            if not 1 <= ticks < 2**62:
                raise ConfigurationError(
                    "max_clock_skew * clock_resolution must be between 1 and 2**62 clock "
                    f"ticks with the global clock, got {ticks!r} (max_clock_skew "
                    f"{self.max_clock_skew!r}, clock_resolution {self.clock_resolution!r}): "
                    "the guard against timestamps from the future would refuse every "
                    "member's events; raise clock_resolution or max_clock_skew"
                )

    @classmethod
    def for_group(
        cls,
        n: int,
        *,
        c: float = DEFAULT_C,
        clock: ClockKind = DEFAULT_CLOCK,
        churn: float = 0.0,
        loss: float = 0.0,
        drift: float = 1.0,
        bounded_latency: bool = False,
        **fields: object,
    ) -> Config:
        """Fanout and TTL from the EpTO paper's Lemmas 3-7 for a group of ``n``.

        Any other field of :class:`Config` may be passed by keyword.
        """
        from ._params import derive_parameters

        p = derive_parameters(
            n,
            c=c,
            clock=clock,
            churn=churn,
            loss=loss,
            drift=drift,
            bounded_latency=bounded_latency,
        )
        return cls(fanout=p.fanout, ttl=p.ttl, clock=clock, **fields)  # type: ignore[arg-type]
