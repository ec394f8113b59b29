"""The driver loop on trio, shared by every trio node (UDP, TCP, the in-process hub).

A node is an async context manager that owns its tasks (a nursery, see
:mod:`.tasks`): the link's receiving tasks feed arrivals into the
:class:`~._loop.DriverLoop`; one task takes the loop's turns: when the
endpoint's timer is due, or soon after an input the endpoint says produced
output, it drains what can be read without waiting, takes a turn, and sends
what the turn returned. Deliveries come out through an async iterator fed
from the bounded buffer; no task ever waits for the application.

A link subclass provides the endpoint (:meth:`TrioDriver._open_endpoint`),
the clock (:meth:`TrioDriver._now` and its offset to ``trio.current_time()``),
the sockets (:meth:`TrioDriver._open_link`, :meth:`TrioDriver._close_link`),
its receiving tasks, and :meth:`TrioDriver._send`.

An endpoint with an engine handle (``endpoint.engine``, an
:class:`epto.endpoint.EngineHandle`) gets the node's input path attached:
an operation on the handle (adding a member, publishing to one atoms
group) is refused unless the node runs, and takes a turn soon after, as a
broadcast does.

An endpoint whose member has a vote to keep (the token ring's:
``transports/_ring_durable.py``), in a node with a data directory, gets its
latest record back before the first turn, and every turn writes the
endpoint's new record (flushed, unless ``durability`` says otherwise)
before it sends that turn's frames.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import Self

import trio

from epto import Delivery, EventId, LocalProtocolError, ProcessId
from epto.endpoint import Endpoint, EngineHandle, OverflowPolicy, Transmit

from .._identity import MemberClaim, claim_member
from .._loop import DeliveryBuffer, DeliveryOverflowError, DriverLoop
from .._ring_durable import KeepsVote, VoteStore
from .tasks import TaskOwner


class TrioDriver(TaskOwner):
    """The shared body of every trio node."""

    mode = ""
    """The ordering engine this node runs."""

    def __init__(
        self, *, flush_timeout: float, delivery_buffer: int, overflow: OverflowPolicy
    ) -> None:
        super().__init__()
        self._flush_timeout = flush_timeout
        self._buffer = DeliveryBuffer(delivery_buffer, overflow)
        self._loop: DriverLoop | None = None
        self._offset = 0.0
        """``now`` for the endpoint is ``trio.current_time() + _offset``."""
        self._readers = trio.lowlevel.ParkingLot()
        self._turned = trio.lowlevel.ParkingLot()
        self._wake = trio.lowlevel.ParkingLot()
        self._poked = False
        self._sleep: trio.CancelScope | None = None
        """The turn task's sleep until the endpoint's deadline, while it sleeps."""
        self._stop_reason: str | None = None
        self._member: MemberClaim | None = None
        """The member's files, claimed by :meth:`_open_endpoint` (a subclass
        calls :meth:`_claim_member`), released when the node stops."""
        self._votes: tuple[VoteStore, KeepsVote] | None = None
        """Where the member's vote is kept, and the endpoint that gives it."""

    # -- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._check_new()
        self._offset = self._clock_offset()
        try:
            self._loop = DriverLoop(self._open_endpoint(self._now()), self._buffer)
            engine = getattr(self._loop.endpoint, "engine", None)
            if isinstance(engine, EngineHandle):
                engine.attach(_NodeInput(self))
            self._open_votes(self._loop.endpoint)
            await self._open_link()
            await self._open_tasks()
        except BaseException:
            self._release_member()
            raise
        self._start_receiving()
        self._spawn(self._turn_loop)
        return self

    async def aclose(self) -> None:
        """Stop broadcasting; go on (at most ``flush_timeout`` seconds) until
        the endpoint says its own broadcasts are safe, then leave and stop
        (:meth:`~._loop.DriverLoop.close`: the turn that finds the endpoint
        flushed leaves and sends the goodbyes)."""
        if self._state != "running":
            self.abort()
            return
        self._state = "closing"
        loop = self._require_loop()
        loop.close()
        self._poke()  # a turn now: an endpoint already flushed leaves at once
        try:
            with trio.move_on_after(self._flush_timeout):
                while not loop.left and self._state == "closing":
                    await self._turned.park()
                if loop.left and self._state == "closing":
                    await self._sent()
        finally:
            # Also when the code that entered the node is cancelled meanwhile:
            # the tasks stop and the sockets are closed.
            self.abort()

    def abort(self) -> None:
        """Stop at once (what a crash looks like to the group)."""
        self._release_member()
        if not self._cancel_tasks():
            return
        self._close_link()
        self._readers.unpark_all()
        self._turned.unpark_all()
        self._wake.unpark_all()

    # -- application API ----------------------------------------------------

    def broadcast(self, payload: bytes) -> EventId:
        """Broadcast ``payload``; it is delivered in the group's total order."""
        if self._state != "running":
            raise LocalProtocolError(f"cannot broadcast on a node that is {self._state}")
        loop = self._require_loop()
        eid = loop.broadcast(payload, self._now())
        self._after_input(loop)
        return eid

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Delivery:
        buffer = self._buffer
        while True:
            delivery = buffer.get()
            if delivery is not None:
                return delivery
            if buffer.overflowed:
                raise DeliveryOverflowError(
                    f"more than {buffer.capacity} deliveries waited for the application"
                )
            if self._state == "closed":
                if self._stop_reason is not None:
                    raise self._stopped_error(self._stop_reason)
                raise StopAsyncIteration
            await self._readers.park()

    @property
    def endpoint(self) -> Endpoint:
        """The sans-IO endpoint this node runs."""
        return self._require_loop().endpoint

    # -- the loop -----------------------------------------------------------

    def _now(self) -> float:
        return self._offset + trio.current_time()

    def _require_loop(self) -> DriverLoop:
        if self._loop is None:
            raise LocalProtocolError("the node is not started; use 'async with node:'")
        return self._loop

    def _arrived(self, data: bytes, peer_host: str | None = None) -> bool:
        """Feed one datagram or frame (from a receiving task); True when accepted."""
        loop = self._require_loop()
        accepted = loop.arrived(data, self._now(), peer_host)
        if accepted:
            self._after_input(loop)
        return accepted

    def _after_input(self, loop: DriverLoop) -> None:
        """Take a turn soon if the input produced output; else, if it moved
        the endpoint's deadline before the one the turn task sleeps until,
        move that task's deadline (no wake-up before it is due)."""
        if loop.output_pending():
            self._poke()
            return
        sleep = self._sleep
        if sleep is not None:
            deadline = loop.deadline() - self._offset
            if deadline < sleep.deadline:
                sleep.deadline = deadline

    def _poke(self) -> None:
        """Take a turn soon: once the current task yields, so that what several
        inputs produce (broadcasts in a row, the frames of one chunk) leaves
        together, in fewer and fuller frames."""
        if not self._poked:
            self._poked = True
            self._wake.unpark_all()

    async def _turn_loop(self) -> None:
        loop = self._require_loop()
        while True:
            deadline = loop.deadline() - self._offset
            if not self._poked and deadline > trio.current_time():
                with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf) as sleep:
                    self._sleep = sleep
                    try:
                        await self._wake.park()
                    finally:
                        self._sleep = None
            else:
                # A turn that stays due must not starve the other tasks.
                await trio.lowlevel.checkpoint()
            self._poked = False
            # Feed what has arrived before the timer runs: a copy waiting in a
            # socket buffer while the round ages the others can turn into a hole.
            self._drain_arrivals()
            out = loop.turn(self._now())
            self._keep_vote()
            if out:
                await self._send(out)
            gone = loop.gone()
            if gone:
                self._forget(gone)
            if len(self._buffer):
                self._readers.unpark_all()
            reason = loop.stopped()
            if reason is not None:
                if reason != "overflow":
                    self._stop_reason = reason
                self.abort()
                return
            self._turned.unpark_all()

    # -- what a link provides -----------------------------------------------

    def _clock_offset(self) -> float:
        """``now`` minus ``trio.current_time()`` for the endpoint (0: trio's clock)."""
        return 0.0

    def _claim_member(
        self, pid: ProcessId, data_dir: str | None, incarnation: int | None
    ) -> MemberClaim:
        """Claim the member's files (``transports/_identity.py``) for as long
        as this node runs: a second live process with this id and data
        directory is refused before any socket is opened."""
        self._member = claim_member(pid, data_dir=data_dir, incarnation=incarnation)
        return self._member

    def _release_member(self) -> None:
        votes, self._votes = self._votes, None
        if votes is not None:
            votes[0].close()
        member, self._member = self._member, None
        if member is not None:
            member.release()

    def _open_votes(self, endpoint: Endpoint) -> None:
        """Give a restart the vote its member kept, and keep it from now on
        (only an endpoint that has one, with a data directory). A start that
        does not resume removes what an earlier start left."""
        member = self._member
        if member is None or member.data_dir is None or not isinstance(endpoint, KeepsVote):
            return
        store = VoteStore(member.data_dir, member.pid, sync=endpoint.durability == "fsync")
        if endpoint.durability == "off":
            store.clear()  # a vote not kept on: an earlier one must not be taken later
            return
        if not endpoint.resume(store.load() if member.previous is not None else None):
            store.clear()
        self._votes = (store, endpoint)

    def _keep_vote(self) -> None:
        """Write the member's new vote, if any, before this turn's frames leave."""
        votes = self._votes
        if votes is not None:
            record = votes[1].durable_record()
            if record is not None:
                votes[0].write(record)

    def _open_endpoint(self, now: float) -> Endpoint:
        raise NotImplementedError

    def _stopped_error(self, reason: str) -> Exception:
        """What iterating raises once the endpoint stopped for ``reason``."""
        return LocalProtocolError(f"the node stopped: {reason}")

    async def _open_link(self) -> None:
        raise NotImplementedError

    def _start_receiving(self) -> None:
        """Spawn the tasks that feed arrivals (:meth:`_arrived`)."""
        raise NotImplementedError

    def _drain_arrivals(self) -> None:
        """Feed every arrival that can be read without waiting."""

    async def _send(self, out: list[Transmit]) -> None:
        """Send every frame; failures are counted, never raised (the loop must go on)."""
        raise NotImplementedError

    async def _sent(self) -> None:
        """Wait until what :meth:`_send` handed over is on its way (a link
        that queues frames writes them); ``aclose`` bounds the wait."""

    def _forget(self, gone: list[ProcessId]) -> None:
        """These processes left the group's view: their links can go."""

    def _close_link(self) -> None:
        raise NotImplementedError


class _NodeInput:
    """The input path of a trio node, for its endpoint's engine handle: an
    operation runs only while the node runs, and a turn follows it soon."""

    __slots__ = ("_node",)

    def __init__(self, node: TrioDriver) -> None:
        self._node = node

    def __enter__(self) -> None:
        node = self._node
        if node._state != "running":
            raise LocalProtocolError(f"the node is {node._state}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            node = self._node
            node._after_input(node._require_loop())
