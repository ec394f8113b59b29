"""Outgoing streams from a crowded event loop (real loopback sockets).

Many members in one process share one trio loop; when a pass of that loop
takes longer than ``connect_timeout`` (tens of members, or a process starved
of CPU), a connection that the kernel completed at once was still cancelled
by its deadline, every attempt again, so the stream never came up and what
waited for the peer never left (docs/token-ring.md, *Limits*). Here a task
that blocks the loop for longer than the connect timeout on every pass
stands for the crowd: the stream must still come up, through attempts whose
deadline backs off. And attempts to a peer that does not listen back off
too, instead of one every ``reconnect_interval`` for ever.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from epto.transports._trio.tcp_config import TcpNodeConfig
from epto.transports._trio.tcp_links import MAX_RECONNECT_BACKOFF, PeerLinks

from .test_tcp_links import COUNTS, read_frames

BLOCK = 0.15
"""Seconds every pass of the loop is blocked (the crowd)."""


def links(address: str, nursery: trio.Nursery, counts: dict[str, int], **fields: Any) -> PeerLinks:
    config = TcpNodeConfig(**fields)

    def spawn(fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        nursery.start_soon(fn, *args)

    return PeerLinks(config, {2: address}.get, counts, lambda dest: [b"hello"], spawn)


async def crowd() -> None:
    """Block the loop for ``BLOCK`` seconds on every pass (as many busy
    members would), yielding in between."""
    while True:
        time.sleep(BLOCK)  # blocking on purpose: the loop's pass takes this long
        await trio.lowlevel.checkpoint()


@pytest.mark.trio
async def test_the_stream_comes_up_when_a_loop_pass_outlasts_the_connect_timeout() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    counts = dict.fromkeys(COUNTS, 0)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(crowd)
            sender = links(
                f"127.0.0.1:{port}",
                nursery,
                counts,
                connect_timeout=BLOCK / 3,
                reconnect_interval=0.01,
            )
            sender.send(2, [b"a", b"b"])
            stream = await listeners[0].accept()
            got = await read_frames(stream, 3)
            nursery.cancel_scope.cancel()
    await stream.aclose()
    for listener in listeners:
        await listener.aclose()
    assert got == [b"hello", b"a", b"b"]
    assert counts["connects"] == 1
    assert counts["sent"] == 2


@pytest.mark.trio
async def test_attempts_to_a_peer_that_does_not_listen_back_off() -> None:
    # A port nobody listens on: every attempt is refused at once.
    probe = trio.socket.socket()
    await probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    counts = dict.fromkeys(COUNTS, 0)
    interval = 0.01
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            sender = links(f"127.0.0.1:{port}", nursery, counts, reconnect_interval=interval)
            sender.send(2, [b"a"])
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()
    probe.close()
    # Waits of 1, 2, 4, 8, then 16 intervals: at most 4 + 1.0 / 0.16 + 1
    # attempts in one second (a fixed interval made about a hundred).
    most = 4 + 1.0 / (interval * MAX_RECONNECT_BACKOFF) + 1
    assert 2 <= counts["connect_failures"] <= most
    assert counts["connects"] == 0
    assert counts["dropped"] == 0  # the frame still waits for the peer
