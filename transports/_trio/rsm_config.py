"""The configuration, status and error of a replicated state machine on a
trio node (:class:`~epto.transports.trio_rsm.ReplicatedNode`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from epto import ConfigurationError, EptoError, ProcessId
from epto.endpoint import Address, parse_host_port
from epto.rsm import CommandCodec, CommandFailed, JsonCodec, OrderKey

__all__ = ["CommandFailedError", "ReplicaConfig", "ReplicaStatus", "ResultUnavailableError"]


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
    joining: bool = False
    """Start empty and fetch the state from ``peers`` (a late joiner)."""
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


@attrs.frozen(kw_only=True)
class ReplicaStatus:
    ready: bool
    """The state is the group's (a newcomer: after its transfer)."""
    caught_up: bool
    """Ready, and nothing delivered waits to be applied."""
    applied: int
    cut: OrderKey | None
    digest: str
    members: tuple[ProcessId, ...]
    quorum: bool | None
    """Token ring: whether the core holds a majority of the view's members
    (deliveries progress); None for EpTO."""
    snapshots_taken: int
    transfers: int
    """States fetched (joining, or after a hole)."""
    audits: int
    """Audits whose answer could be compared (confirmed or contradicted)."""
    contradictions: int
    """Audits a peer's digest contradicted."""
    transfer_failures: int
