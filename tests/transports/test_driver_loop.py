"""The one driver loop's graceful close, without I/O: flush, then leave, then
stop, written once in ``DriverLoop`` for every driver (trio, ZeroMQ)."""

from __future__ import annotations

import math

from epto.transports._loop import DeliveryBuffer, DriverLoop

from epto import Delivery, EventId
from epto.endpoint import Leaving, Transmit


class _Stats:
    def __init__(self) -> None:
        self.broadcasts = self.delivered = self.encode_failures = 0
        self.rejected: dict[str, int] = {}


class _Quiet:
    """An endpoint with the core only: no leave, no stop, output from its timer."""

    pid = 1

    def __init__(self) -> None:
        self.is_flushed = False
        self.out: list[Transmit] = []

    def broadcast(self, payload: bytes, now: float) -> EventId:
        return (1, 0)

    def receive(self, data: bytes, now: float, *, peer_host: str | None = None) -> bool:
        return True

    def reject(self, fault: str) -> None:
        pass

    def frames_to_send(self, now: float) -> list[Transmit]:
        out, self.out = self.out, []
        return out

    def next_delivery(self) -> Delivery | None:
        return None

    def get_timer(self) -> float:
        return math.inf

    def handle_timer(self, now: float) -> None:
        pass

    def flushed(self) -> bool:
        return self.is_flushed

    def statistics(self) -> _Stats:
        return _Stats()


class _Leaves(_Quiet):
    def __init__(self) -> None:
        super().__init__()
        self.left_at: float | None = None

    def leave(self, now: float) -> None:
        self.left_at = now
        self.out.append(Transmit(2, "b", b"bye"))


def _loop(endpoint: _Quiet) -> DriverLoop:
    return DriverLoop(endpoint, DeliveryBuffer(10, "fail"))


def test_close_leaves_at_the_first_turn_that_finds_the_endpoint_flushed() -> None:
    endpoint = _Leaves()
    assert isinstance(endpoint, Leaving)  # a capability, asked for by shape
    loop = _loop(endpoint)
    endpoint.out.append(Transmit(2, "b", b"ball"))
    assert loop.turn(1.0) == [Transmit(2, "b", b"ball")]  # not closing: no leave
    endpoint.is_flushed = True
    assert loop.turn(2.0) == [] and endpoint.left_at is None and not loop.left
    loop.close()
    endpoint.is_flushed = False
    endpoint.out.append(Transmit(2, "b", b"last ball"))
    assert loop.turn(3.0) == [Transmit(2, "b", b"last ball")]  # still flushing
    assert not loop.left and endpoint.left_at is None
    endpoint.is_flushed = True
    # The goodbye leaves with the turn's own frames, after them.
    endpoint.out.append(Transmit(2, "b", b"ball"))
    assert loop.turn(4.0) == [Transmit(2, "b", b"ball"), Transmit(2, "b", b"bye")]
    assert loop.left and endpoint.left_at == 4.0
    assert loop.turn(5.0) == [] and endpoint.left_at == 4.0  # left once


def test_an_endpoint_without_leave_is_done_once_flushed() -> None:
    endpoint = _Quiet()
    assert not isinstance(endpoint, Leaving)
    loop = _loop(endpoint)
    loop.close()
    assert loop.turn(1.0) == [] and not loop.left
    endpoint.is_flushed = True
    assert loop.turn(2.0) == [] and loop.left
    assert loop.stopped() is None and loop.gone() == [] and not loop.output_pending()
