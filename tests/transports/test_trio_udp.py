"""The conformance suite over real UDP sockets on 127.0.0.1 with trio."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from epto.transports.trio_udp import UdpNode

from epto.endpoint import parse_host_port

from .conformance import SCENARIOS, Group, Transport, trio_group


class TrioUdpTransport(Transport):
    name = "trio-udp"

    def group(self) -> contextlib.AbstractAsyncContextManager[Group]:
        async def garbage(node: Any, datagrams: list[bytes]) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                for data in datagrams:
                    sock.sendto(data, parse_host_port(node.address))

        return trio_group(UdpNode, garbage)


@pytest.mark.trio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_trio_udp_conformance(scenario: Callable[[Transport], Awaitable[None]]) -> None:
    await scenario(TrioUdpTransport())
