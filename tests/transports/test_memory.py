"""The conformance suite over the in-memory hub (frames as bytes, as on a socket)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from epto.transports.memory import MemoryHub, MemoryNode

from .conformance import SCENARIOS, Group, Transport, trio_group


class MemoryTransport(Transport):
    name = "memory"

    def group(self) -> contextlib.AbstractAsyncContextManager[Group]:
        hub = MemoryHub()

        async def garbage(node: Any, datagrams: list[bytes]) -> None:
            for data in datagrams:
                hub.deliver(node.address, data)

        return trio_group(lambda config: MemoryNode(hub, config), garbage, lambda pid: f"mem-{pid}")


@pytest.mark.trio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_memory_conformance(scenario: Callable[[Transport], Awaitable[None]]) -> None:
    await scenario(MemoryTransport())
