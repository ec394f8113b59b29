"""Restart a token-ring member under its own id, on TCP loopback, in one process.

    .venv/bin/python scripts/token_ring_restart.py [--runs 3] [--down 0 1 6]

Each run starts three TokenRingNodes (default timeouts) sharing one data
directory, aborts member 3 (a crash), waits ``down`` seconds (0: still in
the core; 1: demoted to external; 6: excluded past ``exclude_timeout``),
starts it again with the same configuration (a later incarnation, drawn from
the data directory) and has it broadcast at once. Prints the time from the
restart until the others' view lists the new incarnation, until the
broadcast is delivered at member 1, and what member 1 refused meanwhile.
Figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from contextlib import AsyncExitStack

import trio
from epto.transports._ports import free_ports
from epto.transports.trio_tcp import TokenRingNode

from epto.endpoint import NodeConfig


async def one_run(down: float) -> str:
    ports = free_ports(3, socket.SOCK_STREAM)
    members = {p: f"127.0.0.1:{q}" for p, q in zip((1, 2, 3), ports, strict=True)}
    data = tempfile.mkdtemp(prefix="epto-restart-")

    def config(pid: int) -> NodeConfig:
        return NodeConfig(
            mode="token-ring", pid=pid, bind=members[pid], members=members, data_dir=data
        )

    async with AsyncExitStack() as stack:
        nodes = {p: await stack.enter_async_context(TokenRingNode(config(p))) for p in (1, 2, 3)}
        await trio.sleep(1.0)
        nodes[3].abort()
        await trio.sleep(down)
        view = nodes[1].process.config
        was = "core" if 3 in view.core else "external" if 3 in view.members else "excluded"
        start = time.monotonic()
        again = await stack.enter_async_context(TokenRingNode(config(3)))
        eid = again.broadcast(b"back")
        while nodes[1].process.config.incarnation_of(3) != again.incarnation:
            await trio.sleep(0.001)
        admitted = time.monotonic() - start
        async for delivery in nodes[1]:
            if delivery.event.id == eid:
                break
        delivered = time.monotonic() - start
        refused = dict(nodes[1].statistics().rejected)
        for node in (*nodes.values(), again):
            node.abort()
    return (
        f"down {down:.1f} s (was {was}): admitted after {admitted * 1000:.0f} ms, "
        f"its broadcast delivered at member 1 after {delivered * 1000:.0f} ms; "
        f"member 1 refused {refused}"
    )


def main(runs: int, downs: list[float]) -> None:
    for down in downs:
        for _ in range(runs):
            print(trio.run(one_run, down), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--down", type=float, nargs="+", default=[0.0, 1.0, 6.0])
    args = parser.parse_args()
    main(args.runs, args.down)
