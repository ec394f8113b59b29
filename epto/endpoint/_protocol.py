"""The endpoint protocol: one engine, its codec and sealer, speaking bytes.

Every ordering engine (EpTO with its peer sampler, the token ring,
sequencing atoms, and any later one) is wrapped in an endpoint with this
surface, in the shape of aioquic's ``QuicConnection``: every entry point
takes ``now``; what the endpoint wants done comes out as values the driver
pulls. The core, :class:`Endpoint`, is what every engine really does:
broadcast, receive, frames to send, the next delivery, one timer,
statistics, and ``flushed`` for a graceful close.

What only some engines have is a capability of its own, which the driver
loop (``epto.transports``) asks for once, when it starts, and never by the
engine's kind:

* :class:`Leaving`: the endpoint tells the group it goes (EpTO's peer
  sampler); graceful close calls :meth:`Leaving.leave` once flushed;
* :class:`Stoppable`: the endpoint can stop for good on its own (put out
  of the token ring's view; a later start of an EpTO member);
* :class:`Eager`: an input may produce output before the timer (the token
  ring, atoms); an endpoint without it sends and delivers from its timer
  only (EpTO's rounds);
* :class:`ViewAware`: the endpoint reports the processes it will not send
  to again (:meth:`ViewAware.gone`), whose links the driver lets go;
* :class:`StreamEndpoint`: what a stream driver (TCP) needs: the frame
  bounds, addresses, and the frames a new stream opens with.

Operations only one engine has (adding a member to EpTO's full view,
advancing its clock, the token ring's addresses, publishing to an atoms
group) are on the endpoint's typed handle, ``endpoint.engine``
(:mod:`._handles`), which a driver attaches to its own input path.

Rules every endpoint keeps:

* bytes from the network are hostile: :meth:`Endpoint.receive` never raises
  for them; it counts what it refuses (``statistics().rejected``) and says
  whether the frame was accepted;
* every frame it hands out is bound to its receiver (``Transmit.dest``) and
  fits the configured limits; a message that cannot be framed is counted
  (``encode_failures``), never raised;
* :meth:`Endpoint.statistics` changes nothing;
* the application's misuse (a payload above ``limits.max_payload_size``, a
  broadcast after leaving) raises :class:`epto.LocalProtocolError` and
  changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, runtime_checkable

from .._event import Delivery, EventId, ProcessId
from ..wire._limits import Limits
from ._config import Address


class Transmit(NamedTuple):
    """One frame to send: to process ``dest``, reached at ``address``."""

    dest: ProcessId
    address: str
    data: bytes


class EndpointStatistics(Protocol):
    """The counters every endpoint's statistics have."""

    @property
    def broadcasts(self) -> int: ...

    @property
    def delivered(self) -> int: ...

    @property
    def rejected(self) -> Mapping[str, int]: ...

    @property
    def encode_failures(self) -> int: ...


class Endpoint(Protocol):
    """What a driver runs: bytes in, bytes out, deliveries, one timer."""

    @property
    def pid(self) -> ProcessId: ...

    def broadcast(self, payload: bytes, now: float) -> EventId:
        """Broadcast ``payload`` to the group; returns its event id."""
        ...

    def receive(self, data: bytes, now: float, *, peer_host: str | None = None) -> bool:
        """Feed one datagram or stream frame; True when it was accepted.
        ``peer_host`` is the host the bytes came from, where the transport
        knows it (a stream's remote address)."""
        ...

    def reject(self, fault: str) -> None:
        """Count input the driver refused before it reached the endpoint
        (a socket error, an item that is not bytes)."""
        ...

    def frames_to_send(self, now: float) -> list[Transmit]:
        """Every frame the endpoint wants sent now (datagrams or stream
        frames, whichever the transport carries); drains."""
        ...

    def next_delivery(self) -> Delivery | None:
        """The next delivery in the group's order, or None."""
        ...

    def get_timer(self) -> float:
        """When :meth:`handle_timer` is next due (``inf``: never)."""
        ...

    def handle_timer(self, now: float) -> None: ...

    def flushed(self) -> bool:
        """True once this endpoint's own broadcasts need it no more: a node
        may leave without losing them."""
        ...

    def statistics(self) -> EndpointStatistics: ...


@runtime_checkable
class Leaving(Protocol):
    """An endpoint that tells the group it goes."""

    def leave(self, now: float) -> None:
        """Leave the group (the frames saying so come out of the next
        :meth:`Endpoint.frames_to_send`); later inputs are ignored."""
        ...


@runtime_checkable
class Stoppable(Protocol):
    """An endpoint that can stop for good on its own."""

    @property
    def stopped(self) -> str | None:
        """Why the endpoint stopped for good (it takes no more input, the
        driver closes the node), or None while it runs."""
        ...


@runtime_checkable
class Eager(Protocol):
    """An endpoint whose inputs may produce output before its timer."""

    def output_pending(self) -> bool:
        """True when inputs since the last :meth:`Endpoint.frames_to_send`
        may have produced frames or deliveries to take before
        :meth:`Endpoint.get_timer` (the driver then takes them soon). An
        input may also move :meth:`Endpoint.get_timer` earlier: a driver
        re-reads it after each input, with or without this capability."""
        ...


@runtime_checkable
class ViewAware(Protocol):
    """An endpoint that reports the processes it will not send to again."""

    def gone(self) -> list[ProcessId]:
        """Processes this endpoint will not send to again (they left the
        group's view) since the last call: their links can be let go."""
        ...


class StreamEndpoint(Endpoint, Protocol):
    """An endpoint run over reliable FIFO links, one stream per peer and
    direction (TCP): what a stream driver needs beyond :class:`Endpoint`.

    The driver opens a stream to ``dest`` when it first has frames for it
    (again after the stream broke), at :meth:`address_of`, and writes
    :meth:`opening` first on every new stream. A receiver accepts frames up
    to ``limits.max_frame_size`` on a stream once one frame of it was
    accepted; before that, a small first frame only (the driver's
    ``first_frame_limit``, at least 512 bytes), so the first opening frame
    must fit it. Frames are at least ``epto.wire.HEADER_SIZE`` bytes. What
    a broken stream loses (frames in flight) the engine repairs; the driver
    never writes a frame twice. An endpoint that is also :class:`ViewAware`
    tells the driver to stop waiting for a peer's stream.
    """

    @property
    def limits(self) -> Limits:
        """The frame bounds; the driver reads frames up to
        ``limits.max_frame_size`` (every member uses the same)."""
        ...

    def address_of(self, pid: ProcessId) -> Address | None:
        """Where ``pid`` listens now (``"host:port"``), or None when unknown
        (the driver tries again later)."""
        ...

    def set_advertised(self, address: Address) -> None:
        """This member's own address, once the driver listens (the
        configured one, or the bound one): what the endpoint announces."""
        ...

    def opening(self, dest: ProcessId) -> list[bytes]:
        """The frames a new stream to ``dest`` starts with (sent before
        anything else on that stream)."""
        ...
