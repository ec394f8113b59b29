"""Kill the token holder of a token-ring group on TCP loopback, in one process.

    .venv/bin/python scripts/token_ring_holder_kill.py [--members 3] [--runs 12] [--hold 1.0]

Each run starts ``members`` TokenRingNodes (default timeouts, ``token_hold``
= ``--hold``, ``token_timeout`` = 2 x members x hold), waits a varying number
of token visits, aborts the member that has just taken the token, has every
survivor broadcast one message, and prints the time from the abort until
every survivor delivered all of them, next to the bound of docs/token-ring.md
(*Killing the token holder*). Figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import socket
from contextlib import AsyncExitStack

import trio
from epto.transports._ports import free_ports
from epto.transports.trio_tcp import TokenRingNode

from epto.endpoint import NodeConfig
from epto.tokenring import TokenRingConfig


async def holders(nodes: dict[int, TokenRingNode]) -> set[int]:
    return {pid for pid, node in nodes.items() if node.statistics().holds_token}


async def one_run(run: int, members: int, ring: TokenRingConfig) -> float:
    ports = free_ports(members, socket.SOCK_STREAM)
    book = {
        pid: f"127.0.0.1:{port}" for pid, port in zip(range(1, members + 1), ports, strict=True)
    }
    async with AsyncExitStack() as stack:
        nodes = {}
        for pid, address in book.items():
            config = NodeConfig(
                mode="token-ring",
                pid=pid,
                bind=address,
                members=book,
                tokenring=ring,
                seed=pid + 100 * run,
            )
            nodes[pid] = await stack.enter_async_context(TokenRingNode(config))
        await trio.sleep((run % 4) * ring.token_hold + ring.token_hold / 2)
        before = await holders(nodes)
        while True:  # the member that takes the token next
            now = await holders(nodes)
            fresh = now - before
            if fresh:
                break
            before = now
            await trio.sleep(0.005)
        victim = min(fresh)
        nodes[victim].abort()
        killed = trio.current_time()
        survivors = [pid for pid in nodes if pid != victim]
        sent = {nodes[pid].broadcast(b"after") for pid in survivors}
        done: dict[int, float] = {}

        async def collect(pid: int) -> None:
            got = set()
            async for delivery in nodes[pid]:
                got.add(delivery.event.id)
                if got >= sent:
                    done[pid] = trio.current_time() - killed
                    return

        async with trio.open_nursery() as nursery:
            for pid in survivors:
                nursery.start_soon(collect, pid)
        for node in nodes.values():
            node.abort()
    return max(done.values())


async def main(members: int, runs: int, hold: float) -> None:
    ring = TokenRingConfig(token_hold=hold, token_timeout=max(1.0, 2 * members * hold))
    k = ring.effective_k(members, members - 1)
    bound = ring.suspect_timeout + ring.heartbeat_interval + ring.change_timeout
    bound += (k - 1) * ring.token_hold
    times = [await one_run(run, members, ring) for run in range(runs)]
    print(f"members {members}, k {k}, hold {hold} s: bound R = {bound:.2f} s")
    print("every survivor delivered after: " + ", ".join(f"{t:.2f}" for t in times) + " s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--hold", type=float, default=1.0)
    a = parser.parse_args()
    trio.run(main, a.members, a.runs, a.hold)
