"""The conformance suite over the in-memory hub, with and without a codec."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from epto.transports.memory import MemoryHub, MemoryNode

from .conformance import SCENARIOS, Group, Transport, trio_group


class MemoryTransport(Transport):
    def __init__(self, *, with_codec: bool) -> None:
        self.name = "memory+codec" if with_codec else "memory"
        self.with_codec = with_codec

    def group(self) -> contextlib.AbstractAsyncContextManager[Group]:
        hub = MemoryHub(encode=self.with_codec)

        async def garbage(node: Any, datagrams: list[bytes]) -> None:
            for data in datagrams:
                hub.deliver(node.address, data)

        return trio_group(lambda config: MemoryNode(hub, config), garbage, lambda pid: f"mem-{pid}")


@pytest.mark.trio
@pytest.mark.parametrize("with_codec", [False, True], ids=["by-reference", "codec"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_memory_conformance(
    scenario: Callable[[Transport], Awaitable[None]], with_codec: bool
) -> None:
    await scenario(MemoryTransport(with_codec=with_codec))
