"""EpTO over ZeroMQ, for deployments that already run ZeroMQ.

Each node binds one PULL socket to receive and connects one PUSH socket per
peer the first time it sends to that peer. pyzmq does not speak trio, so the
node runs its own loop in a thread: ``zmq.Poller`` with the core's next round
deadline as the poll timeout. The application side is synchronous and
thread-safe: :meth:`ZmqNode.broadcast`, a blocking iterator of deliveries
(:meth:`ZmqNode.get` with a timeout), :meth:`ZmqNode.close`.

::

    with ZmqNode(NodeConfig(pid=1, bind="127.0.0.1:9001", members=members)) as node:
        node.broadcast(b"hello")
        for delivery in node:
            ...

ZeroMQ links are TCP: messages to a peer that is down queue up to the send
high-water mark, then are dropped and counted (``send_failures``); EpTO's
redundancy covers them. Messages larger than twice ``limits.max_frame_size``
make libzmq drop the connection of the peer that sent them
(``ZMQ_MAXMSGSIZE``); smaller ones that are still too big are counted as
``oversized``.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from types import TracebackType
from typing import Any, Self

import attrs
import zmq

from epto import Delivery, EventId, LocalProtocolError, ProcessId
from epto.endpoint import (
    Address,
    EptoEndpoint,
    EptoHandle,
    NodeConfig,
    Transmit,
    parse_host_port,
)

from ._identity import claim_member
from ._lifecycle import SyncNodeLifecycle
from ._loop import DeliveryBuffer, DeliveryOverflowError, DriverLoop, fresh_rng
from ._statistics import TransportStatistics, epto_statistics, require_epto

__all__ = ["ZmqNode"]

_SEND_HWM = 1000
_RECV_BATCH = 512


def endpoint(address: Address) -> str:
    """``"host:port"`` to ``"tcp://host:port"``."""
    host, port = parse_host_port(address)
    return f"tcp://{host}:{port}"


class ZmqNode(SyncNodeLifecycle):
    """One EpTO node over ZeroMQ; start it with ``with`` or :meth:`start`."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        require_epto(
            config,
            "ZmqNode",
            "the token ring runs over TCP with trio (epto.transports.trio_node.open_node)",
        )
        # The member's files first: a second live process with this id and
        # data directory is refused before any socket is opened.
        self._claim = claim_member(
            config.pid, data_dir=config.data_dir, incarnation=config.incarnation
        )
        self.config = attrs.evolve(config, incarnation=self._claim.incarnation)
        self._context = context or zmq.Context.instance()
        self._offset = time.time() - time.monotonic()
        self._cond = threading.Condition()
        try:
            self._endpoint = EptoEndpoint(self.config, self._now(), rng=fresh_rng())
        except BaseException:
            self._claim.release()
            raise
        self._loop = DriverLoop(
            self._endpoint, DeliveryBuffer(config.delivery_buffer, config.overflow)
        )
        self._endpoint.engine.attach(_NodeInput(self))
        self._state = "new"
        self._thread: threading.Thread | None = None
        self._pull: zmq.Socket[Any] | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._push: dict[Address, zmq.Socket[Any]] = {}
        self._error: BaseException | None = None
        self._members_changed = True
        self.address = ""

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> Self:
        """Bind and start the poller thread."""
        if self._state != "new":
            raise LocalProtocolError("a node can be started once")
        pull = self._context.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.MAXMSGSIZE, 2 * self.config.limits.max_frame_size)
        host, port = parse_host_port(self.config.bind)
        try:
            if port == 0:
                port = pull.bind_to_random_port(f"tcp://{host}")
            else:
                pull.bind(f"tcp://{host}:{port}")
        except BaseException:
            pull.close(0)
            raise
        self._pull = pull
        self.address = f"{host}:{port}"
        self._state = "running"
        self._thread = threading.Thread(
            target=self._run, name=f"epto-zmq-{self.config.pid}", daemon=True
        )
        self._thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        """Stop broadcasting, keep running rounds until this node's events have
        been gossiped TTL rounds (at most ``flush_timeout`` seconds), then stop
        (:meth:`~._loop.DriverLoop.close`: the poller thread's turn that
        finds the endpoint flushed leaves and sends the goodbyes)."""
        flush = self.config.flush_timeout if timeout is None else timeout
        with self._cond:
            if self._state == "running":
                self._state = "closing"
                self._loop.close()
                with contextlib.suppress(OSError):
                    self._wake_w.send(b"c")  # a turn now: a flushed node leaves at once
                deadline = time.monotonic() + flush
                while self._state == "closing" and not self._loop.left:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
        self.abort()

    def abort(self) -> None:
        """Stop at once (what a crash looks like to the group)."""
        self._claim.release()
        with self._cond:
            if self._state == "closed" or self._state == "new":
                self._state = "closed"
                self._wake_r.close()
                self._wake_w.close()
                return
            self._state = "closed"
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- application API (thread-safe) -------------------------------------

    @property
    def engine(self) -> EptoHandle:
        """EpTO's own operations (:class:`epto.endpoint.EptoHandle`: a full
        view's members, the clock, ``resume_after`` before :meth:`start`),
        thread-safe: each runs under the node's lock and wakes its poller."""
        return self._endpoint.engine

    @property
    def incarnation(self) -> int:
        """This start of the member (docs/node.md, *Restart*)."""
        return self._endpoint.incarnation

    def broadcast(self, payload: bytes) -> EventId:
        with self._cond:
            if self._state != "running":
                raise LocalProtocolError(f"cannot broadcast on a node that is {self._state}")
            return self._loop.broadcast(payload, self._now())

    def get(self, timeout: float | None = None) -> Delivery | None:
        """The next delivery; None after ``timeout`` seconds or once the node is
        closed and drained. Raises :class:`DeliveryOverflowError` under the
        ``"fail"`` policy when the application fell too far behind."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                buffer = self._loop.buffer
                delivery = buffer.get()
                if delivery is not None:
                    return delivery
                if buffer.overflowed:
                    raise DeliveryOverflowError(f"more than {buffer.capacity} deliveries waited")
                if self._error is not None:
                    raise RuntimeError("the node's poller thread failed") from self._error
                if self._state == "closed":
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)

    def statistics(self) -> TransportStatistics:
        with self._cond:
            return epto_statistics(self._endpoint, self._loop)

    @property
    def pid(self) -> ProcessId:
        return self.config.pid

    # -- the poller thread --------------------------------------------------

    def _now(self) -> float:
        return self._offset + time.monotonic()

    def _run(self) -> None:
        pull = self._pull
        assert pull is not None
        poller = zmq.Poller()
        poller.register(pull, zmq.POLLIN)
        wake_fd = self._wake_r.fileno()
        poller.register(wake_fd, zmq.POLLIN)
        loop = self._loop
        try:
            while True:
                with self._cond:
                    if self._state == "closed":
                        return
                    wait = loop.deadline() - self._now()
                # After leaving, the endpoint has no timer: wait for arrivals or close().
                timeout_ms = max(0, math.ceil(wait * 1000)) if math.isfinite(wait) else None
                ready = dict(poller.poll(timeout_ms))
                if wake_fd in ready:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                if pull in ready:
                    self._receive_batch(pull)
                with self._cond:
                    if self._state == "closed":
                        return
                    if self._members_changed:
                        self._members_changed = False
                        self._connect_members()
                    out = loop.turn(self._now())
                    self._send(out)
                    self._cond.notify_all()  # readers, and close() waiting for loop.left
                    if loop.stopped() is not None:
                        self._state = "closed"
                        return
        except BaseException as err:  # surfaced to readers, never swallowed
            with self._cond:
                self._error = err
                self._state = "closed"
                self._cond.notify_all()
            raise
        finally:
            for sock in self._push.values():
                sock.close(0)
            self._push.clear()
            pull.close(0)
            self._wake_r.close()
            self._wake_w.close()

    def _receive_batch(self, pull: zmq.Socket[Any]) -> None:
        arrivals = []
        for _ in range(_RECV_BATCH):
            try:
                arrivals.append(pull.recv(zmq.NOBLOCK, copy=True))
            except zmq.Again:
                break
        with self._cond:
            arrived = self._loop.arrived
            now = self._now()
            for data in arrivals:
                arrived(data, now)

    def _connect(self, address: Address) -> zmq.Socket[Any]:
        sock = self._push.get(address)
        if sock is None:
            target = endpoint(address)  # LocalProtocolError before any socket exists
            sock = self._context.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, _SEND_HWM)
            # Peers that start later are found within 10-200 ms, not libzmq's 100 ms+.
            sock.setsockopt(zmq.RECONNECT_IVL, 10)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 200)
            sock.connect(target)
            self._push[address] = sock
        return sock

    def _connect_members(self) -> None:
        """Open links to every known member ahead of the first ball: the TCP
        and ZeroMQ handshakes then overlap the first rounds instead of
        delaying the first events by a round trip or more."""
        for address in self._endpoint.addresses():
            if address not in self._push:
                with contextlib.suppress(LocalProtocolError, zmq.ZMQError):
                    self._connect(address)

    def _send(self, out: list[Transmit]) -> None:
        loop = self._loop
        for transmit in out:
            try:
                sock = self._connect(transmit.address)
            except (LocalProtocolError, zmq.ZMQError):
                # An address a peer advertised (Cyclon) that is not host:port.
                loop.send_failures += 1
                continue
            try:
                sock.send(transmit.data, zmq.NOBLOCK)
                loop.datagrams_sent += 1
            except zmq.Again:
                loop.send_failures += 1


class _NodeInput:
    """The ZeroMQ node's input path, for its endpoint's engine handle: an
    operation runs under the node's lock, then wakes the poller thread
    (which connects to new members and takes a turn)."""

    __slots__ = ("_node",)

    def __init__(self, node: ZmqNode) -> None:
        self._node = node

    def __enter__(self) -> None:
        self._node._cond.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        node = self._node
        node._members_changed = True
        node._cond.release()
        with contextlib.suppress(OSError):
            node._wake_w.send(b"m")
