"""The one driver loop, written once: what every driver does with an endpoint.

Every driver (trio UDP, trio TCP, the in-process hub, ZeroMQ) owns sockets,
a clock and tasks, and runs this loop over an :class:`epto.endpoint.Endpoint`:

1. feed what arrived (:meth:`DriverLoop.arrived`);
2. take a turn (:meth:`DriverLoop.turn`): run the endpoint's timer when it is
   due, take what it wants sent, move its deliveries into the bounded
   delivery buffer;
3. send what the turn returned;
4. sleep until the endpoint's next deadline (:meth:`DriverLoop.deadline`),
   the next arrival, or the next broadcast, whichever comes first. An input
   asks for an early turn only when the endpoint says it may have produced
   output (an :class:`epto.endpoint.Eager` endpoint's ``output_pending``).

Graceful close is written here once (:meth:`DriverLoop.close`): the driver
stops taking broadcasts and goes on taking turns; the first turn that finds
the endpoint ``flushed`` leaves the group (an :class:`epto.endpoint.Leaving`
endpoint tells it) and returns the frames saying so with its own
(:attr:`DriverLoop.left`); the driver sends them and stops. The driver only
bounds the wait (its ``flush_timeout``) and stops anyway when it ends.

What only some endpoints do (:class:`epto.endpoint.Leaving`,
:class:`~epto.endpoint.Stoppable`, :class:`~epto.endpoint.Eager`,
:class:`~epto.endpoint.ViewAware`) the loop asks for once, when it is built;
it branches on these capabilities, never on the engine's kind.

Nothing here does I/O or reads a clock; nothing here knows which engine runs.
The shells that wait and move bytes are :mod:`._trio_loop` (trio) and the
ZeroMQ node's poller thread.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from epto import Delivery, EventId, LocalProtocolError, ProcessId
from epto.endpoint import (
    Eager,
    Endpoint,
    Leaving,
    OverflowPolicy,
    Stoppable,
    Transmit,
    ViewAware,
)


def fresh_rng() -> random.Random:
    """A generator seeded from the operating system, for what a node's
    configuration leaves unseeded: drivers own the entropy, as they own the
    clock; the endpoints only take it in."""
    return random.Random(random.SystemRandom().getrandbits(64))


class DeliveryOverflowError(LocalProtocolError):
    """The application fell behind the group by more than ``delivery_buffer``
    deliveries under the ``"fail"`` policy. The node has stopped: a replica that
    silently skipped deliveries would diverge from the group."""


class DeliveryBuffer:
    """The bounded queue between the endpoint and the application.

    Drivers never block on it: the protocol goes on whatever the application
    does. When it is full the policy applies.
    """

    __slots__ = ("_items", "capacity", "dropped", "overflowed", "policy")

    def __init__(self, capacity: int, policy: OverflowPolicy) -> None:
        if capacity < 1:
            raise LocalProtocolError(f"delivery_buffer must be positive, got {capacity}")
        if policy not in ("fail", "drop"):
            raise LocalProtocolError(f"overflow must be 'fail' or 'drop', got {policy!r}")
        self.capacity = capacity
        self.policy = policy
        self._items: deque[Delivery] = deque()
        self.dropped = 0
        self.overflowed = False

    def put(self, delivery: Delivery) -> bool:
        """Queue one delivery; False when the policy refused it."""
        if len(self._items) >= self.capacity:
            if self.policy == "drop":
                self.dropped += 1
                return False
            self.overflowed = True
            return False
        self._items.append(delivery)
        return True

    def fill(self, next_delivery: Callable[[], Delivery | None]) -> None:
        """:meth:`put` every delivery ``next_delivery`` hands out, until it
        has none or an overflow stops the buffer (one call per turn, not per
        delivery: a turn moves every delivery an input produced)."""
        items = self._items
        append = items.append
        capacity = self.capacity
        while not self.overflowed:
            delivery = next_delivery()
            if delivery is None:
                return
            if len(items) < capacity:
                append(delivery)  # put(), without a call per delivery
            else:
                self.put(delivery)

    def get(self) -> Delivery | None:
        return self._items.popleft() if self._items else None

    def __len__(self) -> int:
        return len(self._items)


class DriverLoop:
    """One endpoint, its delivery buffer and the link counters every driver
    reports. Drivers call :meth:`arrived`, :meth:`broadcast`, :meth:`turn`
    and send what the turn returns; they count their own send failures in
    :attr:`send_failures` and what they sent in :attr:`datagrams_sent`."""

    def __init__(self, endpoint: Endpoint, buffer: DeliveryBuffer) -> None:
        self.endpoint = endpoint
        self.buffer = buffer
        # The endpoint's capabilities, asked for once.
        self._output_pending = endpoint.output_pending if isinstance(endpoint, Eager) else None
        self._stoppable = endpoint if isinstance(endpoint, Stoppable) else None
        self._leave = endpoint.leave if isinstance(endpoint, Leaving) else None
        self._gone = endpoint.gone if isinstance(endpoint, ViewAware) else None
        self._flushing = False
        self.left = False
        """The graceful close is done: the endpoint was flushed and left
        (the frames saying so came out of that turn)."""
        self.datagrams_received = 0
        self.datagrams_sent = 0
        self.send_failures = 0

    def arrived(self, data: bytes, now: float, peer_host: str | None = None) -> bool:
        """Feed one datagram or frame; True when the endpoint accepted it."""
        self.datagrams_received += 1
        return self.endpoint.receive(data, now, peer_host=peer_host)

    def refused(self, fault: str) -> None:
        """Count an arrival the driver could not even hand over."""
        self.datagrams_received += 1
        self.endpoint.reject(fault)

    def broadcast(self, payload: bytes, now: float) -> EventId:
        return self.endpoint.broadcast(payload, now)

    def output_pending(self) -> bool:
        """True when an input may have produced output to take before the
        next deadline (the driver then takes a turn soon); never for an
        endpoint that is not :class:`~epto.endpoint.Eager` (its output
        comes from its timer)."""
        output_pending = self._output_pending
        return output_pending is not None and output_pending()

    def gone(self) -> list[ProcessId]:
        """The processes the endpoint will not send to again (a
        :class:`~epto.endpoint.ViewAware` endpoint's), since the last call."""
        gone = self._gone
        return gone() if gone is not None else []

    def close(self) -> None:
        """Begin a graceful close (the driver takes no more broadcasts): the
        first :meth:`turn` that finds the endpoint flushed leaves the group
        and sets :attr:`left`; the driver sends that turn's frames and stops."""
        if not self.left:
            self._flushing = True

    def deadline(self) -> float:
        return self.endpoint.get_timer()

    def turn(self, now: float) -> list[Transmit]:
        """Run the timer if due, take the frames to send, and move the
        deliveries into the buffer (stopping at an overflow)."""
        endpoint = self.endpoint
        if now >= endpoint.get_timer():
            endpoint.handle_timer(now)
        out = endpoint.frames_to_send(now)
        self.buffer.fill(endpoint.next_delivery)
        if self._flushing and endpoint.flushed():
            # Flushed: leave, and send the goodbyes with this turn's frames.
            self._flushing = False
            self.left = True
            if self._leave is not None:
                self._leave(now)
                out += endpoint.frames_to_send(now)
        return out

    def stopped(self) -> str | None:
        """Why the node must stop now: the endpoint stopped, or the buffer
        overflowed under the ``"fail"`` policy; None while it runs."""
        if self.buffer.overflowed:
            return "overflow"
        stoppable = self._stoppable
        return stoppable.stopped if stoppable is not None else None
