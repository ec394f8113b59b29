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
* **Ready** (docs/rsm.md, *Ready*): in the view (token ring), its own
  snapshot and log restored (an EpTO replica then resumes its node after the
  cut it recovered), and, with ``peers`` (``joining="auto"``), confirmed
  with a ready peer or fetched from one. Before that it applies nothing,
  serves nothing and ``call``/``submit`` raise :class:`ReplicaNotReadyError`.
* **Acknowledgement** (docs/rsm.md, *Acknowledgement*): ``call`` returns
  once the command is applied here (the token ring, whose positions are
  final; ``acknowledge="local"``) or, EpTO's default, once a majority of
  ``peers`` plus itself confirmed the prefix up to it (one task per peer
  asks it; :class:`epto.rsm._commit.CommitTracker` keeps the count).
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
  derived from it (``_rsm_channel.py``); without one they are plain TCP.
* **Reads are local** (``replica.machine``): they see this replica's prefix of
  the order. Read-your-writes: ``await call(...)`` returns once the command
  is applied here. ``ReplicaConfig.on_applied`` is called after each command
  applied and each state restored (the editor's server uses it).

* **A partition with no majority** (EpTO; docs/rsm.md): a replica notes
  the highest prefix it shared with a peer (its protected prefix); when its
  audits contradict it, it keeps its chain if a majority holds it, else
  takes the chain a majority holds, else the lowest-id ready replica's
  whose chain holds what a majority may hold of its protected prefix
  (:meth:`ReplicatedNode._decide`).
* **Hostile states**: a peer's state that the machine's ``restore`` raises
  on is refused and counted, the machine rolled back (a snapshot of it taken
  first).

Size: one class whose parts share its state: applying, calls, becoming
ready, fetching, confirming, auditing and deciding after a partition all
take the same apply lock and complete the same pending calls (the transfer
protocol, configuration, durability and the commit rule's bookkeeping are
modules of their own already). The next part to move out, should it grow,
is the decision after a partition (``_decide`` and ``_fork``): it reads the
replica and asks peers, and changes nothing itself.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import attrs
import trio
from epto.transports.trio_node import open_node

from epto import ConfigurationError, Delivery, EventId, LocalProtocolError, ProcessId
from epto.endpoint import Address, NodeConfig, ordering_of, parse_host_port
from epto.rsm import (
    Applied,
    AuditVerdicts,
    CommandFailed,
    OrderKey,
    Replica,
    Snapshot,
    StateMachine,
    order_key,
)
from epto.rsm._commit import CommitTracker

from ._rsm_channel import TransferKey
from ._rsm_config import (
    CommandFailedError,
    CommandTimeoutError,
    ReplicaConfig,
    ReplicaNotReadyError,
    ReplicaStatus,
    ResultUnavailableError,
)
from ._rsm_durable import Durability
from ._rsm_transfer import (
    MAX_CUTS,
    GroupMismatchError,
    PeerState,
    TransferError,
    TransferServer,
    fetch_latest,
    fetch_snapshot,
    fetch_state,
    group_id,
)

__all__ = [
    "CommandFailedError",
    "CommandTimeoutError",
    "ReplicaConfig",
    "ReplicaNotReadyError",
    "ReplicaStatus",
    "ReplicatedNode",
    "ResultUnavailableError",
]


_IN_FETCHED_STATE: Final = object()
"""The result of a call whose command the fetched state covers."""


class _Call:
    """One ``call`` under way: its result once applied here, released when
    acknowledged (applied here, or committed by a majority)."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: Any = _UNSET


_UNSET: Final = object()


@attrs.frozen
class _Target:
    """Whom a diverged EpTO replica fetches from, and what its state must
    satisfy: ``"majority"`` (a majority of the replicas hold it),
    ``"holds"`` (the provider's chain holds ``keep``, a prefix of this
    replica's chain: its protected prefix, or the part of it a majority may
    hold)."""

    pid: ProcessId
    rule: str
    keep: tuple[OrderKey, bytes] | None = None


class StateRefusedError(TransferError):
    """A peer's state that the state machine's ``restore`` raised on: refused
    like a corrupt one (counted, the next provider asked)."""


class ReplicatedNode:
    """One replica of ``machine`` on a trio node (see the module's rules)."""

    def __init__(
        self, machine: StateMachine, node: NodeConfig, config: ReplicaConfig | None = None
    ) -> None:
        self.config = cfg = config if config is not None else ReplicaConfig()
        if cfg.data_dir and node.data_dir is None:
            # The member's incarnation and lock live with the replica's data.
            node = attrs.evolve(node, data_dir=cfg.data_dir)
        self.machine = machine
        self.node_config = node
        self._order = ordering_of(node)
        """What the engine's order promises (:class:`epto.endpoint.Ordering`):
        numbered positions without gaps, a view the members agree on. Every
        decision below that differs between the engines names the promise it
        rests on, never the engine."""
        self.replica = Replica(
            machine,
            codec=cfg.codec,
            joining=cfg.joining is True,
            contiguous=self._order.positions,
            max_buffer=cfg.max_buffer,
        )
        self._peers: dict[ProcessId, Address] = {
            p: a for p, a in sorted(cfg.peers.items()) if p != node.pid
        }
        acknowledge = cfg.acknowledge or ("local" if self._order.view else "majority")
        self.acknowledge: str = acknowledge
        """``"majority"`` or ``"local"`` (:attr:`ReplicaConfig.acknowledge`)."""
        self._commits = CommitTracker(self._peers)
        self._majority = acknowledge == "majority" and self._commits.majority > 1
        self._node: Any = None
        self._calls: dict[EventId, _Call] = {}
        self._held_calls: set[EventId] = set()
        """Our own commands delivered while not ready (buffered): completed by
        the restore, with their result or, when the fetched state covers
        them, as unknown."""
        self._durable = Durability.of(cfg, node.pid)
        self._writing = False
        """A worker thread is writing a snapshot (and flushing the log)."""
        self.transfers = 0
        self.transfer_failures = 0
        self.states_refused = 0
        self.audits = 0
        self.contradictions = 0
        self._verdicts = self._new_verdicts()
        self.resolutions = 0
        self._protected: tuple[OrderKey, bytes] | None = None
        """EpTO: the highest (cut, digest) of this replica's chain it shared
        with a peer, either way (a peer's digest there equalled its own, and
        both saw it): a peer may have counted it towards a majority, so this
        replica never takes a state whose chain lacks it, unless a majority
        of the replicas hold that state (docs/rsm.md, *A partition with no
        majority*)."""
        self._group = (
            group_id([node.pid, *self._peers]) if self._peers and not self._order.view else None
        )
        """EpTO: the replicas this one counts its majority over, named on
        every ``state`` request: a peer given another set refuses it. (The
        token ring's majority is its view's, not ``peers``: a joiner lists
        the replicas running when it starts.)"""
        self._mismatch: str | None = None
        self._diverged = trio.Event()
        """Set when the audits say this replica's prefix is not the group's
        (EpTO): the resolution decides what to do."""
        self._target: _Target | None = None
        self._stalled = False
        """The audits found this replica behind with its cut not moving."""
        self._heard: dict[ProcessId, float] = {}
        self._ready = trio.Event()
        self._wake = trio.Event()
        self._work = trio.Event()
        """Set while calls wait for confirmations (the peer loops ask at once)."""
        self._moved = trio.Event()
        """Set (and replaced) whenever this replica's cut moves."""
        self._must_fetch = cfg.joining is True
        self._decided = False
        """The start rule has run: the local state is known to be the group's
        (or was fetched)."""
        self._fetched_cut: OrderKey | None = None
        self._restarted = False
        """A state was recovered from disk: this start follows an earlier one."""
        self._started = 0.0
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
            ready=lambda: self._ready.is_set(),
            cut=lambda: self.replica.cut,
            digest_at=self.replica.digest_at,
            wait=min(5.0, cfg.transfer_timeout),
            key=self._transfer_key,
            view=self._view,
            matched=None if self._order.view else self._matched,
            group=self._group,
        )
        self._stack: AsyncExitStack | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        durable = self._durable
        if durable is not None:
            # Under this replica's own id, whatever the incarnation.
            durable.recover(self.replica, joining=self.config.joining is True)
        self._restarted = self.replica.cut is not None
        if not self._order.view and self.replica.cut is not None:
            # What it shared before the restart is not known: all it holds
            # is kept as shared (conservative; a majority may override).
            self._protected = (self.replica.cut, self.replica.digest)
        ask = self.config.joining == "auto" and bool(self._peers)
        if ask or self._must_fetch or self._order.view:
            self.replica.suspend()  # apply nothing until the state is known whole
        self._decided = not (ask or self._must_fetch)
        async with AsyncExitStack() as stack:
            if durable is not None:
                stack.callback(durable.close)
            self._node = await stack.enter_async_context(open_node(self.node_config))
            cut = self.replica.cut
            if not self._order.positions and cut is not None:
                # Before any checkpoint: neither deliver again nor broadcast
                # below what this member applied in an earlier incarnation.
                self._node.engine.resume_after(cut[0])
            self._started = trio.current_time()
            nursery = self._nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)  # runs first on the way out
            host, port = parse_host_port(self.config.transfer_bind)
            serve = functools.partial(trio.serve_tcp, self._server.handle, port, host=host)
            listeners = await nursery.start(serve)
            bound = listeners[0].socket.getsockname()
            self.transfer_address = f"{bound[0]}:{bound[1]}"
            if self._decided and self._in_view():
                self._resume()
            nursery.start_soon(self._apply_loop)
            nursery.start_soon(self._ready_loop)
            for pid, address in self._peers.items():
                nursery.start_soon(self._peer_loop, pid, address)
            if self._peers and self.config.audit_interval < math.inf:
                nursery.start_soon(self._audit_loop)
            if self._peers and not self._order.view:
                nursery.start_soon(self._resolve_loop)
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
        """The node (``UdpNode`` or ``TokenRingNode``) under this replica."""
        return self._node

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Until the replica is ready (docs/rsm.md, *Ready*);
        :class:`ReplicaNotReadyError` if it is not within ``timeout`` seconds."""
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while not self._ready.is_set():
                if self._mismatch is not None:
                    raise ConfigurationError(self._mismatch)
                with trio.move_on_after(0.25):
                    await self._ready.wait()
            return
        raise ReplicaNotReadyError(f"replica {self.node_config.pid} not ready within {timeout} s")

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def _view(self) -> int:
        """The view the node is in (token ring: its configuration's instance)."""
        if not self._order.view or self._node is None:
            return 0
        return max(0, int(self._node.statistics().instance))

    def _in_view(self) -> bool:
        """Token ring: the node is a member of the view (not joining, not
        excluded). EpTO has no view to enter."""
        if not self._order.view or self._node is None:
            return True
        return bool(self._node.statistics().role in ("core", "external"))

    # -- commands -------------------------------------------------------------------

    def _broadcast(self, name: str, args: tuple[Any, ...]) -> EventId:
        """Broadcast the command, or raise :class:`ReplicaNotReadyError` with
        nothing broadcast."""
        if name not in type(self.machine).commands():
            raise ConfigurationError(
                f"{type(self.machine).__name__} has no replicated command {name!r}"
            )
        if not self._ready.is_set():
            raise ReplicaNotReadyError(
                f"replica {self.node_config.pid} is not ready (it has not restored, "
                "confirmed or fetched its state yet, or is not in the view): "
                "await wait_ready() first; nothing was broadcast"
            )
        payload = self.config.codec.encode(name, args)
        try:
            return self._node.broadcast(payload)  # type: ignore[no-any-return]
        except LocalProtocolError:
            # A token-ring member that left the view since it was ready (a
            # later start of it was admitted, or it asks to be admitted back)
            # refuses to broadcast: not ready, rather than the caller's fault.
            if self._order.view and self._node.statistics().role == "joining":
                raise ReplicaNotReadyError(
                    f"replica {self.node_config.pid} is not in the view (it asks to be "
                    "admitted back); nothing was broadcast"
                ) from None
            raise

    async def call(self, name: str, *args: Any, timeout: float | None = None) -> Any:
        """Replicate ``name(*args)``; its result once acknowledged (see
        :attr:`ReplicaConfig.acknowledge`), :class:`CommandFailedError` if it
        raised (at every replica alike), :class:`ReplicaNotReadyError` before
        ready (nothing broadcast), :class:`CommandTimeoutError` after
        ``timeout`` seconds (the command may still take effect)."""
        eid = self._broadcast(name, args)
        call = self._calls[eid] = _Call()
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                await call.done.wait()
        finally:
            self._calls.pop(eid, None)
            self._commits.forget(eid)
        if not call.done.is_set():
            raise CommandTimeoutError(
                f"command {name!r} not acknowledged within {timeout} s; it may still take effect"
            )
        result = call.result
        if isinstance(result, CommandFailed):
            raise CommandFailedError(result)
        if result is _IN_FETCHED_STATE:
            raise ResultUnavailableError(
                f"command {name!r} was applied in the state fetched from a peer; "
                "its result is not known here"
            )
        return result

    def submit(self, name: str, *args: Any) -> EventId:
        """Replicate ``name(*args)`` without waiting for it (its result is
        dropped); :class:`ReplicaNotReadyError` before ready."""
        return self._broadcast(name, args)

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
        was_ready = replica.ready
        applied = replica.deliver(delivery)
        if not replica.ready:
            if was_ready or self._ready.is_set():  # a hole: the state must be fetched
                self._must_fetch = True
                self._lose_ready()
            self._wake.set()
            if delivery.event.id in self._calls:
                self._held_calls.add(delivery.event.id)
            return False
        if applied is None:
            fetched = self._fetched_cut
            if (
                delivery.in_total_order
                and fetched is not None
                and order_key(delivery.event) <= fetched
            ):
                # In the state fetched from a peer.
                self._complete_unknown([delivery.event.id])
            return False
        self._complete([applied])
        self._cut_moved()
        if self.config.on_applied is not None:
            self.config.on_applied()
        durable = self._durable
        return durable is not None and durable.applied(delivery, trio.current_time())

    def _complete(self, applied: list[Applied]) -> None:
        """Our own commands applied: their calls are released now (local
        acknowledgement) or once a majority confirmed them."""
        for done in applied:
            call = self._calls.get(done.event)
            if call is None or call.result is not _UNSET:
                continue
            call.result = done.result
            digest = self.replica.digest_at(done.cut)
            if not self._majority or digest is None:
                call.done.set()
            else:
                self._commits.add(done.event, done.cut, digest)
                self._work.set()
        if self._majority:
            self._release()

    def _release(self) -> None:
        for eid in self._commits.released(self.replica):
            call = self._calls.get(eid)
            if call is not None:
                call.done.set()
        if not len(self._commits) and self._work.is_set():
            # Replaced only once set: a loop waiting on it must be woken by
            # the next call, not left on an event nobody sets.
            self._work = trio.Event()

    def _complete_unknown(self, events: Iterable[EventId]) -> None:
        """Our commands that a fetched state covers: they were applied at the
        peer that provided it, and their results stay there. Without this a
        call whose command came round while this replica had a hole would
        wait forever."""
        for eid in events:
            call = self._calls.get(eid)
            if call is not None and call.result is _UNSET:
                call.result = _IN_FETCHED_STATE
                call.done.set()

    async def _snapshot_to_disk(self) -> None:
        """A snapshot written in a worker thread while the caller holds
        ``_applying`` (nothing changes the machine meanwhile): the node keeps
        serving the group, however long a large state takes to write."""
        if self._durable is not None and self.replica.ready:
            self._writing = True
            try:
                await trio.to_thread.run_sync(self._durable.snapshot, self.replica)
            finally:
                self._writing = False

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

    # -- becoming ready -----------------------------------------------------------------

    def _cut_moved(self) -> None:
        self._server.notify()
        self._moved.set()
        self._moved = trio.Event()

    def _lose_ready(self) -> None:
        if self._ready.is_set():
            self._ready = trio.Event()
        self._server.notify()
        self._wake.set()

    def _resume(self) -> bool:
        """Ready with the state held (and what was buffered meanwhile)."""
        try:
            applied = self.replica.resume()
        except ValueError:  # the buffer overflowed
            self._must_fetch = True
            return False
        self._complete(applied)
        if not self.replica.ready:  # a hole in what was buffered
            self._must_fetch = True
            return False
        self._decided = True
        self._ready.set()
        self._cut_moved()
        return True

    async def _ready_loop(self) -> None:
        """Make the replica ready, and again whenever it stops being ready
        (a hole, an audit, the token ring's node out of the view)."""
        while True:
            if self._ready.is_set():
                with trio.move_on_after(0.2):
                    await self._wake.wait()
                self._wake = trio.Event()
                if self._ready.is_set() and not self._in_view():
                    # Out of the view (token ring): what it delivers after
                    # rejoining does not follow what it applied.
                    self.replica.suspend()
                    self._must_fetch = True
                    self._lose_ready()
                continue
            await self._become_ready()

    async def _become_ready(self) -> None:
        """One step towards ready (docs/rsm.md, *Ready*)."""
        if not self._in_view():
            await trio.sleep(0.05)
            return
        if self.replica.ready and self._decided:
            self._ready.set()
            self._server.notify()
            return
        if self._must_fetch or self.replica.hole:
            if self.config.joining is True and not self.transfers:
                await self._settle()
            if self._order.positions and self.replica.needed() is None:
                # Nothing delivered yet: wait a little for the first delivery
                # (the snapshot must reach it), then take any.
                with trio.move_on_after(1.0):
                    while self.replica.needed() is None:
                        await trio.sleep(0.01)
            if not await self._fetch():
                await trio.sleep(0.2)
            return
        if self._decided:
            self._resume()
            return
        # The start rule: is the state restored from disk the group's?
        answers = await self._ask_all(())
        ready = {p: s for p, s in answers.items() if s is not None and s.ready}
        if ready:
            if await self._settle():
                return  # ask again, after EpTO's in-flight events arrived
            if self._view() < max(s.view for s in ready.values()) or (
                self._order.view and self._view() == 0 and self._restarted
            ):
                # Token ring: a member started again as itself runs a bootstrap
                # view until the group's configuration replaces it (the view
                # that admits it back is a later one than the first).
                await trio.sleep(0.05)
                return
            best = max(ready.values(), key=lambda s: (s.cut is not None, s.cut or (0, 0, 0)))
            if self.replica.reaches(best.cut, best.digest):
                self._resume()
            else:
                self._must_fetch = True
            return
        answered = [s for s in answers.values() if s is not None]
        mine = self.replica.cut
        behind = any(s.cut is not None and (mine is None or s.cut > mine) for s in answered)
        if len(answered) + 1 >= self._commits.majority and not behind:
            # A group starting (or restarting) together: nobody is ready yet,
            # and a majority says nobody is ahead of this replica.
            self._resume()
            return
        await trio.sleep(0.2)

    async def _settle(self) -> bool:
        """EpTO: wait, once, until ``join_settle`` after start (events
        broadcast before this start reach the others, not it, and a state
        fetched must be past them); whether it waited."""
        if self._order.positions:
            return False
        left = self._started + self._settle_time() - trio.current_time()
        if left <= 0:
            return False
        await trio.sleep(left)
        return True

    def _settle_time(self) -> float:
        if self.config.join_settle is not None:
            return self.config.join_settle
        protocol = self.node_config.protocol_config()
        return 2 * (protocol.ttl + 2) * protocol.round_interval

    # -- asking peers -------------------------------------------------------------------

    async def _ask(
        self,
        pid: ProcessId,
        cuts: Sequence[OrderKey | None],
        wait: float = 0.0,
        digests: Sequence[bytes | None] | None = None,
    ) -> PeerState | None:
        """One peer's state (None: unreachable within ``probe_timeout``, or
        counting its majority over another set of replicas). ``digests``:
        this replica's own at ``cuts`` (the peer notes where they match)."""
        try:
            state = await fetch_state(
                self._peers[pid],
                list(cuts),
                wait=wait,
                timeout=self.config.probe_timeout + wait,
                key=self._transfer_key,
                digests=None if digests is None else list(digests),
                group=self._group,
            )
        except GroupMismatchError:
            if self._mismatch is None:
                self._mismatch = (
                    f"replica {self.node_config.pid} counts its majority over replicas "
                    f"{sorted([self.node_config.pid, *self._peers])} and replica {pid} over "
                    "another set: give every replica the same peers (docs/rsm.md)"
                )
            return None
        except TransferError:
            return None
        self._heard[pid] = trio.current_time()
        return state

    async def _ask_all(
        self,
        cuts: Sequence[OrderKey | None],
        wait: float = 0.0,
        digests: Sequence[bytes | None] | None = None,
    ) -> dict[ProcessId, PeerState | None]:
        """Every peer's state, asked in parallel."""
        answers: dict[ProcessId, PeerState | None] = {}

        async def one(pid: ProcessId) -> None:
            answers[pid] = await self._ask(pid, cuts, wait, digests)

        async with trio.open_nursery() as nursery:
            for pid in self._peers:
                nursery.start_soon(one, pid)
        return answers

    # -- fetching the state -------------------------------------------------------------

    async def _fetch(self) -> bool:
        """Fetch the state from a ready peer whose cut reaches what this
        replica buffered, the highest first; confirm its digest with the
        other ready peers; restore. EpTO, a replica whose audits found it on
        another branch than the group's: first from the peer the resolution
        chose (:meth:`_decide`), and when no peer's state is acceptable,
        decide again (keep its own branch, or take the chosen one)."""
        need = self.replica.needed()
        target, self._target = self._target, None
        if target is not None and await self._fetch_from(
            target.pid, need, target.rule, target.keep
        ):
            return True
        answers = await self._ask_all(())
        views = [s.view for s in answers.values() if s is not None and s.ready]
        if views and self._view() < max(views):
            return False  # token ring: not in the group's view yet
        ready = [(s.cut, pid) for pid, s in answers.items() if s is not None and s.ready]
        ready.sort(key=lambda c: (c[0] is not None, c[0] or (0, 0, 0), -c[1]), reverse=True)
        candidates = [
            (cut, pid) for cut, pid in ready if need is None or (cut is not None and cut >= need)
        ]
        if not candidates:
            # No ready peer there yet: the one furthest on waits for the cut.
            candidates = ready[:1]
        for _, pid in candidates:
            if await self._fetch_from(pid, need, "any"):
                return True
        replica = self.replica
        if (
            not self._order.view
            and self._protected is not None
            and replica.cut is not None
            and not replica.overflowed
        ):
            decision = await self._decide(ready=False)
            if decision is None:
                # Its own branch is the one to keep (the lowest id holding
                # its protected prefix, and no majority elsewhere).
                if self._resume():
                    self._must_fetch = False
                    return True
                return False
            return await self._fetch_from(decision.pid, need, decision.rule, decision.keep)
        return False

    async def _fetch_from(
        self,
        pid: ProcessId,
        need: OrderKey | None,
        rule: str,
        keep: tuple[OrderKey, bytes] | None = None,
    ) -> bool:
        """Fetch, check (:meth:`_acceptable`) and restore ``pid``'s state."""
        protected = self._protected if rule != "holds" else keep
        if rule == "holds" and protected is not None and (need is None or need < protected[0]):
            need = protected[0]
        own = self.replica.cut
        if not self._order.positions and own is not None and (need is None or need < own):
            # Its node delivers only after what it delivered already: a state
            # short of that would leave a gap before what it delivers next.
            need = own
        cfg = self.config
        try:
            snapshot = await fetch_snapshot(
                self._peers[pid],
                need,
                timeout=cfg.transfer_timeout,
                max_bytes=cfg.max_snapshot_bytes,
                key=self._transfer_key,
            )
            if not await self._acceptable(snapshot, pid, rule, keep):
                self.transfer_failures += 1
                return False
            await self._restore(snapshot)
        except StateRefusedError:
            self.transfer_failures += 1
            self.states_refused += 1
            return False
        except (TransferError, ValueError):
            self.transfer_failures += 1
            return False
        self.transfers += 1
        return True

    async def _acceptable(
        self,
        snapshot: Snapshot,
        provider: ProcessId,
        rule: str,
        keep: tuple[OrderKey, bytes] | None = None,
    ) -> bool:
        """Whether to restore ``snapshot`` from ``provider``. Without a
        protected prefix (a joiner, the token ring): the other ready replicas
        confirm its digest (:meth:`_confirmations`). EpTO with one: a state whose
        chain holds this replica's protected prefix (the provider says so
        for both cuts) and that the others confirm, or one a majority of the
        replicas hold (the provider and the peers confirming its digest);
        ``rule`` asks for one of the two alone (``"holds"``: the chain
        holds ``keep``)."""
        protected = self._protected
        if rule == "holds":
            if keep is None:
                return True
            protected = keep
        if self._order.view or protected is None:
            confirm, contradict, ready = await self._confirmations(snapshot, provider)
            return not ready or (confirm >= 1 and contradict < confirm)
        holds = False
        if rule != "majority" and snapshot.cut is not None and snapshot.cut >= protected[0]:
            cuts = [snapshot.cut, protected[0]]
            state = await self._ask(provider, cuts, 1.0, [snapshot.digest, protected[1]])
            holds = (
                state is not None and state.ready and state.at == (snapshot.digest, protected[1])
            )
        if rule == "holds":
            return holds
        confirm, contradict, ready = await self._confirmations(snapshot, provider)
        if 1 + confirm >= self._commits.majority:
            return True
        return rule == "any" and holds and (not ready or (confirm >= 1 and contradict < confirm))

    async def _restore(self, snapshot: Snapshot) -> None:
        async with self._applying:
            self.replica.check_restorable(snapshot)
            # The machine's restore in a worker thread: it takes seconds
            # for a large state, and the node must keep answering the
            # group. The replica's own bookkeeping (cut, digests, buffer)
            # stays in this thread, where the audits and the transfer
            # server read it.
            await trio.to_thread.run_sync(self._restore_machine, snapshot.state)
            restored = self.replica.restore(snapshot, state_restored=True)
            self._fetched_cut = snapshot.cut
            if not self._order.view and snapshot.cut is not None:
                # The provider holds it (and, past a majority rule, others).
                self._protected = (snapshot.cut, snapshot.digest)
            self._commits.reset()
            self._verdicts = self._new_verdicts()
            self._complete(restored)
            held, self._held_calls = self._held_calls, set()
            self._complete_unknown(held)
            if self.config.on_applied is not None:
                self.config.on_applied()
            # The buffered commands were applied without being logged:
            # save the state as the base the log continues.
            await self._snapshot_to_disk()
            if self.replica.ready:
                self._must_fetch = False
                self._decided = True
                self._ready.set()
            self._cut_moved()
        if snapshot.cut is not None and not self._order.positions:
            # An EpTO newcomer in an idle group has seen no timestamp:
            # its next commands must come after what the group applied.
            self._node.engine.advance_clock(snapshot.cut[0])

    def _restore_machine(self, state: bytes) -> None:
        """Hand a peer's ``state`` to the machine (in a worker thread); any
        exception from its ``restore`` (a state it cannot decode: ``{}``,
        garbage, wrong types) refuses the state like a corrupt one. The
        machine is then rolled back to what it held before (a snapshot taken
        first): a ``restore`` that failed half-way leaves nothing behind. A
        machine that cannot restore its own snapshot is a defect of the
        application, and stops the replica."""
        saved = self.machine.snapshot()
        try:
            self.machine.restore(state)
        except Exception as exc:
            self.machine.restore(saved)
            raise StateRefusedError(
                f"the state machine could not restore the state: {type(exc).__name__}: {exc}"[:200]
            ) from None

    async def _confirmations(self, snapshot: Snapshot, provider: ProcessId) -> tuple[int, int, int]:
        """How many other ready replicas confirm ``snapshot``'s digest at its
        cut, how many contradict it, and how many are ready."""
        if snapshot.cut is None:
            return 0, 0, 0
        confirm = contradict = ready = 0

        async def one(pid: ProcessId) -> None:
            nonlocal confirm, contradict, ready
            # Its digest sent: a peer that confirms notes the state as shared
            # (the majority rule of _acceptable rests on it).
            state = await self._ask(pid, [snapshot.cut], 1.0, [snapshot.digest])
            if state is None or not state.ready:
                return
            ready += 1
            if state.at[0] is None:
                return
            if state.at[0] == snapshot.digest:
                confirm += 1
            else:
                contradict += 1

        async with trio.open_nursery() as nursery:
            for pid in self._peers:
                if pid != provider:
                    nursery.start_soon(one, pid)
        return confirm, contradict, ready

    # -- a partition with no majority (EpTO) ------------------------------------------

    def _new_verdicts(self) -> AuditVerdicts:
        """EpTO: one contradiction (and more than confirm) starts a decision
        (:meth:`_decide`, which keeps what a majority may hold); the token
        ring fetches on two."""
        return AuditVerdicts(min_wrong=2 if self._order.view else 1)

    def _matched(self, cut: OrderKey, digest: bytes) -> None:
        """This replica and a peer both saw that their digests at ``cut``
        (on this replica's chain) are equal: keep it (:attr:`_protected`)."""
        protected = self._protected
        if protected is None or cut > protected[0]:
            self._protected = (cut, digest)
        if self._durable is not None and not self._writing:
            # Before the match is answered or counted: what a peer may count
            # this replica as holding is in its log if its process is killed.
            # (A snapshot being written in a worker thread flushes the log
            # itself, first.)
            self._durable.flush()

    async def _resolve_loop(self) -> None:
        """When the audits say this replica's prefix is not the group's,
        decide (:meth:`_decide`) and fetch from the chosen replica; at most
        once a second."""
        while True:
            await self._diverged.wait()
            self._diverged = trio.Event()
            if self._ready.is_set():
                stalled, self._stalled = self._stalled, False
                target = await self._decide(ready=not stalled)
                if target is not None and self._ready.is_set():
                    self.resolutions += 1
                    self._target = target
                    self.replica.resync()
                    self._must_fetch = True
                    self._lose_ready()
            await trio.sleep(1.0)

    async def _decide(self, *, ready: bool) -> _Target | None:
        """Which branch this replica keeps (None: its own) when its audits
        find that its prefix differs from peers' (docs/rsm.md, *A partition
        with no majority*), computed alike by every replica:

        1. its own, when a majority of the replicas (itself included) hold
           its chain;
        2. else the chain a majority of the replicas hold, if one does (the
           furthest peer's, confirmed by enough others);
        3. else the chain of the lowest-id ready replica (itself included)
           that holds the part of this replica's protected prefix a majority
           may hold: up to the highest cut of its chain held by a majority
           of the replicas (a peer that does not answer counted as holding
           all of it).

        Not ready (it stopped applying), a ready peer ahead on its own chain
        comes first: it fetches what it lacks."""
        replica = self.replica
        cut, digest = replica.cut, replica.digest
        if cut is None:
            return None
        answers = await self._ask_all([cut], 0.5, [digest])
        peers = {p: s for p, s in answers.items() if s is not None and s.ready}

        def on_my_chain(state: PeerState) -> bool:
            if state.at and state.at[0] is not None:
                return state.at[0] == digest
            if state.cut is not None and state.digest is not None:  # behind
                return replica.digest_at(state.cut) == state.digest
            return False

        same = {p for p, s in peers.items() if on_my_chain(s)}
        if not ready:
            ahead = [(s.cut, p) for p, s in peers.items() if p in same and s.cut and s.cut > cut]
            if ahead:
                return _Target(max(ahead)[1], "holds", (cut, digest))
        majority = self._commits.majority
        if 1 + len(same) >= majority:
            return None
        others = {p: s for p, s in peers.items() if p not in same and s.cut and s.digest}
        if len(others) >= majority:
            best = max(others, key=lambda p: (others[p].cut, -p))
            at, theirs = others[best].cut, others[best].digest
            agree = 0

            async def one(pid: ProcessId) -> None:
                nonlocal agree
                state = await self._ask(pid, [at], wait=1.0)
                if state is not None and state.ready and state.at == (theirs,):
                    agree += 1

            async with trio.open_nursery() as nursery:
                for pid in others:
                    if pid != best:
                        nursery.start_soon(one, pid)
            if 1 + agree >= majority:
                return _Target(best, "majority")
        # Rule 3: how far each peer holds this replica's chain.
        history = replica.history()
        forks: dict[ProcessId, int] = {}
        """Per peer, the index in ``history`` of the last pair it holds (-1:
        none of them, but not empty; -2: empty)."""

        async def fork(pid: ProcessId) -> None:
            found = await self._fork(pid, history, peers[pid], on_my_chain(peers[pid]))
            if found is not None:
                forks[pid] = found

        async with trio.open_nursery() as nursery:
            for pid in peers:
                nursery.start_soon(fork, pid)
        keys = [c for c, _ in history]
        for pid, state in answers.items():
            if state is None or state.ready:
                continue
            # Not ready: it answers its cut, not its digests. Empty (a joiner,
            # a wiped replica), it holds nothing; on this chain, up to its
            # cut; else unknown.
            if state.cut is None:
                forks[pid] = -2
            elif replica.digest_at(state.cut) == state.digest:
                forks[pid] = bisect.bisect_right(keys, state.cut) - 1
        # Itself, and a peer that did not answer (or lost mid-search, or not
        # ready on another chain), may hold all of it.
        everyone: list[tuple[int, ProcessId | None]] = [
            (forks.get(p, len(history) - 1), p) for p in self._peers
        ]
        everyone.append((len(history) - 1, None))
        everyone.sort(key=lambda e: e[0], reverse=True)
        top, rest = everyone[:majority], everyone[majority:]
        h = top[-1][0]
        """H, the highest cut of this chain a majority may hold, is at
        ``history[h]``; -1: below the recent history; -2: nothing."""
        keep = self._protected
        holders: set[ProcessId]
        if keep is None or h == -2:
            keep, holders = None, set(peers)
        elif h >= 0:
            # Keep only what a majority may hold of the protected prefix.
            if replica.digest_at(keep[0]) == keep[1] and history[h][0] < keep[0]:
                keep = history[h]
            i = next((j for j, (c, _) in enumerate(history) if c == keep[0]), None)
            if i is None:  # out of the recent history: ask directly
                holders = set()
                for pid in peers:
                    state = await self._ask(pid, [keep[0]], 0.0)
                    if state is not None and state.at == (keep[1],):
                        holders.add(pid)
            else:
                holders = {p for p in peers if forks.get(p, -2) >= i}
        elif not any(v == -1 for v, _ in rest):
            # H is below the recent history, at the lowest fork of the
            # majority's: each of them holds it. A state that extends the
            # chosen peer's chain as it answered holds it too.
            holders = {p for v, p in top if p is not None and p in peers}
            first = min(holders, default=None)
            if first is not None and first < self.node_config.pid:
                chosen = peers[first]
                if chosen.cut is not None and chosen.digest is not None:
                    keep = (chosen.cut, chosen.digest)
        else:
            holders = set()  # which peers hold it is not known: keep all
        winner = min({self.node_config.pid} | holders)
        if winner == self.node_config.pid or winner in same:
            return None
        return _Target(winner, "holds", keep)

    async def _fork(
        self,
        pid: ProcessId,
        history: list[tuple[OrderKey, bytes]],
        state: PeerState,
        same: bool,
    ) -> int | None:
        """The index in ``history`` (this replica's recent chain) of the last
        pair ``pid`` holds (-1: none), found in a few questions of up to
        :data:`MAX_CUTS` cuts each (a chain holds a prefix: what it holds of
        ours is a prefix of ``history``); None if it stops answering."""
        if not history:
            return -1
        if same:
            if state.at and state.at[0] is not None:
                return len(history) - 1
            if state.cut is not None:
                keys = [c for c, _ in history]
                i = bisect.bisect_right(keys, state.cut) - 1
                return i if i >= 0 and keys[i] == state.cut else -1
        lo, hi = -1, len(history) - 1  # history[lo] held (-1: none); past hi not
        while lo < hi:
            span = hi - lo
            picks = sorted({lo + 1 + (span - 1) * j // (MAX_CUTS - 1) for j in range(MAX_CUTS)})
            answer = await self._ask(pid, [history[i][0] for i in picks], 0.0)
            if answer is None or not answer.ready:
                return None
            held = [i for i, d in zip(picks, answer.at, strict=False) if d == history[i][1]]
            last = max(held, default=lo)
            later = [i for i in picks if i > last]
            lo, hi = last, (min(later) - 1 if later else hi)
            if not held and not later:
                break
        return lo

    # -- confirmations and audits -------------------------------------------------------

    async def _peer_loop(self, pid: ProcessId, address: Address) -> None:
        """Ask one peer for its state: at once while calls wait for their
        majority (its digest at this replica's cut, and at orphans' cuts,
        this replica's own digests sent along), else every third of
        ``quorum_timeout`` (for ``status().quorum``). A peer found behind on
        this chain is asked next at its own cut, where it can confirm."""
        idle = self.config.quorum_timeout / 3
        failures = 0
        behind: OrderKey | None = None
        while True:
            if not len(self._commits) and behind is None:
                with trio.move_on_after(idle):
                    await self._work.wait()
            waiting = bool(len(self._commits))
            cut = self.replica.cut
            orphans = self._commits.orphans(self.replica, MAX_CUTS - 1) if waiting else []
            if (
                waiting
                and behind is None
                and not orphans
                and cut is not None
                and self._commits.upto(pid) == cut
            ):
                # It holds all this replica has: ask again once the cut moves.
                moved = self._moved
                with trio.move_on_after(idle):
                    await moved.wait()
                continue
            first = cut if behind is None else behind
            behind = None
            asked: list[OrderKey | None] = [first, *orphans]
            digests = [self.replica.digest_at(first), *map(self._commits.digest_of, orphans)]
            state = await self._ask(pid, asked, 0.5 if waiting else 0.0, digests)
            if state is None or not state.ready:
                # A verdict of a state it may no longer hold (wiped, fetching)
                # would count for ever.
                self._verdicts.forget(address)
            if state is None:
                failures += 1
                await trio.sleep(min(0.5, 0.01 * 2**failures))
                continue
            failures = 0
            if not state.ready or not self._ready.is_set() or self.replica.cut is None:
                await trio.sleep(0.05)
                continue
            mine = self.replica.digest_at(first)
            if first is not None and mine is not None and state.at and state.at[0] == mine:
                if not self._order.view:
                    self._matched(first, mine)
            elif (
                state.cut is not None
                and first is not None
                and state.cut < first
                and self.replica.digest_at(state.cut) == state.digest
            ):
                behind = state.cut
            verdict = self._commits.record(
                pid, self.replica, asked, state.cut, state.digest, state.at
            )
            self._release()
            if verdict is not None:
                self._verdict(address, verdict)
            if orphans or (waiting and self._commits.upto(pid) != cut):
                await trio.sleep(0.02)  # not confirmed: do not spin on it

    def _verdict(self, address: Address, matches: bool) -> None:
        self.audits += 1
        self.contradictions += not matches
        if self._verdicts.record(address, matches):
            if not self._order.view:
                self._diverged.set()  # the resolution decides (_decide)
                return
            self.replica.resync()
            self._must_fetch = True
            self._lose_ready()

    async def _audit_loop(self) -> None:
        """Compare this replica's digest with the peers', one peer per
        ``audit_interval``; fetch the state again when, by their latest
        comparable verdicts, more peers contradict it than confirm it (two at
        least; EpTO: decide, one at least). EpTO: a replica whose cut has not
        moved over two audits that each found a peer ahead of it missed the
        last deliveries (nothing later comes to reveal it): it decides too,
        and fetches from a ready peer ahead on its chain."""
        cfg = self.config
        peers = list(self._peers.values())
        turn = 0
        stalled_at: list[OrderKey | None] = []
        """This replica's cut when the last audit found a peer ahead (empty:
        it did not)."""
        while True:
            await trio.sleep(cfg.audit_interval)
            if not self._ready.is_set() or not peers:
                continue
            address = peers[turn % len(peers)]
            turn += 1
            try:
                latest = await fetch_latest(
                    address, timeout=cfg.transfer_timeout, key=self._transfer_key
                )
            except TransferError:
                continue
            if latest is None or not self._ready.is_set():
                continue
            mine = self.replica.cut
            if (
                not self._order.positions
                and latest[0] is not None
                and (mine is None or latest[0] > mine)
            ):
                if stalled_at == [mine]:
                    self._stalled = True
                    self._diverged.set()
                stalled_at = [mine]
            else:
                stalled_at = []
            verdict = self.replica.compare(*latest)
            if verdict is None:
                continue  # that cut is not in our recent history (yet)
            self._verdict(address, verdict)

    # -- status -------------------------------------------------------------------------

    def _quorum(self, stats: Any) -> bool | None:
        if self._order.view:
            return None if stats is None else bool(stats.quorum)
        if not self._peers:
            others = set(self.node_config.members) - {self.node_config.pid}
            return None if others else True
        now = trio.current_time()
        heard = sum(1 for t in self._heard.values() if now - t <= self.config.quorum_timeout)
        return heard + 1 >= self._commits.majority

    def status(self) -> ReplicaStatus:
        replica = self.replica
        stats = self._node.statistics() if self._node is not None else None
        members: tuple[ProcessId, ...] = ()
        if stats is not None and self._order.view:
            members = tuple(stats.members)
        elif stats is not None:
            members = tuple(self.node_config.members)
        waiting = stats.delivery_queue if stats is not None else 0
        ready = self._ready.is_set()
        return ReplicaStatus(
            ready=ready,
            caught_up=ready and not waiting,
            applied=replica.applied,
            cut=replica.cut,
            digest=replica.digest.hex(),
            members=members,
            quorum=self._quorum(stats),
            snapshots_taken=self.snapshots_taken,
            transfers=self.transfers,
            transfer_failures=self.transfer_failures,
            states_refused=self.states_refused,
            resolutions=self.resolutions,
            audits=self.audits,
            contradictions=self.contradictions,
            confirmed=self._commits.confirmed(replica) if self._majority else None,
        )
