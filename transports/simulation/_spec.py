"""What defines a simulated run: :class:`SimulationSpec`, a value (same spec,
same result), and the configurations and latency model it derives."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from epto import Config, ConfigurationError, CyclonConfig
from epto._defaults import DEFAULT_C, DEFAULT_CLOCK
from epto.optimistic import OptimisticConfig
from epto.tokenring import TokenRingConfig

from ._latency import ConstantLatency, LatencyModel, PlanetLabLatency, UniformLatency
from ._transit_stub import TransitStubLatency

LatencyKind = Literal["constant", "uniform", "planetlab", "transit-stub"]


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not (isinstance(value, int | float) and low <= value < high):
        raise ConfigurationError(f"{name} must be in [{low}, {high}), got {value!r}")


@attrs.frozen(kw_only=True)
class SimulationSpec:
    """Everything that defines a simulated run; same spec, same result."""

    processes: int = 100
    rounds: int = 60
    """Rounds (of ``round_interval``) during which events are broadcast."""
    broadcast_rate: float = 0.05
    """Probability that a process broadcasts in a round (ignored with ``events``)."""
    events: int | None = None
    """A fixed number of events, at uniformly random times and sources."""
    clock: Literal["logical", "global"] = DEFAULT_CLOCK
    fanout: int | None = None
    """``None``: from :func:`epto.params.derive_parameters`."""
    ttl: int | None = None
    """``None``: from :func:`epto.params.derive_parameters`."""
    c: float = DEFAULT_C
    round_interval: float = 125.0
    drift: float = 0.01
    """Each process's round length is uniform in ``[δ(1-d), δ(1+d)]``."""
    jitter: float = 0.0
    latency: LatencyKind = "planetlab"
    latency_low: float = 0.0
    """Uniform model: smallest latency."""
    latency_high: float = 100.0
    """Uniform model: largest latency; constant model: the latency."""
    planetlab_per_link: bool = True
    loss: float = 0.0
    break_duration: float | None = None
    """Token ring: how long a link broken by ``loss`` stays down (``None``: one
    round trip of that link, twice a latency drawn for it, at least one
    quantum: what a TCP reconnection takes)."""
    churn: float = 0.0
    """Processes replaced per round during the broadcasting rounds (α)."""
    ordering: Literal["strict", "paper"] = "strict"
    tagged_delivery: bool = False
    seed: int = 1
    payload_size: int = 16
    quantum: float | None = 1.0
    """Time resolution of the scheduler (``None``: exact)."""
    max_drain_rounds: int | None = None
    """Rounds allowed after the broadcasting rounds for events to settle
    (``None``: four times TTL plus the largest latency in rounds; token ring:
    the exclusion timeout plus four consensus timeouts and ten largest
    latencies)."""
    pss: Literal["full", "cyclon"] = "full"
    """Peer sampling: the static full view, or Cyclon (:class:`epto.epidemic.Node`)."""
    view_size: int = 50
    """Cyclon: entries per view."""
    shuffle_length: int = 8
    """Cyclon: entries per shuffle."""
    shuffle_period: float | None = None
    """Cyclon: time between shuffles (``None``: the round length)."""
    pss_seeds: int = 3
    """Cyclon: live processes a newcomer is given to join through (a tracker's
    answer); with one, a newcomer whose seed crashes before answering stays
    alone."""
    pss_warmup: int = 50
    """Cyclon: rounds run before the first broadcast, for the views to mix
    (processes join one by one through a random earlier one)."""
    stop_when_complete: bool = True
    """Stop as soon as every live process has delivered every event broadcast
    since it joined: nothing can change the outcome after that, though stale
    copies may gossip on for up to TTL slow hops. ``False`` runs on until no
    ball is in flight (the work figures then include that tail; a token ring
    runs until ``max_drain_rounds``)."""
    mode: Literal["epto", "token-ring", "atoms"] = "epto"
    """The ordering engine: EpTO, or a token ring (docs/token-ring.md) whose
    timeouts are scaled to ticks as milliseconds (``pss_seeds`` is then the
    number of members a newcomer joins through), or sequencing atoms for
    ``groups`` overlapping groups (docs/atoms.md)."""
    groups: int | None = None
    """Atoms: how many Zipf-sized groups over the processes (``None``: 8)."""
    atoms_placement: Literal["latency", "members", "blind"] = "latency"
    """Atoms: where the sequencing machines go (docs/atoms.md): placed for the
    latency model on any process (``"latency"``), on members of the overlaps
    only (``"members"``), or latency-blind on members (``"blind"``)."""
    k: int | None = None
    """Token ring: the resiliency level (``None``: a majority of the view)."""
    optimistic: str | None = None
    """Token ring: deliver optimistically too, with delays from this planner
    (``"optimal"``, ``"fast-seto"``, ``"seto"`` or ``"none"``; docs/optimistic.md)."""
    partition: float = 0.0
    """Fraction of the initial processes cut off from the others (drawn at
    random) for ``partition_rounds`` from ``partition_start``; 0: none."""
    partition_start: float | None = None
    """Rounds after the first broadcasting round (``None``: a quarter of ``rounds``)."""
    partition_rounds: float | None = None
    """How long the partition lasts, in rounds (``None``: half of ``rounds``)."""
    require_agreement: bool = False
    """EpTO: count holes and validity violations as failures (a token ring
    always does; EpTO's agreement is probabilistic, so by default they are only
    reported)."""
    max_items_per_instant: int | None = None
    """The simulator's stall bound (``Simulation(max_items_per_instant=)``;
    ``None``: its default)."""
    wire: bool = False
    """Every process runs as a full endpoint (framing, sealing, signatures,
    splitting), frames as bytes on the links: EpTO's as datagrams (over a
    full view), the token ring's and sequencing atoms' on simulated streams;
    for small runs (``Simulation(wire=True)``)."""

    def validate(self) -> None:
        if not isinstance(self.processes, int) or self.processes < 2:
            raise ConfigurationError(f"processes must be at least 2, got {self.processes!r}")
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise ConfigurationError(f"rounds must be at least 1, got {self.rounds!r}")
        _check_range("broadcast_rate", self.broadcast_rate, 0, 1.000001)
        if self.events is not None and (not isinstance(self.events, int) or self.events < 0):
            raise ConfigurationError(f"events must be a non-negative integer, got {self.events!r}")
        _check_range("drift", self.drift, 0, 1)
        _check_range("loss", self.loss, 0, 1)
        if self.break_duration is not None and not self.break_duration >= 0:
            raise ConfigurationError(
                f"break_duration must be >= 0 or None, got {self.break_duration!r}"
            )
        _check_range("churn", self.churn, 0, self.processes)
        if self.payload_size < 8:
            raise ConfigurationError("payload_size must be at least 8 bytes")
        if self.pss not in ("full", "cyclon"):
            raise ConfigurationError(f"pss must be 'full' or 'cyclon', got {self.pss!r}")
        if not isinstance(self.pss_warmup, int) or self.pss_warmup < 0:
            raise ConfigurationError(f"pss_warmup must be >= 0, got {self.pss_warmup!r}")
        self.cyclon_config()
        if self.mode not in ("epto", "token-ring", "atoms"):
            raise ConfigurationError(
                f"mode must be 'epto', 'token-ring' or 'atoms', got {self.mode!r}"
            )
        if self.mode == "atoms":
            self._validate_atoms()
        if self.k is not None and (not isinstance(self.k, int) or self.k < 1):
            raise ConfigurationError(f"k must be a positive integer, got {self.k!r}")
        ring = self.mode == "token-ring"
        if self.optimistic is not None:
            if not ring:
                raise ConfigurationError("optimistic delivery needs mode 'token-ring'")
            OptimisticConfig(planner=self.optimistic)  # type: ignore[arg-type]
        if ring and self.pss != "full":
            raise ConfigurationError("a token ring has no peer sampling: pss must be 'full'")
        _check_range("partition", self.partition, 0, 1)
        bound = self.max_items_per_instant
        if bound is not None and not (isinstance(bound, int) and bound >= 1):
            raise ConfigurationError(
                f"max_items_per_instant must be a positive integer, got {bound!r}"
            )
        for name in ("partition_start", "partition_rounds"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 <= value < 1e9):
                raise ConfigurationError(f"{name} must be a non-negative number, got {value!r}")

    def _validate_atoms(self) -> None:
        # The engine assumes reliable FIFO links and a static membership.
        if self.loss or self.churn or self.partition or self.pss != "full":
            raise ConfigurationError(
                "sequencing atoms assume reliable links and a static membership: "
                "loss, churn, partition and pss do not apply"
            )
        if self.groups is not None and (not isinstance(self.groups, int) or self.groups < 1):
            raise ConfigurationError(f"groups must be a positive integer, got {self.groups!r}")
        if self.atoms_placement not in ("latency", "members", "blind"):
            raise ConfigurationError(
                "atoms_placement must be 'latency', 'members' or 'blind', "
                f"got {self.atoms_placement!r}"
            )

    def partition_window(self) -> tuple[float, float] | None:
        """``(start, end)`` of the partition in rounds after the first
        broadcasting round, or None without one."""
        if not self.partition:
            return None
        start = self.rounds / 4 if self.partition_start is None else self.partition_start
        length = self.rounds / 2 if self.partition_rounds is None else self.partition_rounds
        return start, start + length

    def cyclon_config(self) -> CyclonConfig | None:
        """The Cyclon configuration, or None for the full view."""
        if self.pss != "cyclon":
            return None
        return CyclonConfig(
            view_size=self.view_size,
            shuffle_length=self.shuffle_length,
            shuffle_period=self.shuffle_period or self.round_interval,
        )

    def latency_model(self) -> LatencyModel:
        if self.latency == "constant":
            return ConstantLatency(self.latency_high)
        if self.latency == "uniform":
            return UniformLatency(self.latency_low, self.latency_high)
        if self.latency == "planetlab":
            return PlanetLabLatency(per_link=self.planetlab_per_link)
        if self.latency == "transit-stub":
            # A topology of 10,000 routers drawn from the run's seed, one host per process.
            return TransitStubLatency(self.processes, seed=self.seed)
        raise ConfigurationError(f"unknown latency model {self.latency!r}")

    def config(self, latency: LatencyModel) -> Config:
        """The processes' configuration: the lemmas' fanout and TTL for this
        group, churn, loss, drift ratio and (when every latency is below the
        round length) Lemma 6; explicit ``fanout``/``ttl`` win."""
        n = self.processes
        config = Config.for_group(
            n,
            c=self.c,
            clock=self.clock,
            churn=self.churn,
            loss=self.loss,
            drift=(1 + self.drift) / (1 - self.drift),
            bounded_latency=latency.maximum <= self.round_interval,
            round_interval=self.round_interval,
            ordering=self.ordering,
            tagged_delivery=self.tagged_delivery,
            clock_resolution=1000.0,
        )
        changes: dict[str, Any] = {}
        if self.fanout is not None:
            changes["fanout"] = self.fanout
        if self.ttl is not None:
            changes["ttl"] = self.ttl
        return attrs.evolve(config, **changes) if changes else config

    def tokenring_config(
        self, latency: LatencyModel, ticks_per_second: float = 1000.0
    ) -> TokenRingConfig:
        """The token ring's configuration: the defaults (in seconds) scaled to
        ticks, with every timeout kept well above the largest one-way latency
        of the model, and at least its floor for the group and that latency
        (:meth:`TokenRingConfig.fitted`: a token timeout below one rotation
        regenerates the token for ever)."""
        optimistic = (
            None if self.optimistic is None else OptimisticConfig(planner=self.optimistic)  # type: ignore[arg-type]
        )
        base = TokenRingConfig(k=self.k, optimistic=optimistic).scaled(ticks_per_second)
        top = latency.maximum
        return attrs.evolve(
            base,
            suspect_timeout=max(base.suspect_timeout, 4 * top),
            readmit_after=max(base.readmit_after, 8 * top),
            exclude_timeout=max(base.exclude_timeout, 20 * top),
            token_timeout=max(base.token_timeout, 8 * top),
            change_timeout=max(base.change_timeout, 4 * top),
            fetch_timeout=max(base.fetch_timeout, top / 2),
        ).fitted(self.processes, top)
