"""Many token-ring members on TCP in one process (one trio event loop): how
long until every member delivers every broadcast.

An open finding (docs/token-ring.md): at the default failure-detector
timeouts, twenty members in one process keep suspecting each other and do
not deliver within 30 s; with slower timeouts they do::

    python scripts/token_ring_crowd.py --members 20                       # defaults
    python scripts/token_ring_crowd.py --members 20 --suspect 1.0 --change 0.8
"""

from __future__ import annotations

import argparse
import socket

import trio
from epto.transports import NodeConfig
from epto.transports._ports import free_ports
from epto.transports.trio_node import open_node

from epto.tokenring import TokenRingConfig


async def _main(args: argparse.Namespace) -> None:
    ring = TokenRingConfig(suspect_timeout=args.suspect, change_timeout=args.change)
    ports = free_ports(args.members, socket.SOCK_STREAM)
    binds = {pid: f"127.0.0.1:{port}" for pid, port in enumerate(ports, start=1)}
    got = dict.fromkeys(binds, 0)
    owed = 3 * args.members
    async with trio.open_nursery() as nursery:
        nodes = {}
        for pid in binds:
            config = NodeConfig(
                pid=pid, bind=binds[pid], members=binds, mode="token-ring", seed=pid, tokenring=ring
            )
            node = nodes[pid] = open_node(config)

            async def run(node=node, pid=pid, task_status=trio.TASK_STATUS_IGNORED):  # type: ignore[no-untyped-def]
                async with node:
                    task_status.started()
                    async for _ in node:
                        got[pid] += 1

            await nursery.start(run)
        start = trio.current_time()
        for k in range(3):
            for node in nodes.values():
                node.broadcast(b"%d" % k)
        with trio.move_on_after(args.timeout):
            while min(got.values()) < owed:
                await trio.sleep(0.05)
        took = trio.current_time() - start
        stats = nodes[1].statistics()
        print(
            f"{args.members} members, suspect {args.suspect} s, change {args.change} s: "
            f"least delivered {min(got.values())} of {owed} after {took:.1f} s; "
            f"member 1: view {stats.view}, instance {stats.instance}, core {len(stats.core)}"
        )
        for node in nodes.values():
            node.abort()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=20)
    p.add_argument("--suspect", type=float, default=TokenRingConfig().suspect_timeout)
    p.add_argument("--change", type=float, default=TokenRingConfig().change_timeout)
    p.add_argument("--timeout", type=float, default=30.0)
    trio.run(_main, p.parse_args())


if __name__ == "__main__":
    main()
