"""A whole token-ring group started again on its data directories, over TCP
in one process: every member finds an earlier incarnation of itself there,
so none founds a group (they all ask to be admitted, and nobody can); with
``NodeConfig.fresh_group`` they found a new group knowingly and
deliver again. A group of one founds its group again without the flag."""

from __future__ import annotations

import socket
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio
from epto.transports._ports import free_ports
from epto.transports.trio_tcp import TokenRingNode

from epto.endpoint import NodeConfig

PIDS = (1, 2, 3)


async def _wait_until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.mark.trio
async def test_a_whole_group_restarted_founds_a_new_group_only_when_told(tmp_path: Path) -> None:
    ports = free_ports(len(PIDS), socket.SOCK_STREAM)
    members = {p: f"127.0.0.1:{q}" for p, q in zip(PIDS, ports, strict=True)}

    def config(pid: int, fresh_group: bool = False) -> NodeConfig:
        return NodeConfig(
            mode="token-ring",
            pid=pid,
            bind=members[pid],
            members=members,
            data_dir=str(tmp_path),
            fresh_group=fresh_group,
        )

    async with AsyncExitStack() as stack:
        first = [await stack.enter_async_context(TokenRingNode(config(p))) for p in PIDS]
        assert all(n.statistics().role == "core" for n in first)
        for node in first:
            node.abort()
    async with AsyncExitStack() as stack:
        again = [await stack.enter_async_context(TokenRingNode(config(p))) for p in PIDS]
        await trio.sleep(1.0)
        stats = [n.statistics() for n in again]
        assert all(s.role == "joining" and not s.holds_token for s in stats), stats
        assert all(s.delivered == 0 for s in stats)
        for node in again:
            node.abort()
    async with AsyncExitStack() as stack:
        fresh = [await stack.enter_async_context(TokenRingNode(config(p, True))) for p in PIDS]
        assert all(n.statistics().role == "core" for n in fresh)
        eid = fresh[0].broadcast(b"again")
        for node in fresh:
            async for delivery in node:
                assert delivery.event.id == eid
                break
        for node in fresh:
            node.abort()


@pytest.mark.trio
async def test_a_group_of_one_founds_its_group_again(tmp_path: Path) -> None:
    [port] = free_ports(1, socket.SOCK_STREAM)
    cfg = NodeConfig(
        mode="token-ring",
        pid=1,
        bind=f"127.0.0.1:{port}",
        members={1: f"127.0.0.1:{port}"},
        data_dir=str(tmp_path),
    )
    for _ in range(2):
        async with TokenRingNode(cfg) as node:
            assert node.statistics().role == "core"
            node.broadcast(b"x")
            async for _delivery in node:
                break
            node.abort()
