"""The engine adapters: one ordering engine at the message level, with the
decisions every endpoint makes around it, written once.

An endpoint (:class:`~epto.endpoint.EptoEndpoint`,
:class:`~epto.endpoint.TokenRingEndpoint`) is one adapter plus its framing
(codec, sealer, addresses): bytes in, bytes out. The seeded simulator
(``epto.transports.simulation``) holds the very same adapters without the
framing: its messages travel as objects, so a simulated run of ten thousand
processes encodes nothing, and still makes every message-level decision a
real node makes:

* a broadcast larger than ``limits.max_payload_size`` is refused
  (:class:`epto.LocalProtocolError`) before the engine sees it;
* EpTO: holes, a delivery whose sequence number skips some of its source's
  (``holes``; per-source state, so it can be switched off where a run is
  too large to keep it: ``count_holes=False``); flushed, this process's
  last event relayed TTL rounds; a delivery of this member's own id from a
  later incarnation stops it (``superseded_by``);
* token ring: flushed, every broadcast of this member delivered here.

Every adapter also says whether its member may broadcast now
(``can_broadcast``: a token-ring member that is joining or excluded may
not, an atoms node that belongs to no group may not) and whether it holds
work not done yet (``busy``: something received, held back or sent that is
not delivered or sequenced yet), which a driver (or the simulator's
settling) reads without knowing the engine.

What only one engine has (adding members to a full view, advancing a
clock, the token ring's vote) is reached through the typed handle
:attr:`EptoAdapter.engine` / :attr:`TokenRingAdapter.engine`, never by
subclassing.

An adapter's ``receive``, ``handle_timer``, ``get_timer`` and
``messages_to_send`` are the engine's own bound methods: the message path
costs no extra call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from .._event import Delivery, EventId, ProcessId
from .._incarnation import COUNT_MASK, incarnation_of
from ..atoms._process import AtomsProcess
from ..epidemic._node import Node
from ..epidemic._process import Process
from ..tokenring import Role, TokenRingProcess
from ..wire._limits import Limits
from ._streams import check_payload


class _Engine(Protocol):
    """What every engine has at the message level."""

    def receive(self, sender: ProcessId, message: Any, now: float) -> None: ...

    def handle_timer(self, now: float) -> None: ...

    def get_timer(self) -> float: ...

    def messages_to_send(self) -> list[tuple[ProcessId, Any]]: ...


E = TypeVar("E", bound=_Engine)

_SENDING_ROLES = (Role.CORE, Role.EXTERNAL)
"""The token-ring roles of a member of the view."""


class _Adapter(Generic[E]):
    """What every adapter binds: the engine (the typed handle), its limits,
    and the engine's own message path (no extra call per message)."""

    __slots__ = ("engine", "get_timer", "handle_timer", "limits", "messages_to_send", "receive")

    def __init__(self, engine: E, limits: Limits) -> None:
        self.engine = engine
        """The typed handle: the engine inside, for what only it has."""
        self.limits = limits
        self.receive: Callable[[ProcessId, Any, float], None] = engine.receive
        self.handle_timer: Callable[[float], None] = engine.handle_timer
        self.get_timer: Callable[[], float] = engine.get_timer
        self.messages_to_send: Callable[[], list[tuple[ProcessId, Any]]] = engine.messages_to_send


class EptoAdapter(_Adapter[Node | Process]):
    """EpTO (a :class:`~epto.epidemic.Process`, or a
    :class:`~epto.epidemic.Node` with its peer sampler) at the message level.

    ``incarnation`` is this start of the member (its own events from a later
    one stop it); ``count_holes`` keeps the per-source last sequence number
    that :attr:`holes` needs.
    """

    __slots__ = (
        "_holes",
        "_last_broadcast_round",
        "_last_seq",
        "_superseded_by",
        "incarnation",
        "pid",
        "process",
    )

    def __init__(
        self,
        engine: Node | Process,
        *,
        limits: Limits,
        incarnation: int = 0,
        count_holes: bool = True,
    ) -> None:
        super().__init__(engine, limits)
        self.process: Process = engine.process if isinstance(engine, Node) else engine
        self.pid: ProcessId = self.process.pid
        self.incarnation = incarnation
        self._holes = 0
        self._last_seq: dict[ProcessId, int] | None = {} if count_holes else None
        self._last_broadcast_round = -1
        self._superseded_by: int | None = None

    @property
    def holes(self) -> int:
        """Sequence numbers skipped in some source's delivered events (0
        when ``count_holes`` is off)."""
        return self._holes

    @property
    def superseded_by(self) -> int | None:
        """The later incarnation of this member whose event was delivered
        here (this start has stopped), or None."""
        return self._superseded_by

    def broadcast(self, payload: bytes, now: float) -> EventId:
        check_payload(self.limits, payload)
        eid = self.engine.broadcast(payload, now)  # raises to the caller, changes nothing
        self._last_broadcast_round = self.process.rounds
        return eid

    def _account(self, delivery: Delivery) -> None:
        event = delivery.event
        seq = event.seq
        last_seq = self._last_seq
        if last_seq is not None:
            previous = last_seq.get(event.source)
            if previous is None or seq > previous:
                if previous is not None and incarnation_of(seq) == incarnation_of(previous):
                    self._holes += seq - previous - 1
                elif previous is not None:
                    # A later start of the source: the events of that start
                    # before this one were skipped (the end of the earlier
                    # start cannot be known).
                    self._holes += seq & COUNT_MASK
                last_seq[event.source] = seq
        if event.source == self.pid and incarnation_of(seq) > self.incarnation:
            self._superseded_by = incarnation_of(seq)

    def next_delivery(self) -> Delivery | None:
        delivery = self.engine.next_delivery()
        if delivery is not None:
            self._account(delivery)
        return delivery

    def deliveries(self) -> Iterator[Delivery]:
        account = self._account
        for delivery in self.engine.deliveries():
            account(delivery)
            yield delivery

    def can_broadcast(self) -> bool:
        """Always: an EpTO process broadcasts from its start."""
        return True

    def busy(self) -> bool:
        """A ball is being filled, an event received is not delivered yet,
        or a broadcast is held back by the clock guard."""
        sizes = self.process.memory_sizes()
        return bool(
            sizes.get("next_ball")
            or sizes.get("received")
            or sizes.get("waiting")
            or sizes.get("unstamped")
        )

    def flushed(self) -> bool:
        """This process's last event has been relayed TTL rounds: leaving
        loses nothing of it."""
        if self._last_broadcast_round < 0:
            return True
        process = self.process
        return process.rounds > self._last_broadcast_round + process.config.ttl


class TokenRingAdapter(_Adapter[TokenRingProcess]):
    """The token ring (:class:`~epto.tokenring.TokenRingProcess`) at the message level."""

    __slots__ = ("_own_pending", "pid", "process")

    def __init__(self, engine: TokenRingProcess, *, limits: Limits) -> None:
        super().__init__(engine, limits)
        self.process = engine
        self.pid: ProcessId = engine.pid
        self._own_pending: set[EventId] = set()

    def broadcast(self, payload: bytes, now: float) -> EventId:
        check_payload(self.limits, payload)
        eid = self.engine.broadcast(payload, now)
        self._own_pending.add(eid)
        return eid

    def next_delivery(self) -> Delivery | None:
        delivery = self.engine.next_delivery()
        if delivery is not None and delivery.event.source == self.pid:
            self._own_pending.discard(delivery.event.id)
        return delivery

    def deliveries(self) -> Iterator[Delivery]:
        pid = self.pid
        pending = self._own_pending
        for delivery in self.engine.deliveries():
            if delivery.event.source == pid:
                pending.discard(delivery.event.id)
            yield delivery

    def can_broadcast(self) -> bool:
        """A member of the view (core or external): not joining, not excluded."""
        return self.engine.role in _SENDING_ROLES

    def busy(self) -> bool:
        """Joining, or (in the view) a stable position not delivered yet, an
        own message not sequenced yet or an optimistic delivery not ended
        yet (final or revoked). An excluded member is never busy."""
        process = self.engine
        if process.role is Role.JOINING:
            return True
        if process.excluded:
            return False
        stats = process.statistics()
        sizes = process.memory_sizes()
        return bool(
            stats.next_deliver != stats.stable or sizes["own_unsequenced"] or sizes.get("tentative")
        )

    def flushed(self) -> bool:
        """Every broadcast of this member was delivered here: the group has
        sequenced it."""
        return not self._own_pending


class AtomsAdapter(_Adapter[AtomsProcess]):
    """Sequencing atoms (:class:`~epto.atoms.AtomsProcess`) at the message level."""

    __slots__ = ("deliveries", "next_delivery", "pid", "process")

    def __init__(self, engine: AtomsProcess, *, limits: Limits) -> None:
        super().__init__(engine, limits)
        self.process = engine
        self.pid: ProcessId = engine.pid
        self.next_delivery: Callable[[], Delivery | None] = engine.next_delivery
        self.deliveries: Callable[[], Iterator[Delivery]] = engine.deliveries

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """Publish to a group of this node's (the process picks it)."""
        check_payload(self.limits, payload)
        return self.engine.broadcast(payload, now)

    def publish(self, group: int, payload: bytes) -> EventId:
        """Publish to ``group``, in the pairwise order."""
        check_payload(self.limits, payload)
        return self.engine.publish(group, payload)

    def can_broadcast(self) -> bool:
        """This node belongs to some group."""
        return bool(self.engine.groups)

    def busy(self) -> bool:
        """A publication of this node is not sequenced yet."""
        return self.engine.statistics().pending != 0

    def flushed(self) -> bool:
        """Every publication of this node has come back to it delivered (or
        was lost with a crashed host)."""
        return self.engine.outstanding() == 0
