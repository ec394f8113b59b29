"""The configuration, status and error of a replicated state machine on a
trio node (:class:`~epto.services.trio_rsm.ReplicatedNode`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import attrs

from epto import ConfigurationError, EptoError, ProcessId
from epto.endpoint import Address, parse_host_port
from epto.rsm import CommandCodec, CommandFailed, JsonCodec, OrderKey

__all__ = [
    "CommandFailedError",
    "CommandTimeoutError",
    "ReplicaConfig",
    "ReplicaNotReadyError",
    "ReplicaStatus",
    "ResultUnavailableError",
]


class CommandFailedError(EptoError):
    """A command raised at every replica; ``error`` is the exception's type name."""

    def __init__(self, failed: CommandFailed) -> None:
        super().__init__(f"{failed.error}: {failed.message}")
        self.error = failed.error
        self.message = failed.message


class ResultUnavailableError(EptoError):
    """The command was applied, but inside the state this replica fetched from
    a peer (it had a hole or was joining when its own command came round), so
    its result was computed elsewhere and is not known here. The command took
    effect once, at its place in the order, like every other."""


class ReplicaNotReadyError(EptoError):
    """The replica is not ready (docs/rsm.md, *Ready*): it has not yet
    restored its own state, confirmed with a ready peer that nothing is
    missing, fetched what it lacks, or (token ring) entered the view. Nothing
    was broadcast: the call can be retried once ``wait_ready()`` returns."""


class CommandTimeoutError(TimeoutError):
    """A command was not acknowledged within the timeout. It may still take
    effect (it was broadcast): the outcome is unknown, not a failure."""


@attrs.frozen(kw_only=True)
class ReplicaConfig:
    """How a :class:`ReplicatedNode` keeps, shares and fetches its state."""

    data_dir: str | None = None
    """Delivery log and snapshots here (None: in memory only)."""
    snapshot_every: int = 5000
    """Take a snapshot after this many commands (0: never by count)."""
    snapshot_interval: float = 300.0
    """... or after this many seconds with at least one command (inf: never by time)."""
    keep: int = 2
    """Snapshots kept on disk."""
    transfer_bind: Address = "127.0.0.1:0"
    """Where this replica serves its state to newcomers (TCP)."""
    peers: Mapping[ProcessId, Address] = attrs.field(factory=dict)
    """Other replicas' transfer addresses (a newcomer fetches from them)."""
    joining: bool | Literal["auto"] = "auto"
    """How the replica's state at start is found to be the group's
    (docs/rsm.md, *Ready*). ``"auto"``: restore the local state (``data_dir``,
    under this replica's id), then, with ``peers``, ask them before applying
    anything: ready at once if a ready peer's latest cut is one this state
    (and what it buffered meanwhile) already holds, else fetch from a ready
    peer; with no ready peer, ready once a majority of ``peers`` plus itself
    answered and none is ahead of it (a group starting or restarting
    together). Without ``peers``: ready after the local recovery.
    ``True``: discard the local data and fetch (a late joiner). ``False``:
    ready after the local recovery, never ask (the first replica of a group,
    or one the application knows is whole)."""
    acknowledge: Literal["majority", "local"] | None = None
    """When ``call`` returns (docs/rsm.md, *Acknowledgement*).
    ``"majority"`` (EpTO's default): once a majority of the replicas
    (``peers`` plus itself) confirmed a cut at or past the command with the
    same digest there. ``"local"`` (the token ring's default, whose positions
    are final once delivered): once applied here; on EpTO an acknowledged
    command can then be lost (a replica cut off from the group applies its
    own commands, which the group never orders, and its audits later replace
    its state). None: the engine's default."""
    probe_timeout: float = 2.0
    """Seconds one question to a peer (is it ready, its cut, its digests)
    may take before that peer counts as unreachable for it."""
    quorum_timeout: float = 3.0
    """EpTO with ``peers``: ``status().quorum`` is true while a majority of
    ``peers`` plus itself answered within this many seconds (idle, each peer
    is asked every third of it)."""
    join_settle: float | None = None
    """EpTO: seconds a newcomer waits before fetching (None: 2 x (TTL + 2) rounds)."""
    audit_interval: float = 5.0
    """Seconds between two audits: this replica asks a peer of ``peers`` for
    its latest cut and digest and compares with its own digest there; when
    two peers contradict it (more than confirm), it fetches its state again
    (an EpTO replica that missed a command). ``inf``: no audit."""
    transfer_timeout: float = 60.0
    max_snapshot_bytes: int = 1 << 30
    max_buffer: int = 1_000_000
    """Deliveries a joining replica buffers at most."""
    codec: CommandCodec = attrs.field(factory=JsonCodec)
    on_applied: Callable[[], None] | None = None
    """Called, in the replica's own task, after each command applied here and
    after a fetched state is restored: the place to look at the machine's new
    state (the replicated editor sends what its document wants sent). It must
    not block; an exception it raises stops the replica."""

    def __attrs_post_init__(self) -> None:
        if self.snapshot_every < 0 or self.keep < 1 or self.max_snapshot_bytes < 1:
            raise ConfigurationError("ReplicaConfig: snapshot_every >= 0, keep >= 1")
        parse_host_port(self.transfer_bind)
        for address in self.peers.values():
            parse_host_port(address)
        if self.joining not in (True, False, "auto"):
            raise ConfigurationError("ReplicaConfig.joining: True, False or 'auto'")
        if self.acknowledge not in (None, "majority", "local"):
            raise ConfigurationError("ReplicaConfig.acknowledge: 'majority', 'local' or None")
        if not self.probe_timeout > 0 or not self.quorum_timeout > 0:
            raise ConfigurationError("ReplicaConfig: probe_timeout and quorum_timeout > 0")


@attrs.frozen(kw_only=True)
class ReplicaStatus:
    ready: bool
    """The state is the group's (docs/rsm.md, *Ready*): in the view, its own
    state restored, what it lacked fetched from a ready peer."""
    caught_up: bool
    """Ready, and nothing delivered waits to be applied."""
    applied: int
    cut: OrderKey | None
    digest: str
    members: tuple[ProcessId, ...]
    quorum: bool | None
    """Whether this member hears a majority of its group now. Token ring: the
    node's own verdict (its statistics' ``quorum``; None where the node does
    not give one). EpTO with ``peers``: a majority of ``peers`` plus itself
    answered within ``quorum_timeout``. None: not known (EpTO without
    ``peers`` in a group of several)."""
    snapshots_taken: int
    transfers: int
    """States fetched (joining, or after a hole)."""
    audits: int
    """Audits whose answer could be compared (confirmed or contradicted)."""
    contradictions: int
    """Audits a peer's digest contradicted."""
    transfer_failures: int
    resolutions: int = 0
    """EpTO: times this replica's audits found its prefix on a branch that no
    majority holds and it took the branch the resolution chose (docs/rsm.md,
    *A partition with no majority*)."""
    states_refused: int = 0
    """States served by a peer that the state machine's ``restore`` raised on
    (``{}``, garbage, wrong types): refused like a corrupt state (counted in
    ``transfer_failures`` too), the machine rolled back, the next peer asked."""
    confirmed: OrderKey | None = None
    """The highest cut a majority of the replicas confirmed with this
    replica's digest there (EpTO, ``acknowledge="majority"``; else None): a
    call whose command is at or below it has returned."""
