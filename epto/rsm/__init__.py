"""Replicated state machines over either ordering engine: commands declared
with :func:`replicated` on a :class:`StateMachine`, applied in the total
order by a :class:`Replica` (sans-IO), with snapshots at a consistent cut,
a digest chain that finds replicas with holes, state transfer to newcomers
and compaction. The trio driver is :mod:`epto.services.trio_rsm`.
See docs/rsm.md.
"""

from ._audit import AuditVerdicts as AuditVerdicts
from ._machine import CommandCodec as CommandCodec
from ._machine import CommandFailed as CommandFailed
from ._machine import JsonCodec as JsonCodec
from ._machine import StateMachine as StateMachine
from ._machine import replicated as replicated
from ._replica import EMPTY_DIGEST as EMPTY_DIGEST
from ._replica import Applied as Applied
from ._replica import OrderKey as OrderKey
from ._replica import Replica as Replica
from ._replica import Snapshot as Snapshot
from ._replica import chain as chain
from ._replica import order_key as order_key
from ._store import SnapshotStore as SnapshotStore
from ._store import StoredSnapshot as StoredSnapshot

__all__ = [
    "EMPTY_DIGEST",
    "Applied",
    "AuditVerdicts",
    "CommandCodec",
    "CommandFailed",
    "JsonCodec",
    "OrderKey",
    "Replica",
    "Snapshot",
    "SnapshotStore",
    "StateMachine",
    "StoredSnapshot",
    "chain",
    "order_key",
    "replicated",
]
