"""The sink gateway's first message has a deadline: connections that have not
sent the token are bounded in time (``hello_timeout``) and in number
(``max_unauthenticated``, the longest waiting evicted first), and only
authenticated connections count against ``max_connections``, so silent
connections never lock a writer out. Real loopback sockets; every wait is
bounded. No Spark session is started."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable

import pytest
import trio

from epto.spark import Gateway
from epto.spark._client import (
    FRAME_LEN,
    HELLO,
    HELLO_MAGIC,
    GatewayClient,
    GatewayError,
    parse_address,
    send_rows,
)
from epto.spark._rows import encode_event

from ._group import LoopbackGroup


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _connect(address: str) -> socket.socket:
    sock = socket.create_connection(parse_address(address), timeout=30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """What the gateway sent until it closed the connection (bounded wait)."""
    data = bytearray()
    while True:
        part = sock.recv(65536)
        if not part:
            return bytes(data)
        data += part


def _refusal(data: bytes) -> str:
    """The reason of the ``R`` frame that follows the gateway's HELLO."""
    magic, _, _ = HELLO.unpack_from(data)
    assert magic == HELLO_MAGIC
    (length,) = FRAME_LEN.unpack_from(data, HELLO.size)
    body = data[HELLO.size + FRAME_LEN.size : HELLO.size + FRAME_LEN.size + length]
    assert body[:1] == b"R", data
    return body[1:].decode()


def test_silent_connections_never_lock_a_writer_out() -> None:
    options = {
        "token": b"secret",
        "max_connections": 4,
        "max_unauthenticated": 8,
        "hello_timeout": 2.0,
    }
    with LoopbackGroup(2, max_payload=512, **options) as group:  # type: ignore[arg-type]
        gateway = group.gateway
        assert gateway is not None
        silent = [_connect(group.address) for _ in range(64)]
        try:
            # Without the deadline and the bound, 4 silent connections (64 by
            # default) refused every writer until their idle timeout (120 s).
            with GatewayClient(group.address, token=b"secret", timeout=30) as client:
                assert send_rows(client, "s", 1, 0, (b"%d" % i for i in range(50))) == 50
            assert wait_for(lambda: all(len(r) == 50 for r in group.rows.values()), 30)
            assert gateway.statistics.authenticating <= 8
            # Every silent connection is refused once, by eviction or deadline,
            # with a reason, then closed.
            reasons = {_refusal(_read_all(sock)) for sock in silent}
        finally:
            for sock in silent:
                sock.close()
        assert reasons <= {
            "too many connections waiting to authenticate",
            "no token within 2 s",
        }
        assert wait_for(lambda: gateway.statistics.open_connections == 0, 10)
        rejected = gateway.statistics.rejected
        assert rejected.get("hello-evicted", 0) + rejected.get("hello-timeout", 0) == 64
        assert rejected.get("hello-evicted", 0) >= 64 - 8  # at most 8 could wait at once
        assert set(rejected) <= {"hello-evicted", "hello-timeout"}
        assert gateway.statistics.authenticating == 0


def test_the_deadline_is_for_the_whole_first_message_only() -> None:
    with LoopbackGroup(2, max_payload=512, token=b"secret", hello_timeout=1.0) as group:
        gateway = group.gateway
        assert gateway is not None
        # The token trickled a byte every 0.3 s: each read gets a byte long
        # before any per-read timeout, but the whole message (11 bytes, 3 s)
        # misses the deadline, which falls between two bytes.
        slow = _connect(group.address)
        hello = slow.recv(HELLO.size)
        token = FRAME_LEN.pack(7) + b"Hsecret"
        sent = 0
        for byte in token:
            if select.select([slow], [], [], 0.3)[0]:
                break  # the gateway answered: stop before it has closed
            slow.sendall(bytes([byte]))
            sent += 1
        data = _read_all(slow)
        slow.close()
        assert sent < len(token)
        assert _refusal(hello + data) == "no token within 1 s"
        # An authenticated connection stays open past the deadline while idle.
        with GatewayClient(group.address, token=b"secret", timeout=30) as client:
            time.sleep(1.5)
            assert send_rows(client, "s", 2, 0, [b"late"]) == 1
        assert wait_for(lambda: all(len(r) == 1 for r in group.rows.values()), 30)
    assert gateway.statistics.rejected == {"hello-timeout": 1}


def test_authenticated_connections_alone_count_against_max_connections() -> None:
    with LoopbackGroup(2, max_payload=512, token=b"secret", max_connections=2) as group:
        gateway = group.gateway
        assert gateway is not None
        silent = [_connect(group.address) for _ in range(5)]
        try:
            held = [GatewayClient(group.address, token=b"secret", timeout=30) for _ in range(2)]
            try:
                with pytest.raises(GatewayError, match="too many connections"):
                    GatewayClient(group.address, token=b"secret", timeout=30)
            finally:
                for c in held:
                    c.close()
            stats = gateway.statistics
            assert wait_for(lambda: stats.open_connections == stats.authenticating, 10)
            with GatewayClient(group.address, token=b"secret", timeout=30) as client:
                assert send_rows(client, "s", 3, 0, [b"x"]) == 1
        finally:
            for sock in silent:
                sock.close()
        assert wait_for(lambda: gateway.statistics.open_connections == 0, 10)
    assert gateway.statistics.rejected == {"connections": 1}


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"hello_timeout": 0.0}, "hello_timeout must be > 0"),
        ({"hello_timeout": float("nan")}, "hello_timeout must be > 0"),
        ({"max_unauthenticated": 0}, "max_unauthenticated must be >= 1"),
    ],
)
def test_bad_bounds_are_refused(options: dict[str, float], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        Gateway(object(), **options)  # type: ignore[arg-type]


class _NeverDelivers:
    """A node that takes broadcasts and never delivers them."""

    pid = 1

    def __init__(self) -> None:
        self.broadcasts = 0

    def broadcast(self, payload: bytes) -> tuple[int, int]:
        self.broadcasts += 1
        return (1, self.broadcasts)

    def __aiter__(self) -> _NeverDelivers:
        return self

    async def __anext__(self) -> object:
        await trio.sleep_forever()


def test_a_closed_connection_leaves_nothing_waiting_for_its_acknowledgements() -> None:
    node = _NeverDelivers()

    def write_and_leave(address: str) -> None:
        with GatewayClient(address, timeout=30) as client:
            for first in range(5):
                client.send(encode_event("s", 1, 0, first, [b"x"]))

    async def main() -> None:
        gateway = Gateway(node, hello_timeout=5.0)  # type: ignore[arg-type]
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                address = await nursery.start(gateway.run)
                await trio.to_thread.run_sync(write_and_leave, address)
                stats = gateway.statistics
                while not (stats.events == 5 and stats.open_connections == 0):
                    await trio.sleep(0.01)
                assert gateway._pending == {}
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert node.broadcasts == 5
