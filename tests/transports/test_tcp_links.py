"""The outgoing streams of the TCP node (real loopback sockets):
frames written directly and frames queued behind a full socket buffer reach
the peer complete and in order; frames wait for a peer that refuses
connections until it listens; a full queue drops and counts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from epto.transports._trio.tcp_config import TcpNodeConfig
from epto.transports._trio.tcp_framing import FrameReader, pack_frames
from epto.transports._trio.tcp_links import PeerLinks

COUNTS = ("sent", "dropped", "connects", "connect_failures")


async def read_frames(stream: trio.SocketStream, want: int) -> list[bytes]:
    reader = FrameReader(max_frame=1 << 20, min_frame=1)
    frames: list[bytes] = []
    while len(frames) < want:
        chunk = await stream.receive_some(1 << 16)
        assert chunk, "stream ended early"
        reader.feed(chunk)
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    return frames


def links_for(
    address: str,
    nursery: trio.Nursery,
    counts: dict[str, int],
    send_queue: int = 10_000,
    reconnect_interval: float = 0.05,
) -> PeerLinks:
    config = TcpNodeConfig(send_queue=send_queue, reconnect_interval=reconnect_interval)

    def spawn(fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        nursery.start_soon(fn, *args)

    return PeerLinks(config, {2: address}.get, counts, lambda dest: [b"hello"], spawn)


@pytest.mark.trio
async def test_frames_arrive_in_order_past_a_full_socket_buffer() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    counts = dict.fromkeys(COUNTS, 0)
    # 200 frames of 64 KiB: far more than loopback socket buffers hold, so
    # direct writes fill the buffer and the rest waits in the queue.
    frames = [bytes([i % 256]) * 65_536 for i in range(200)]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            links = links_for(f"127.0.0.1:{port}", nursery, counts)
            links.send(2, frames[:1])  # opens the stream (queued: not connected yet)
            stream = await listeners[0].accept()
            while counts["sent"] < 1:
                await trio.sleep(0.001)
            for i in range(1, len(frames), 10):
                links.send(2, frames[i : i + 10])
            got = await read_frames(stream, len(frames) + 1)
            nursery.cancel_scope.cancel()
    await stream.aclose()
    for listener in listeners:
        await listener.aclose()
    assert got[0] == b"hello"
    assert got[1:] == frames
    assert counts["sent"] == len(frames)
    assert counts["dropped"] == 0
    assert counts["connects"] == 1


@pytest.mark.trio
async def test_a_full_queue_drops_and_counts() -> None:
    counts = dict.fromkeys(COUNTS, 0)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            # No stream yet (the task has not run): everything is queued, up
            # to send_queue frames; the rest is dropped.
            links = links_for("127.0.0.1:1", nursery, counts, send_queue=5)
            links.send(2, [b"a"] * 3)
            links.send(2, [b"b"] * 4)
            assert counts["dropped"] == 2
            links.send(2, [b"c"], count_drops=False)
            assert counts["dropped"] == 2
            # Port 1 refuses: the queued frames wait for a stream, and
            # nothing more is dropped.
            while counts["connect_failures"] < 2:
                await trio.sleep(0.001)
            links.send(2, [b"d"])
            nursery.cancel_scope.cancel()
    assert counts["dropped"] == 2 + 1
    assert counts["sent"] == 0


@pytest.mark.trio
async def test_frames_wait_for_a_peer_that_refuses_until_it_listens() -> None:
    # A bound socket that does not listen refuses connections; once it
    # listens, the same address accepts them.
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    counts = dict.fromkeys(COUNTS, 0)
    frames = [b"frame %d" % i for i in range(30)]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            links = links_for(f"127.0.0.1:{port}", nursery, counts)
            links.send(2, frames[:10])
            while counts["connect_failures"] < 2:
                await trio.sleep(0.001)
            links.send(2, frames[10:20])
            sock.listen()
            listener = trio.SocketListener(sock)
            stream = await listener.accept()
            links.send(2, frames[20:])
            got = await read_frames(stream, 1 + len(frames))
            nursery.cancel_scope.cancel()
    await stream.aclose()
    await listener.aclose()
    assert got == [b"hello", *frames]
    assert counts["dropped"] == 0
    assert counts["connects"] == 1
    assert counts["connect_failures"] >= 2


@pytest.mark.trio
async def test_a_peer_that_left_the_view_is_forgotten() -> None:
    counts = dict.fromkeys(COUNTS, 0)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            links = links_for("127.0.0.1:1", nursery, counts, reconnect_interval=0.01)
            links.send(2, [b"a"] * 3)
            while counts["connect_failures"] < 2:
                await trio.sleep(0.001)
            assert counts["dropped"] == 0
            links.forget(2)
            assert counts["dropped"] == 3
            # No more attempts while nothing is sent to it (ten intervals).
            failures = counts["connect_failures"]
            await trio.sleep(0.1)
            assert counts["connect_failures"] <= failures + 1
            # Something new for it: attempts resume.
            links.send(2, [b"b"])
            while counts["connect_failures"] < failures + 2:
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()
    assert counts["dropped"] == 3
    assert counts["sent"] == 0


def test_pack_frames_round_trips_through_the_reader() -> None:
    frames = [b"x" * n for n in (1, 5, 300, 70_000)]
    data = pack_frames(frames)
    reader = FrameReader(max_frame=1 << 20, min_frame=1)
    out: list[bytes] = []
    for i in range(0, len(data), 7):  # fed in small pieces
        reader.feed(data[i : i + 7])
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert out == frames
    assert reader.pending() == 0


@pytest.mark.trio
async def test_link_delays_hold_every_frame_and_keep_the_order() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    counts = dict.fromkeys(COUNTS, 0)
    config = TcpNodeConfig(link_delays={2: 0.2})
    arrivals: list[tuple[bytes, float]] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            def spawn(fn: Callable[..., Awaitable[None]], *args: Any) -> None:
                nursery.start_soon(fn, *args)

            links = PeerLinks(config, {2: f"127.0.0.1:{port}"}.get, counts, lambda d: [], spawn)
            sent_at = {}
            for i in range(5):
                frame = b"frame %d" % i
                sent_at[frame] = trio.current_time()
                links.send(2, [frame])
                await trio.sleep(0.03)
            stream = await listeners[0].accept()
            reader = FrameReader(max_frame=1 << 20, min_frame=1)
            while len(arrivals) < 5:
                chunk = await stream.receive_some(1 << 16)
                reader.feed(chunk)
                while (frame := reader.next_frame()) is not None:
                    arrivals.append((frame, trio.current_time()))
            nursery.cancel_scope.cancel()
    await stream.aclose()
    for listener in listeners:
        await listener.aclose()
    assert [frame for frame, _ in arrivals] == [b"frame %d" % i for i in range(5)]
    for frame, at in arrivals:
        assert at - sent_at[frame] >= 0.2
    assert counts["sent"] == 5


@pytest.mark.parametrize("delay", [-0.001, float("nan"), float("inf")])
def test_link_delays_are_finite_and_not_negative(delay: float) -> None:
    from epto import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"link_delays\[3\]"):
        TcpNodeConfig(link_delays={3: delay})


@pytest.mark.trio
async def test_a_link_forgotten_while_it_connects_waits_for_the_next_frames() -> None:
    # The queue can empty while the stream is being opened (the peer left the
    # view meanwhile): the sender must not read the queue's head then.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    counts = dict.fromkeys(COUNTS, 0)
    config = TcpNodeConfig(send_queue=100, reconnect_interval=0.05)
    links: PeerLinks

    def hello(dest: int) -> list[bytes]:
        links.forget(dest)  # runs inside the connection attempt
        return [b"hello"]

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            def spawn(fn: Callable[..., Awaitable[None]], *args: Any) -> None:
                nursery.start_soon(fn, *args)

            links = PeerLinks(config, {2: f"127.0.0.1:{port}"}.get, counts, hello, spawn)
            links.send(2, [b"lost"])
            stream = await listeners[0].accept()
            while counts["connects"] < 1:
                await trio.sleep(0.001)
            links.send(2, [b"after"])
            got = await read_frames(stream, 2)
            nursery.cancel_scope.cancel()
    await stream.aclose()
    for listener in listeners:
        await listener.aclose()
    assert got == [b"hello", b"after"]
    assert counts["dropped"] == 1
