"""The conformance suite over the token ring's trio TCP node on 127.0.0.1.

The scenarios are the datagram drivers'; what differs is how a token-ring
group forms and how hostile bytes reach a stream node:

* members are known at bootstrap (``members``), and a newcomer joins through
  ``contacts`` (the group admits it by a view change; the group waits for it);
* EpTO's protocol parameters do not apply; frames use the stream limits (the
  scenario's datagram ``limits`` are not passed on). The failure detector is
  given 1 s instead of 0.3 s: all members share this one process's event
  loop, and the connection storm of their start would otherwise make them
  suspect each other for a while;
* every garbage frame arrives length-prefixed on a connection of its own, as
  the first frame of that stream: refused by the node's endpoint and counted,
  and the stream is closed. A frame longer than a stream frame may be is the
  framing's to refuse (``first-frame-too-large``), and so is one shorter
  than a frame header (``bad-length``, a datagram's ``truncated``).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
import trio
from epto.transports import NodeConfig
from epto.transports.trio_node import open_node

import epto
from epto.endpoint import parse_host_port
from epto.tokenring import TokenRingConfig

from .conformance import SCENARIOS, WAIT, TrioGroup
from .conformance import Transport as _Transport
from .processes import free_ports

LENGTH = struct.Struct(">I")
RING = TokenRingConfig(suspect_timeout=1.0, change_timeout=0.8)


class TokenRingGroup(TrioGroup):
    """Token-ring members on TCP."""

    def __init__(self, nursery: trio.Nursery) -> None:
        super().__init__(nursery, open_node, self._garbage_streams)

    async def start_all(self, pids: list[int], config: epto.Config, **fields: Any) -> None:
        fields.pop("limits", None)
        ports = free_ports(len(pids), socket.SOCK_STREAM)
        binds = {pid: f"127.0.0.1:{port}" for pid, port in zip(pids, ports, strict=True)}
        joining = bool(self.live)
        contacts = {p: self.address(p) for p in self.live}
        for pid in pids:
            where: dict[str, Any] = {"contacts": contacts} if joining else {"members": binds}
            config = NodeConfig(
                pid=pid, bind=binds[pid], mode="token-ring", seed=pid, tokenring=RING, **where
            )
            await self.start(pid, attrs.evolve(config, **fields))
        if joining:

            def joined() -> bool:
                return all(
                    pid in self.node(other).statistics().members
                    for pid in pids
                    for other in self.live
                )

            await self.wait_until(joined, f"{pids} admitted to the view")

    def statistics(self, pid: int) -> Any:
        s = self.node(pid).statistics()
        return SimpleNamespace(
            delivered=s.delivered,
            rejected=s.rejected,
            members=len(s.members),
            holes_detected=_holes(self.sequences[pid]),
        )

    async def _garbage_streams(self, node: Any, frames: list[bytes]) -> None:
        host, port = parse_host_port(node.address)
        for data in frames:
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(LENGTH.pack(len(data)) + data)
                    with trio.move_on_after(WAIT):
                        while await stream.receive_some(4096):
                            pass


def _holes(sequence: list[epto.EventId]) -> int:
    """Sequence numbers skipped in some source's delivered events."""
    last: dict[int, int] = {}
    holes = 0
    for source, seq in sequence:
        previous = last.get(source)
        if previous is not None and seq > previous + 1:
            holes += seq - previous - 1
        last[source] = max(seq, previous if previous is not None else seq)
    return holes


@contextlib.asynccontextmanager
async def _ring_group() -> AsyncIterator[TokenRingGroup]:
    async with trio.open_nursery() as nursery:
        group = TokenRingGroup(nursery)
        try:
            yield group
        finally:
            await group.close()


class TokenRingTcpTransport(_Transport):
    name = "trio-tcp-token-ring"
    faults = frozenset({"bad-magic", "wrong-group", "bad-length"})
    """A frame shorter than a header is the framing's ``bad-length`` on a
    stream (a datagram's ``truncated``)."""
    large_group = 10
    """Twenty token-ring members in this one process's event loop starve
    each other's failure detectors when the machine is busy: they took 14 to
    23 s with three CPU-bound processes on two cores, and more than the
    suite's 30 s bound under heavier load (docs/token-ring.md, "Limits")."""

    def group(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return _ring_group()


@pytest.mark.trio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_trio_tcp_token_ring_conformance(
    scenario: Callable[[_Transport], Awaitable[None]],
) -> None:
    await scenario(TokenRingTcpTransport())
