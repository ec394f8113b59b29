"""A majority of a token-ring group restarted at once, on TCP loopback, in one process.

    .venv/bin/python scripts/token_ring_majority_restart.py [--runs 3] [--members 5] [--down 3]
        [--durability fsync|write|off] [--dir DIR]

Each run starts ``members`` TokenRingNodes (default timeouts), each with its
own data directory (under ``--dir``, default the system's temporary
directory: put it on the disk to measure), has them deliver a little under
a steady load (every member broadcasts every 20 ms), aborts ``down`` of them
(a crash: nothing more is written) and starts them again at once on their
directories. Prints, for every restarted member, the time from its start to
*ready*: in the view (``core`` or ``external``) and a broadcast of its own,
made at its start, delivered back to it; then the time until a broadcast of
every member made after the restart is delivered at every member. With the
member's vote kept (``--durability fsync``, the default, or ``write``) the
restarted members vote as themselves and the group comes back on its own
(docs/token-ring.md, *A majority restarted at once*); with ``off`` a
majority restart waits for the operator (nothing ready after 10 s).
Figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import tempfile
import time
from contextlib import AsyncExitStack

import trio
from epto.transports._ports import free_ports
from epto.transports.trio_tcp import TokenRingNode

from epto import LocalProtocolError
from epto.endpoint import NodeConfig
from epto.tokenring import TokenRingConfig

WAIT = 10.0


async def one_run(n: int, down: int, durability: str, base: str | None) -> str:
    pids = list(range(1, n + 1))
    ports = free_ports(n, socket.SOCK_STREAM)
    members = {p: f"127.0.0.1:{q}" for p, q in zip(pids, ports, strict=True)}
    root = tempfile.mkdtemp(prefix="epto-majority-", dir=base)
    ring = TokenRingConfig(durability=durability)

    def config(pid: int) -> NodeConfig:
        return NodeConfig(
            mode="token-ring",
            pid=pid,
            bind=members[pid],
            members=members,
            data_dir=os.path.join(root, str(pid)),
            tokenring=ring,
        )

    killed = pids[n - down :]
    nodes: dict[int, TokenRingNode] = {}
    delivered: dict[int, set[tuple[int, int]]] = {p: set() for p in pids}

    async def drain(p: int, node: TokenRingNode) -> None:
        try:
            async for d in node:
                delivered[p].add(d.event.id)
        except Exception:  # an aborted node ends its iteration with an error
            pass

    async def load() -> None:
        i = 0
        while True:
            for p, node in list(nodes.items()):
                if node.statistics().role in ("core", "external"):
                    with contextlib.suppress(LocalProtocolError):  # an aborted node
                        node.broadcast(b"load-%d-%d" % (p, i))
            i += 1
            await trio.sleep(0.02)

    async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
        for p in pids:
            nodes[p] = await stack.enter_async_context(TokenRingNode(config(p)))
            nursery.start_soon(drain, p, nodes[p])
        nursery.start_soon(load)
        await trio.sleep(1.0)
        for p in killed:
            nodes[p].abort()
        start = time.monotonic()
        own: dict[int, tuple[int, int]] = {}
        for p in killed:
            nodes[p] = await stack.enter_async_context(TokenRingNode(config(p)))
            delivered[p] = set()
            nursery.start_soon(drain, p, nodes[p])
            own[p] = nodes[p].broadcast(b"back-%d" % p)
        ready: dict[int, float] = {}
        after: dict[int, tuple[int, int]] = {}
        everyone = math.inf
        while time.monotonic() - start < WAIT and (len(ready) < down or everyone == math.inf):
            await trio.sleep(0.005)
            now = time.monotonic() - start
            for p in killed:
                role = nodes[p].statistics().role
                if p not in ready and role in ("core", "external") and own[p] in delivered[p]:
                    ready[p] = now
            if len(ready) == down and not after:
                after = {p: nodes[p].broadcast(b"after-%d" % p) for p in pids}
            if after and all(set(after.values()) <= delivered[p] for p in pids):
                everyone = now
        resumed = {p: nodes[p].endpoint.resumed for p in killed}  # type: ignore[attr-defined]
        roles = " ".join(f"{p}:{nodes[p].statistics().role}" for p in pids)
        nursery.cancel_scope.cancel()
        for node in nodes.values():
            node.abort()
    times = " ".join(
        f"{p}:{ready[p] * 1000:.0f}ms" if p in ready else f"{p}:not-ready" for p in killed
    )
    every = f"{everyone * 1000:.0f} ms" if everyone != math.inf else f"not within {WAIT:.0f} s"
    return (
        f"{down} of {n} restarted at once (durability={durability}): ready after {times}; "
        f"a broadcast of every member delivered at all {every}; roles {roles}; "
        f"resume: {resumed}"
    )


def main(runs: int, n: int, down: int, durability: str, base: str | None) -> None:
    for _ in range(runs):
        print(trio.run(one_run, n, down, durability, base), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--down", type=int, default=3)
    parser.add_argument("--durability", default="fsync", choices=["fsync", "write", "off"])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    main(args.runs, args.members, args.down, args.durability, args.dir)
