"""A replicated state machine on a trio node, either engine (docs/rsm.md).

::

    async with ReplicatedNode(KV(), node_config, ReplicaConfig(data_dir="kv-1")) as replica:
        await replica.wait_ready()
        old = await replica.call("set", "colour", "blue")  # applied everywhere, in order
        replica.machine.data["colour"]                      # a local read

:class:`ReplicatedNode` runs the node :func:`~epto.transports.trio_node.open_node`
opens for the configuration, applies what it delivers to an
:class:`epto.rsm.Replica`, completes each ``call`` when its own command is
applied here (with the command's result, or :class:`CommandFailedError`),
serves its state to newcomers (``transfer_bind``), fetches its own state
when it joins late or finds a hole, takes snapshots by policy and compacts
its delivery log.

Rules:

* **Durability** (with ``data_dir``): every command applied is first
  appended to the delivery log (``data_dir/log``); a snapshot records the log
  index it covers and is written atomically (:class:`epto.rsm.SnapshotStore`,
  ``data_dir/snapshots``); log segments wholly below the oldest snapshot kept
  are deleted. On start the newest snapshot that checks out is restored and the
  log after it replayed: a crash at any point loses no applied command and
  applies none twice.
* **Joining** (``joining=True``): deliveries are buffered; the state is
  fetched from one of ``peers`` (transfer addresses) at a cut that reaches
  what was buffered, its digest is confirmed by at least one other peer and
  contradicted by fewer than confirm it, then restored, and the buffer
  replayed. An EpTO newcomer first waits ``join_settle`` (default twice
  ``(TTL + 2)`` rounds): events broadcast before it joined are not delivered
  to it, and the snapshot's cut must be past all of them. A replica whose
  replica finds a hole (the token ring's positions skip) fetches its state
  the same way.
* **Sealed transfers**: with a ``group_key`` in the node's configuration,
  every transfer connection, served and fetched, is sealed under a key
  derived from it (``_trio/rsm_channel.py``); without one they are plain TCP.
* **Reads are local** (``replica.machine``): they see this replica's prefix of
  the order. Read-your-writes: ``await call(...)`` returns once the command
  is applied here. ``ReplicaConfig.on_applied`` is called after each command
  applied and each state restored (the editor's server uses it).

Size: one class whose parts share its state: applying, calls, fetching and
auditing all take the same apply lock and complete the same pending calls
(the transfer protocol, configuration and durability are modules of their
own already).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import trio

from epto import ConfigurationError, Delivery, EventId, ProcessId
from epto.endpoint import Address, NodeConfig, parse_host_port
from epto.rsm import (
    Applied,
    AuditVerdicts,
    CommandFailed,
    Replica,
    Snapshot,
    StateMachine,
)

from ._rsm_durable import Durability
from ._trio.rsm_channel import TransferKey
from ._trio.rsm_config import (
    CommandFailedError,
    ReplicaConfig,
    ReplicaStatus,
    ResultUnavailableError,
)
from ._trio.rsm_transfer import (
    TransferError,
    TransferServer,
    fetch_digest,
    fetch_latest,
    fetch_snapshot,
)
from .trio_node import open_node

__all__ = [
    "CommandFailedError",
    "ReplicaConfig",
    "ReplicaStatus",
    "ReplicatedNode",
    "ResultUnavailableError",
]


_IN_FETCHED_STATE: Final = object()
"""The result of a call whose command the fetched state covers."""


class ReplicatedNode:
    """One replica of ``machine`` on a trio node (see the module's rules)."""

    def __init__(
        self, machine: StateMachine, node: NodeConfig, config: ReplicaConfig | None = None
    ) -> None:
        self.config = cfg = config if config is not None else ReplicaConfig()
        self.machine = machine
        self.node_config = node
        self._ring = node.resolved_mode() == "token-ring"
        self.replica = Replica(
            machine,
            codec=cfg.codec,
            joining=cfg.joining,
            contiguous=self._ring,
            max_buffer=cfg.max_buffer,
        )
        self._node: Any = None
        self._pending: dict[EventId, trio.Event] = {}
        self._results: dict[EventId, Any] = {}
        self._held_calls: set[EventId] = set()
        """Our own commands delivered while not ready (buffered): completed by
        the restore, with their result or, when the fetched state covers
        them, as unknown."""
        self._durable = Durability.of(cfg, node.pid)
        self.transfers = 0
        self.transfer_failures = 0
        self.audits = 0
        self.contradictions = 0
        self._ready = trio.Event()
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.transfer_address = ""
        self._transfer_key = None if node.group_key is None else TransferKey(node.group_key)
        """Seals every transfer connection, served and fetched, when the group
        has a key: the states and digests a replica takes are then a member's."""
        self._applying = trio.Lock()
        """Held while a delivery is applied, a snapshot taken or a state
        restored: the machine changes under one of them at a time."""
        self._server = TransferServer(
            snapshot=self._snapshot_for_peer,
            ready=lambda: self.replica.ready,
            cut=lambda: self.replica.cut,
            digest_at=self.replica.digest_at,
            wait=min(30.0, cfg.transfer_timeout),
            key=self._transfer_key,
        )
        self._stack: AsyncExitStack | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        durable = self._durable
        if durable is not None:
            durable.recover(self.replica, joining=self.config.joining)
        async with AsyncExitStack() as stack:
            if durable is not None:
                stack.callback(durable.close)
            self._node = await stack.enter_async_context(open_node(self.node_config))
            nursery = self._nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)  # runs first on the way out
            host, port = parse_host_port(self.config.transfer_bind)
            serve = functools.partial(trio.serve_tcp, self._server.handle, port, host=host)
            listeners = await nursery.start(serve)
            bound = listeners[0].socket.getsockname()
            self.transfer_address = f"{bound[0]}:{bound[1]}"
            nursery.start_soon(self._apply_loop)
            nursery.start_soon(self._resync_loop)
            if self.config.peers and self.config.audit_interval < math.inf:
                nursery.start_soon(self._audit_loop)
            if self.replica.ready:
                self._ready.set()
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    @property
    def node(self) -> Any:
        """The node (``TrioNode`` or ``TokenRingNode``) under this replica."""
        return self._node

    async def wait_ready(self) -> None:
        """Until the state is the group's (at once unless joining)."""
        await self._ready.wait()

    # -- commands -------------------------------------------------------------------

    async def call(self, name: str, *args: Any) -> Any:
        """Replicate ``name(*args)``; its result once applied here, or
        :class:`CommandFailedError` if it raised (at every replica alike)."""
        if name not in type(self.machine).commands():
            raise ConfigurationError(
                f"{type(self.machine).__name__} has no replicated command {name!r}"
            )
        await self._ready.wait()
        payload = self.config.codec.encode(name, args)
        eid = self._node.broadcast(payload)
        done = self._pending[eid] = trio.Event()
        try:
            await done.wait()
        finally:
            self._pending.pop(eid, None)
        result = self._results.pop(eid)
        if isinstance(result, CommandFailed):
            raise CommandFailedError(result)
        if result is _IN_FETCHED_STATE:
            raise ResultUnavailableError(
                f"command {name!r} was applied in the state fetched from a peer; "
                "its result is not known here"
            )
        return result

    def submit(self, name: str, *args: Any) -> EventId:
        """Replicate ``name(*args)`` without waiting for it (its result is dropped)."""
        return self._node.broadcast(self.config.codec.encode(name, args))  # type: ignore[no-any-return]

    # -- applying -------------------------------------------------------------------

    async def _apply_loop(self) -> None:
        async for delivery in self._node:
            async with self._applying:
                if self._deliver(delivery):
                    await self._snapshot_to_disk()
            await trio.lowlevel.checkpoint_if_cancelled()

    def _deliver(self, delivery: Delivery) -> bool:
        """Apply one delivery; whether a snapshot is due."""
        replica = self.replica
        applied = replica.deliver(delivery)
        if not replica.ready:
            self._wake.set()  # joining, or a hole: the state must be fetched
            if delivery.event.id in self._pending:
                self._held_calls.add(delivery.event.id)
            return False
        if applied is None:
            if delivery.in_total_order:
                # At or below the cut: in the state fetched from a peer.
                self._complete_unknown([delivery.event.id])
            return False
        self._complete([applied])
        if self.config.on_applied is not None:
            self.config.on_applied()
        durable = self._durable
        return durable is not None and durable.applied(delivery, trio.current_time())

    def _complete(self, applied: list[Applied]) -> None:
        """Hand the results of our own commands to the calls awaiting them."""
        for done in applied:
            event = self._pending.get(done.event)
            if event is not None:
                self._results[done.event] = done.result
                event.set()

    def _complete_unknown(self, events: Iterable[EventId]) -> None:
        """Our commands that a fetched state covers: they were applied at the
        peer that provided it, and their results stay there. Without this a
        call whose command came round while this replica had a hole would
        wait forever."""
        for eid in events:
            event = self._pending.get(eid)
            if event is not None and not event.is_set():
                self._results[eid] = _IN_FETCHED_STATE
                event.set()

    async def _snapshot_to_disk(self) -> None:
        """A snapshot written in a worker thread while the caller holds
        ``_applying`` (nothing changes the machine meanwhile): the node keeps
        serving the group, however long a large state takes to write."""
        if self._durable is not None and self.replica.ready:
            await trio.to_thread.run_sync(self._durable.snapshot, self.replica)

    async def _snapshot_for_peer(self) -> Snapshot:
        """The state for a newcomer, taken in a worker thread between two
        deliveries."""
        async with self._applying:
            return await trio.to_thread.run_sync(self.replica.snapshot)

    # -- snapshots -------------------------------------------------------------------

    def take_snapshot(self) -> Path | None:
        """Write a snapshot now (with ``data_dir``) and compact the log, in
        the calling thread (the policy's snapshots are written in a worker
        thread instead)."""
        if self._durable is None or not self.replica.ready:
            return None
        return self._durable.snapshot(self.replica)

    @property
    def snapshots_taken(self) -> int:
        return 0 if self._durable is None else self._durable.snapshots_taken

    # -- fetching the state -------------------------------------------------------------

    async def _resync_loop(self) -> None:
        """Fetch the state while the replica is not ready (joining, or a hole)."""
        settle = self._settle()
        if not self.replica.ready and settle:
            await trio.sleep(settle)
        while True:
            if self.replica.ready:
                self._ready.set()
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            if self._ring and self.replica.needed() is None:
                # Nothing delivered yet: wait a little for the first delivery
                # (the snapshot must reach it), then take any.
                with trio.move_on_after(1.0):
                    while self.replica.needed() is None:
                        await trio.sleep(0.01)
            if await self._fetch():
                continue
            await trio.sleep(0.2)

    def _settle(self) -> float:
        if self._ring:
            return 0.0
        if self.config.join_settle is not None:
            return self.config.join_settle
        protocol = self.node_config.protocol_config()
        return 2 * (protocol.ttl + 2) * protocol.round_interval

    async def _fetch(self) -> bool:
        cfg = self.config
        peers = [a for p, a in cfg.peers.items() if p != self.node_config.pid]
        need = self.replica.needed()
        for i, address in enumerate(peers):
            try:
                snapshot = await fetch_snapshot(
                    address,
                    need,
                    timeout=cfg.transfer_timeout,
                    max_bytes=cfg.max_snapshot_bytes,
                    key=self._transfer_key,
                )
                if not await self._confirmed(snapshot, peers[:i] + peers[i + 1 :]):
                    self.transfer_failures += 1
                    continue
                async with self._applying:
                    self.replica.check_restorable(snapshot)
                    # The machine's restore in a worker thread: it takes seconds
                    # for a large state, and the node must keep answering the
                    # group. The replica's own bookkeeping (cut, digests, buffer)
                    # stays in this thread, where the audits and the transfer
                    # server read it.
                    await trio.to_thread.run_sync(self.machine.restore, snapshot.state)
                    restored = self.replica.restore(snapshot, state_restored=True)
                    self._complete(restored)
                    held, self._held_calls = self._held_calls, set()
                    self._complete_unknown(held)
                    if self.config.on_applied is not None:
                        self.config.on_applied()
                    # The buffered commands were applied without being logged:
                    # save the state as the base the log continues.
                    await self._snapshot_to_disk()
                if snapshot.cut is not None and not self._ring:
                    # An EpTO newcomer in an idle group has seen no timestamp:
                    # its next commands must come after what the group applied.
                    self._node.advance_clock(snapshot.cut[0])
            except (TransferError, ValueError):
                self.transfer_failures += 1
                continue
            self.transfers += 1
            return True
        return False

    async def _confirmed(self, snapshot: Snapshot, others: list[Address]) -> bool:
        """Whether another replica confirms ``snapshot``'s digest at its cut
        and fewer contradict it than confirm it (with no other replica to ask,
        the provider's word is taken)."""
        if not others:
            return True
        confirm = contradict = 0
        for address in others:
            try:
                digest = await fetch_digest(
                    address,
                    snapshot.cut,
                    timeout=self.config.transfer_timeout,
                    key=self._transfer_key,
                )
            except TransferError:
                continue
            if digest is None:
                continue
            if digest == snapshot.digest:
                confirm += 1
            else:
                contradict += 1
            if confirm > contradict:
                break
        return confirm >= 1 and contradict < confirm

    # -- audits -------------------------------------------------------------------------

    async def _audit_loop(self) -> None:
        """Compare this replica's digest with the peers', one peer per
        ``audit_interval``; fetch the state again when, by their latest
        comparable verdicts, more peers contradict it than confirm it (two at
        least)."""
        cfg = self.config
        peers = [a for p, a in sorted(cfg.peers.items()) if p != self.node_config.pid]
        verdicts = AuditVerdicts()
        turn = 0
        transfers = self.transfers
        while True:
            await trio.sleep(cfg.audit_interval)
            if not self.replica.ready or not peers:
                continue
            if transfers != self.transfers:  # verdicts on a state since replaced
                verdicts, transfers = AuditVerdicts(), self.transfers
            address = peers[turn % len(peers)]
            turn += 1
            try:
                latest = await fetch_latest(
                    address, timeout=cfg.transfer_timeout, key=self._transfer_key
                )
            except TransferError:
                continue
            if latest is None:
                continue
            verdict = self.replica.compare(*latest)
            if verdict is None:
                continue  # that cut is not in our recent history (yet)
            self.audits += 1
            self.contradictions += not verdict
            if verdicts.record(address, verdict):
                self.replica.resync()
                self._wake.set()

    # -- status -------------------------------------------------------------------------

    def status(self) -> ReplicaStatus:
        replica = self.replica
        stats = self._node.statistics() if self._node is not None else None
        members: tuple[ProcessId, ...] = ()
        quorum = None
        if stats is not None and self._ring:
            members = tuple(stats.members)
            quorum = len(stats.core) > len(stats.members) // 2
        elif stats is not None:
            members = tuple(self.node_config.members)
        waiting = stats.delivery_queue if stats is not None else 0
        return ReplicaStatus(
            ready=replica.ready,
            caught_up=replica.ready and not waiting,
            applied=replica.applied,
            cut=replica.cut,
            digest=replica.digest.hex(),
            members=members,
            quorum=quorum,
            snapshots_taken=self.snapshots_taken,
            transfers=self.transfers,
            transfer_failures=self.transfer_failures,
            audits=self.audits,
            contradictions=self.contradictions,
        )
