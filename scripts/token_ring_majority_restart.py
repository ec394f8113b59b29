"""A majority of a token-ring group restarted at once, on TCP loopback, in one process.

    .venv/bin/python scripts/token_ring_majority_restart.py [--runs 3] [--members 5] [--down 3]

Each run starts ``members`` TokenRingNodes (default timeouts), each with its
own data directory, has them deliver a little, aborts ``down`` of them (a
crash) and starts them again at once on their directories. Prints, 10 s
later, what every member reports (role, quorum, delivered since the
restart): a restarted member never founds a group of its own, so with
``down`` a majority the group waits, safely (docs/token-ring.md, *A
majority restarted at once*). Then the documented way out: every member
stopped and started with ``fresh_group=True``; prints the time from that
start until a broadcast of every member is delivered at every member.
Figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from contextlib import AsyncExitStack

import trio
from epto.transports._ports import free_ports
from epto.transports.trio_tcp import TokenRingNode, TokenRingNodeConfig


async def _deliver_all(nodes: list[TokenRingNode], wanted: set[tuple[int, int]]) -> None:
    async def one(node: TokenRingNode) -> None:
        left = set(wanted)
        async for delivery in node:
            left.discard(delivery.event.id)
            if not left:
                return

    async with trio.open_nursery() as nursery:
        for node in nodes:
            nursery.start_soon(one, node)


async def one_run(n: int, down: int) -> str:
    pids = list(range(1, n + 1))
    ports = free_ports(n, socket.SOCK_STREAM)
    members = {p: f"127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)}
    root = tempfile.mkdtemp(prefix="epto-majority-")

    def config(pid: int, fresh_group: bool = False) -> TokenRingNodeConfig:
        return TokenRingNodeConfig(
            pid=pid,
            bind=members[pid],
            members=members,
            data_dir=os.path.join(root, str(pid)),
            fresh_group=fresh_group,
        )

    killed = pids[n - down :]
    async with AsyncExitStack() as stack:
        nodes = {p: await stack.enter_async_context(TokenRingNode(config(p))) for p in pids}
        ids = {nodes[p].broadcast(b"before") for p in pids}
        with trio.fail_after(10):
            await _deliver_all(list(nodes.values()), ids)
        for p in killed:
            nodes[p].abort()
        for p in killed:
            nodes[p] = await stack.enter_async_context(TokenRingNode(config(p)))
        base = {p: nodes[p].statistics().delivered for p in pids}
        for p in pids:
            if nodes[p].statistics().role in ("core", "external", "joining"):
                nodes[p].broadcast(b"during")
        await trio.sleep(10.0)
        seen = []
        for p in pids:
            s = nodes[p].statistics()
            seen.append(
                f"{p}:{s.role}{'*' if p in killed else ''}"
                f"/quorum={s.quorum}/+{s.delivered - base[p]}"
            )
        serving = sum(
            1
            for p in killed
            if nodes[p].statistics().role in ("core", "external")
            and nodes[p].statistics().delivered > base[p]
        )
        for node in nodes.values():
            node.abort()
    async with AsyncExitStack() as stack:
        start = time.monotonic()
        fresh = [await stack.enter_async_context(TokenRingNode(config(p, True))) for p in pids]
        ids = {node.broadcast(b"fresh") for node in fresh}
        with trio.fail_after(30):
            await _deliver_all(fresh, ids)
        took = time.monotonic() - start
        for node in fresh:
            node.abort()
    return (
        f"{down} of {n} restarted at once: {serving} of {down} serving after 10 s; "
        f"{' '.join(seen)} (* restarted, +delivered since); "
        f"every member started with fresh_group: all delivered after {took * 1000:.0f} ms"
    )


def main(runs: int, n: int, down: int) -> None:
    for _ in range(runs):
        print(trio.run(one_run, n, down), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--down", type=int, default=3)
    args = parser.parse_args()
    main(args.runs, args.members, args.down)
