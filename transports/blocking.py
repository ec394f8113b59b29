"""Any trio node behind a synchronous, thread-safe API, for applications
that do not run an event loop.

:class:`BlockingNode` runs the node :func:`epto.transports.trio_node.open_node`
opens for a :class:`NodeConfig` (EpTO over UDP, or the token ring over TCP;
``mode="auto"`` included) in a trio event loop on a thread of its own, and
offers what :class:`epto.transports.zmq_node.ZmqNode` offers: ``broadcast``,
a blocking iterator of deliveries, ``get`` with a timeout, ``statistics``,
``close`` and ``abort``, callable from any thread::

    with BlockingNode(NodeConfig(pid=1, bind="127.0.0.1:9001", members=members,
                                 mode="auto")) as node:
        node.broadcast(b"hello")
        for delivery in node:
            ...

It is the trio node itself, not another driver: the same wire, the same
counters, the same guarantees. A call from another thread (``broadcast``,
``statistics``) waits for the trio thread to run it (a wake-up of that
thread each). Deliveries are moved from the node to this object's queue as
they come, up to ``NodeConfig.delivery_buffer`` waiting for the
application; beyond that they wait in the node's own buffer, whose
``overflow`` policy applies, so a slow application never makes either grow
without bound.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Self, TypeVar

import trio

from epto import Delivery, EventId, LocalProtocolError, ProcessId
from epto.endpoint import NodeConfig

from ._lifecycle import SyncNodeLifecycle
from .trio_atoms import AtomsNode
from .trio_node import GroupStatistics, open_node
from .trio_tcp import TokenRingNode
from .trio_udp import UdpNode

__all__ = ["BlockingNode"]

T = TypeVar("T")


class BlockingNode(SyncNodeLifecycle):
    """A trio node (:func:`~epto.transports.trio_node.open_node`) run on a
    thread of its own; start it with ``with`` or :meth:`start`."""

    def __init__(self, config: NodeConfig, *, start_timeout: float = 30.0) -> None:
        self.config = config
        self.address = ""
        """Where the node listens, once started (``"host:port"``)."""
        self.mode = config.resolved_mode()
        """The engine the node runs: ``"epto"`` or ``"token-ring"``."""
        self._start_timeout = start_timeout
        self._capacity = config.delivery_buffer
        self._cond = threading.Condition()
        self._deliveries: deque[Delivery] = deque()
        self._state = "new"
        self._error: BaseException | None = None
        """Why the node stopped, raised by :meth:`get` after the deliveries queued."""
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._node: UdpNode | TokenRingNode | AtomsNode | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        # Trio side, touched only in the trio thread:
        self._stop: trio.Event | None = None
        self._graceful = True
        self._room: trio.Event | None = None
        self._last_statistics: GroupStatistics | None = None

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> Self:
        """Start the node's thread; return once the node listens. Raises what
        starting the node raised (an address in use, a bad configuration)."""
        with self._cond:
            if self._state != "new":
                raise LocalProtocolError("a node can be started once")
            self._state = "starting"
        self._thread = threading.Thread(
            target=trio.run, args=(self._main,), name=f"epto-{self.config.pid}", daemon=True
        )
        self._thread.start()
        if not self._started.wait(self._start_timeout):
            self.abort()
            raise LocalProtocolError(f"the node did not start within {self._start_timeout} s")
        with self._cond:
            if self._state != "running":
                error = self._error
                self._thread.join()
                if error is not None:
                    raise error
                raise LocalProtocolError("the node stopped while starting")
        return self

    def close(self) -> None:
        """Stop broadcasting, let the node flush its own broadcasts (at most
        ``NodeConfig.flush_timeout`` seconds, as ``aclose`` does), then stop.
        Deliveries already queued can still be taken with :meth:`get`."""
        self._stop_node(graceful=True)

    def abort(self) -> None:
        """Stop at once (what a crash looks like to the group)."""
        self._stop_node(graceful=False)

    def _stop_node(self, *, graceful: bool) -> None:
        with self._cond:
            if self._state in ("new", "closed"):
                self._state = "closed"
                return
        token = self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._request_stop, graceful)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- application API (thread-safe) -------------------------------------

    def broadcast(self, payload: bytes) -> EventId:
        """Broadcast ``payload``; raises :class:`epto.LocalProtocolError` once
        the node is closing or closed, or for a payload the node refuses."""
        node = self._require_node()
        return self.run_sync(node.broadcast, payload)

    def get(self, timeout: float | None = None) -> Delivery | None:
        """The next delivery; None after ``timeout`` seconds, or once the node
        stopped and every delivery was taken. Raises what stopped the node
        (:class:`~epto.transports.DeliveryOverflowError` under the ``"fail"``
        policy, :class:`~epto.transports.trio_node.MemberExcludedError`) after
        the deliveries queued before it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._deliveries:
                    delivery = self._deliveries.popleft()
                    if len(self._deliveries) == self._capacity // 2:
                        self._wake_consumer()
                    return delivery
                if self._error is not None:
                    raise self._error
                if self._state == "closed":
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)

    def statistics(self) -> GroupStatistics:
        """The node's statistics (``UdpNode``'s, ``TokenRingNode``'s or
        ``AtomsNode``'s); once it stopped, those it had when it stopped."""
        node = self._require_node()
        with self._cond:
            if self._state == "closed" and self._last_statistics is not None:
                return self._last_statistics

        def read() -> GroupStatistics:
            return node.statistics()

        try:
            return self.run_sync(read)
        except LocalProtocolError:
            with self._cond:
                if self._last_statistics is not None:
                    return self._last_statistics
            raise

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    @property
    def node(self) -> UdpNode | TokenRingNode | AtomsNode:
        """The trio node; call its methods through :meth:`run_sync` (from its
        own thread only)."""
        return self._require_node()

    # -- the trio thread ------------------------------------------------------

    def _require_node(self) -> UdpNode | TokenRingNode | AtomsNode:
        node = self._node
        if node is None:
            raise LocalProtocolError("the node is not started; use 'with node:' or start()")
        return node

    def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` run in the node's thread, between two of its steps;
        its result. For what the node offers beyond this class (its engine
        handle: ``UdpNode.engine.add_member``, ``TokenRingNode.engine.set_address``)::

            node.run_sync(lambda: node.node.engine.add_member(4, "127.0.0.1:9004"))

        Any thread may call it (another trio loop's too: it blocks that
        thread meanwhile). Raises :class:`epto.LocalProtocolError` once the
        node's loop ended."""
        thread = self._thread
        if thread is threading.current_thread():
            return fn(*args)
        token = self._token
        if token is None or thread is None:
            raise LocalProtocolError("the node is not started; use 'with node:' or start()")
        future: Future[T] = Future()

        def call() -> None:
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the calling thread
                future.set_exception(exc)

        try:
            token.run_sync_soon(call)
        except trio.RunFinishedError:
            raise LocalProtocolError("the node is closed") from None
        while True:
            try:
                return future.result(timeout=0.1)
            except TimeoutError:
                if not thread.is_alive() and not future.done():
                    # The loop ended before it ran the call.
                    raise LocalProtocolError("the node is closed") from None

    def _request_stop(self, graceful: bool) -> None:
        self._graceful = self._graceful and graceful
        if self._stop is not None:
            self._stop.set()
        if not graceful and self._node is not None:
            self._node.abort()

    def _wake_consumer(self) -> None:
        # Called with the lock held, from the application's thread.
        token, room = self._token, self._room
        if token is not None and room is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(room.set)

    async def _main(self) -> None:
        self._stop = trio.Event()
        try:
            async with open_node(self.config) as node:
                self._node = node
                self._token = trio.lowlevel.current_trio_token()
                self.address = node.address
                with self._cond:
                    self._state = "running"
                self._started.set()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._consume, node)
                    await self._stop.wait()
                    with self._cond:
                        self._state = "closing"
                    if self._graceful:
                        await node.aclose()
                    else:
                        node.abort()
                    nursery.cancel_scope.cancel()
                # What the stopped node still holds (at most its buffer) goes to
                # the application's queue, as the node would have handed it out.
                await self._drain(node)
                self._last_statistics = node.statistics()
        except BaseException as exc:  # handed to the application (start, get)
            with self._cond:
                if self._error is None:
                    self._error = exc
        finally:
            with self._cond:
                self._state = "closed"
                self._cond.notify_all()
            self._started.set()

    async def _drain(self, node: UdpNode | TokenRingNode | AtomsNode) -> None:
        cond = self._cond
        try:
            async for delivery in node:
                with cond:
                    self._deliveries.append(delivery)
                    cond.notify()
        except Exception as exc:
            with cond:
                if self._error is None:
                    self._error = exc

    async def _consume(self, node: UdpNode | TokenRingNode | AtomsNode) -> None:
        """Move deliveries from the node to the application's queue, at most
        ``delivery_buffer`` waiting there."""
        cond, deliveries, capacity = self._cond, self._deliveries, self._capacity
        try:
            async for delivery in node:
                with cond:
                    deliveries.append(delivery)
                    cond.notify()
                    full = len(deliveries) >= capacity
                    if full:
                        self._room = room = trio.Event()
                if full:
                    await room.wait()
            # The node ended its deliveries (it was closed): the loop stops too.
            self._request_stop(graceful=True)
        except Exception as exc:
            # The node stopped (an overflow under "fail", excluded from the
            # group): raised to the application after what was queued.
            with cond:
                self._error = exc
                cond.notify_all()
            self._request_stop(graceful=False)
