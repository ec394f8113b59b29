"""A replicated state machine on a ZeroMQ node, synchronous (docs/rsm.md).

::

    with ZmqReplica(KV(), NodeConfig(pid=1, bind=..., members=...)) as replica:
        old = replica.call("set", "colour", "blue", timeout=5.0)  # once applied here
        replica.poll()                      # apply what arrived meanwhile
        replica.machine.data["colour"]      # a local read

The application's thread applies the commands: :meth:`ZmqReplica.call`
applies deliveries until its own command is applied, :meth:`ZmqReplica.poll`
applies what has arrived. The machine therefore changes only inside those
two calls, and reads between them need no lock. With ``data_dir`` the
replica logs, snapshots, compacts and recovers exactly as
:class:`~epto.services.trio_rsm.ReplicatedNode` does, and its node keeps
the member's incarnation and lock there (``NodeConfig.data_dir``, unless the
node's configuration sets one): restarted on it, it is the same member in a
new incarnation, resumes the order after the cut it recovered and never
reuses an event id.

What it does not do (docs/rsm.md, *ZeroMQ replicas*): it has no transfer
server, so it neither fetches a state nor asks peers anything. It is ready
as soon as its own recovery ends (``joining=True`` and
``acknowledge="majority"`` are refused, ``peers`` is not used): ``call`` returns once the
command is applied *here* (the local acknowledgement). On EpTO that can
lose an acknowledged command: a replica cut off from the group applies its
own commands, which the group never orders; and a replica restarted after
the group moved on misses what was ordered while it was down (its later
commands are applied to a state without them). Use the trio driver where
acknowledged commands must survive.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Self

import attrs
from epto.transports.zmq_node import ZmqNode

from epto import ConfigurationError, EventId
from epto.endpoint import NodeConfig
from epto.rsm import CommandFailed, Replica, StateMachine

from ._rsm_config import (
    CommandFailedError,
    CommandTimeoutError,
    ReplicaConfig,
    ReplicaStatus,
)
from ._rsm_durable import Durability

__all__ = ["CommandTimeoutError", "ZmqReplica"]


class ZmqReplica:
    """One replica of ``machine`` on a :class:`~epto.transports.zmq_node.ZmqNode`."""

    def __init__(
        self, machine: StateMachine, node: NodeConfig, config: ReplicaConfig | None = None
    ) -> None:
        self.config = cfg = config if config is not None else ReplicaConfig()
        if cfg.joining is True:
            raise ConfigurationError("ZmqReplica: state transfer (joining) needs the trio driver")
        if cfg.acknowledge == "majority":
            raise ConfigurationError(
                "ZmqReplica acknowledges locally (it asks no peer); "
                "the majority acknowledgement needs the trio driver"
            )
        if cfg.data_dir and node.data_dir is None:
            # The member's incarnation and lock live with the replica's data.
            node = attrs.evolve(node, data_dir=cfg.data_dir)
        if node.resolved_mode() != "epto":
            raise ConfigurationError("ZmqReplica runs EpTO (the ZeroMQ node's engine)")
        self.machine = machine
        self.replica = Replica(machine, codec=cfg.codec, max_buffer=cfg.max_buffer)
        self._node_config = node
        self._node: ZmqNode | None = None
        self._durable = Durability.of(cfg, node.pid)
        self._results: dict[EventId, Any] = {}
        self._waiting: set[EventId] = set()

    def __enter__(self) -> Self:
        if self._durable is not None:
            self._durable.recover(self.replica, joining=False)
        node = ZmqNode(self._node_config)
        cut = self.replica.cut
        if cut is not None:
            # Neither deliver again nor broadcast below what this member
            # applied in an earlier incarnation.
            node.engine.resume_after(cut[0])
        self._node = node.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._node is not None:
                self._node.close()
        finally:
            if self._durable is not None:
                self._durable.close()

    def _require_node(self) -> ZmqNode:
        if self._node is None:
            raise ConfigurationError("ZmqReplica: use it inside a with block")
        return self._node

    def submit(self, name: str, *args: Any) -> EventId:
        """Replicate ``name(*args)`` without waiting (its result is dropped)."""
        if name not in type(self.machine).commands():
            raise ConfigurationError(
                f"{type(self.machine).__name__} has no replicated command {name!r}"
            )
        return self._require_node().broadcast(self.config.codec.encode(name, args))

    def call(self, name: str, *args: Any, timeout: float | None = None) -> Any:
        """Replicate ``name(*args)`` and apply deliveries until it is applied
        here; its result, :class:`CommandFailedError` if it raised everywhere,
        or :class:`CommandTimeoutError` after ``timeout`` seconds."""
        eid = self.submit(name, *args)
        self._waiting.add(eid)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while eid not in self._results:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandTimeoutError(f"{name} not applied within {timeout} s")
                self.poll(0.05 if left is None else min(0.05, left))
        finally:
            self._waiting.discard(eid)
        result = self._results.pop(eid)
        if isinstance(result, CommandFailed):
            raise CommandFailedError(result)
        return result

    def poll(self, timeout: float = 0.0) -> int:
        """Apply what has arrived, waiting up to ``timeout`` seconds for the
        first delivery; the number of commands applied."""
        node = self._require_node()
        applied = 0
        delivery = node.get(timeout=timeout)
        while delivery is not None:
            done = self.replica.deliver(delivery)
            if done is not None:
                applied += 1
                if done.event in self._waiting:
                    self._results[done.event] = done.result
                durable = self._durable
                if durable is not None and durable.applied(delivery, time.monotonic()):
                    durable.snapshot(self.replica)
            delivery = node.get(timeout=0)
        return applied

    def status(self) -> ReplicaStatus:
        stats = self._node.statistics() if self._node is not None else None
        replica = self.replica
        return ReplicaStatus(
            ready=replica.ready,
            caught_up=replica.ready and (stats is None or not stats.delivery_queue),
            applied=replica.applied,
            cut=replica.cut,
            digest=replica.digest.hex(),
            members=tuple(self._node_config.members),
            quorum=None,
            snapshots_taken=0 if self._durable is None else self._durable.snapshots_taken,
            transfers=0,
            transfer_failures=0,
            audits=0,
            contradictions=0,
        )
