"""The state transfer under a group key (services/_rsm_channel.py):
replicas with the same key transfer snapshots, digests and latest cuts over
sealed connections; a client with another key or none gets nothing and the
server counts why, without taking a snapshot; a sealed client against a plain
server fails cleanly; a byte flipped in transit, a hostile record length and
a truncated record are refused. Real loopback sockets, every wait bounded by
``trio.fail_after``."""

from __future__ import annotations

import functools
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from epto.services._rsm_channel import MAGIC, MAX_RECORD, SealedStream, TransferKey
from epto.services._rsm_transfer import (
    TransferError,
    TransferServer,
    fetch_digest,
    fetch_latest,
    fetch_snapshot,
)

from epto import GroupKey
from epto.endpoint import parse_host_port
from epto.rsm import Snapshot

pytest.importorskip("cryptography")

KEY = GroupKey(key_id=1, secret=bytes(range(32)))
SAME_ID_OTHER_SECRET = GroupKey(key_id=1, secret=bytes(32))
OTHER_ID = GroupKey(key_id=2, secret=bytes(range(32)))
# Four full records and a short one: the chunking and the last record.
SNAPSHOT = Snapshot(
    cut=(40, 3, 7), applied=12, digest=bytes(range(16)), state=bytes(range(256)) * 1024 + b"tail"
)
WAIT = 10.0


class Replica:
    """What a transfer server reads of its replica, with the snapshots taken counted."""

    def __init__(self) -> None:
        self.snapshots_taken = 0

    async def snapshot(self) -> Snapshot:
        self.snapshots_taken += 1
        return SNAPSHOT

    def server(self, key: GroupKey | None, **options: Any) -> TransferServer:
        options = {"wait": 1.0, "send_timeout": 5.0, **options}
        return TransferServer(
            snapshot=self.snapshot,
            ready=lambda: True,
            cut=lambda: SNAPSHOT.cut,
            digest_at=lambda cut: SNAPSHOT.digest if cut == SNAPSHOT.cut else None,
            key=None if key is None else TransferKey(key),
            **options,
        )


@asynccontextmanager
async def serving(handle: Callable[[trio.SocketStream], Awaitable[object]]) -> AsyncIterator[str]:
    """A TCP server on 127.0.0.1 running ``handle`` per connection; its address."""
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        yield f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


async def _counted(server: TransferServer, expected: dict[str, int]) -> None:
    """Until the server counted ``expected`` (its handler may still be closing)."""
    while server.refused != expected:
        await trio.sleep(0.01)


async def _all_three(address: str, key: GroupKey | None) -> None:
    """Each request once; every one must fail."""
    transfer_key = None if key is None else TransferKey(key)
    with pytest.raises(TransferError):
        await fetch_snapshot(address, None, timeout=WAIT, max_bytes=1 << 20, key=transfer_key)
    with pytest.raises(TransferError):
        await fetch_digest(address, SNAPSHOT.cut, timeout=WAIT, key=transfer_key)
    with pytest.raises(TransferError):
        await fetch_latest(address, timeout=WAIT, key=transfer_key)


@pytest.mark.trio
@pytest.mark.parametrize("cipher", ["aes-256-gcm", "chacha20-poly1305"])
async def test_replicas_with_the_same_key_transfer_over_sealed_connections(cipher: str) -> None:
    key = GroupKey(key_id=7, secret=bytes(range(32)), cipher=cipher)  # type: ignore[arg-type]
    replica = Replica()
    server = replica.server(key)
    transfer_key = TransferKey(key)
    with trio.fail_after(WAIT):
        async with serving(server.handle) as address:
            fetched = await fetch_snapshot(
                address, (1, 0, 0), timeout=WAIT, max_bytes=1 << 20, key=transfer_key
            )
            assert fetched == SNAPSHOT
            assert (
                await fetch_digest(address, SNAPSHOT.cut, timeout=WAIT, key=transfer_key)
                == SNAPSHOT.digest
            )
            assert await fetch_digest(address, (1, 0, 0), timeout=WAIT, key=transfer_key) is None
            assert await fetch_latest(address, timeout=WAIT, key=transfer_key) == (
                SNAPSHOT.cut,
                SNAPSHOT.digest,
            )
    assert server.refused == {} and server.served == 1 and replica.snapshots_taken == 1


@pytest.mark.trio
@pytest.mark.parametrize(
    ("client_key", "reason"),
    [(SAME_ID_OTHER_SECRET, "bad-tag"), (OTHER_ID, "unknown-key"), (None, "bad-magic")],
    ids=["other-secret", "other-key-id", "no-key"],
)
async def test_a_client_without_the_key_gets_nothing_and_is_counted(
    client_key: GroupKey | None, reason: str
) -> None:
    replica = Replica()
    server = replica.server(KEY)
    with trio.fail_after(WAIT):
        async with serving(server.handle) as address:
            await _all_three(address, client_key)
            await _counted(server, {reason: 3})
    # No snapshot taken for it: the request is read only from a record that
    # authenticated.
    assert server.served == 0 and replica.snapshots_taken == 0


@pytest.mark.trio
async def test_a_sealed_client_against_a_plain_server_fails_cleanly() -> None:
    replica = Replica()
    server = replica.server(None)
    with trio.fail_after(WAIT):
        async with serving(server.handle) as address:
            await _all_three(address, KEY)
            # The magic read as a plain length is far above a request's 4 KiB.
            await _counted(server, {"bad-request": 3})
            # The plain protocol still works: same bytes as before.
            assert await fetch_latest(address, timeout=WAIT) == (SNAPSHOT.cut, SNAPSHOT.digest)
    assert replica.snapshots_taken == 0


async def _flipping_proxy(
    upstream: str, direction: str, at: int, downstream: trio.SocketStream
) -> None:
    """Relays one connection to ``upstream``, flipping the byte at offset
    ``at`` of ``direction`` (``c2s`` or ``s2c``)."""
    host, port = parse_host_port(upstream)

    async def pump(src: trio.SocketStream, dst: trio.SocketStream, flips: bool) -> None:
        offset = 0
        try:
            while chunk := await src.receive_some(1 << 16):
                if flips and offset <= at < offset + len(chunk):
                    i = at - offset
                    chunk = chunk[:i] + bytes((chunk[i] ^ 0x01,)) + chunk[i + 1 :]
                offset += len(chunk)
                await dst.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        nursery.cancel_scope.cancel()  # one side is done: close both

    async with (
        downstream,
        await trio.open_tcp_stream(host, port) as server,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(pump, downstream, server, direction == "c2s")
        nursery.start_soon(pump, server, downstream, direction == "s2c")


@pytest.mark.trio
@pytest.mark.parametrize(
    ("direction", "at", "error", "reason"),
    [
        ("none", 0, None, None),
        ("c2s", 30, "closed|Reset", "bad-tag"),  # the request's ciphertext
        ("c2s", 25, "closed|Reset", "bad-length"),  # the request record's length
        ("s2c", 30, "failed authentication", None),  # the header's ciphertext
        ("s2c", 200_000, "failed authentication", None),  # deep in the state
        ("s2c", 4, "does not speak", None),  # the server's magic
    ],
)
async def test_a_byte_flipped_in_transit_is_refused(
    direction: str, at: int, error: str | None, reason: str | None
) -> None:
    replica = Replica()
    server = replica.server(KEY)
    key = TransferKey(KEY)
    with trio.fail_after(WAIT):
        async with serving(server.handle) as address:
            proxy = functools.partial(_flipping_proxy, address, direction, at)
            async with serving(proxy) as through:
                if error is None:
                    fetched = await fetch_snapshot(
                        through, None, timeout=WAIT, max_bytes=1 << 20, key=key
                    )
                    assert fetched == SNAPSHOT
                    return
                with pytest.raises(TransferError, match=error):
                    await fetch_snapshot(through, None, timeout=WAIT, max_bytes=1 << 20, key=key)
                if reason is not None:
                    await _counted(server, {reason: 1})
                    assert replica.snapshots_taken == 0


async def _handshake(address: str, key: GroupKey) -> trio.SocketStream:
    """A raw connection that has said the client's hello and read the server's."""
    host, port = parse_host_port(address)
    stream = await trio.open_tcp_stream(host, port)
    await stream.send_all(MAGIC + bytes((key.key_id,)) + bytes(16))
    hello = b""
    while len(hello) < len(MAGIC) + 16:
        hello += await stream.receive_some(len(MAGIC) + 16 - len(hello))
    assert hello.startswith(MAGIC)
    return stream


async def _closed_by_peer(stream: trio.SocketStream) -> None:
    try:
        while await stream.receive_some(1 << 16):
            pass
    except (trio.BrokenResourceError, OSError):
        pass  # a reset: closed with our bytes unread


@pytest.mark.trio
async def test_a_hostile_record_length_is_refused_without_allocating_it() -> None:
    server = Replica().server(KEY)
    with trio.fail_after(WAIT):
        async with serving(server.handle) as address:
            tracemalloc.start()
            try:
                async with await _handshake(address, KEY) as stream:
                    await stream.send_all(b"\xff\xff\xff\xff" + bytes(64))
                    await _closed_by_peer(stream)
                    await _counted(server, {"bad-length": 1})
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # The server reads at most 256 KiB at a time; 4 GiB asked of recv
            # would show here (or as a MemoryError).
            assert peak < 4 << 20
            async with await _handshake(address, KEY) as stream:
                await stream.send_all((MAX_RECORD + 1).to_bytes(4, "big"))
                await _closed_by_peer(stream)
                await _counted(server, {"bad-length": 2})
            async with await _handshake(address, KEY) as stream:
                await stream.send_all((100).to_bytes(4, "big") + bytes(50))
                await stream.send_eof()  # a record cut short
                await _closed_by_peer(stream)
                await _counted(server, {"bad-length": 2, "truncated": 1})


async def _hostile_server(answer: bytes, stream: trio.SocketStream) -> None:
    """Takes a client's hello and answers a server's, then ``answer``."""
    async with stream:
        hello = b""
        while len(hello) < len(MAGIC) + 17:
            hello += await stream.receive_some(len(MAGIC) + 17 - len(hello))
        await stream.send_all(MAGIC + bytes(16) + answer)
        await stream.send_eof()
        await _closed_by_peer(stream)


@pytest.mark.trio
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"\xff\xff\xff\xff", "a record of 4294967295 bytes"),
        # A plain header where a record belongs: taken as a record, refused.
        (b"\x00\x00\x00\x02{}", "a record of 2 bytes"),
        ((40).to_bytes(4, "big") + bytes(40), "failed authentication"),
        ((40).to_bytes(4, "big") + bytes(10), "closed after 10 bytes"),
    ],
    ids=["huge", "plain", "forged", "truncated"],
)
async def test_a_sealed_client_takes_nothing_from_a_server_without_the_key(
    answer: bytes, error: str
) -> None:
    with trio.fail_after(WAIT):
        async with serving(functools.partial(_hostile_server, answer)) as address:
            with pytest.raises(TransferError, match=error):
                await fetch_latest(address, timeout=WAIT, key=TransferKey(KEY))


@pytest.mark.trio
async def test_the_channel_relays_bytes_in_records_of_at_most_one_chunk() -> None:
    # The layer alone, over an in-memory stream pair: what one end sends in
    # one call arrives whole at the other, in as many records as it takes.
    left, right = trio.testing.memory_stream_pair()
    key = TransferKey(KEY)
    data = bytes(range(256)) * 700
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            ends: list[SealedStream] = []

            async def server() -> None:
                ends.append(await SealedStream.server(right, key))

            nursery.start_soon(server)
            client = await SealedStream.client(left, key)
        await client.send_all(data)
        await client.send_all(b"")  # nothing sent: no empty record
        await client.aclose()
        received = b""
        while chunk := await ends[0].receive_some(1 << 20):
            assert len(chunk) <= 1 << 16
            received += chunk
        assert received == data


@pytest.mark.trio
@pytest.mark.parametrize("key", [None, KEY], ids=["plain", "sealed"])
async def test_a_peer_that_says_nothing_frees_its_slot_after_the_request_timeout(
    key: GroupKey | None,
) -> None:
    replica = Replica()
    server = replica.server(
        key, wait=60.0, send_timeout=300.0, max_connections=1, request_timeout=0.2
    )
    with trio.fail_after(WAIT):
        async with serving(server.handle) as address:
            host, port = parse_host_port(address)
            async with await trio.open_tcp_stream(host, port) as silent:
                await _closed_by_peer(silent)
            await _counted(server, {"request-timeout": 1})
            # The one slot is free again: an honest request is served.
            transfer_key = None if key is None else TransferKey(key)
            latest = await fetch_latest(address, timeout=WAIT, key=transfer_key)
            assert latest == (SNAPSHOT.cut, SNAPSHOT.digest)
    assert replica.snapshots_taken == 0
