"""The conformance suite over ZeroMQ (tcp on 127.0.0.1)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import zmq
from epto.transports.zmq_node import ZmqNode, endpoint

from .conformance import SCENARIOS, Group, Transport, thread_group


def push_garbage(node: Any, datagrams: list[bytes]) -> None:
    sock = zmq.Context.instance().socket(zmq.PUSH)
    try:
        sock.setsockopt(zmq.LINGER, 5000)
        sock.connect(endpoint(node.address))
        for data in datagrams:
            sock.send(data)
    finally:
        sock.close()  # lingers until sent (bounded by LINGER)


class ZmqTransport(Transport):
    name = "zmq"

    def group(self) -> contextlib.AbstractAsyncContextManager[Group]:
        return thread_group(ZmqNode, push_garbage)


@pytest.mark.trio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_zmq_conformance(scenario: Callable[[Transport], Awaitable[None]]) -> None:
    await scenario(ZmqTransport())
