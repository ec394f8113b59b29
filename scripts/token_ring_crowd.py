"""Many token-ring members on TCP in one process (one trio event loop): how
long until every member delivers every broadcast.

Members starved of CPU suspect each other, or stall (docs/token-ring.md,
*Limits*, with the figures before and after the timeouts that members fit
to the round trips they measure, *Timing*). ``--hog N`` starts N CPU-bound
processes beside the group for the run; member 1's timeouts in use are
printed at the end::

    python scripts/token_ring_crowd.py --members 20                       # defaults
    python scripts/token_ring_crowd.py --members 30 --hog 3
    python scripts/token_ring_crowd.py --members 20 --suspect 1.0 --change 0.8
"""

from __future__ import annotations

import argparse
import multiprocessing
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
            f"{args.members} members, {args.hog} hogs, suspect {args.suspect} s, change "
            f"{args.change} s: least delivered {min(got.values())} of {owed} after "
            f"{took:.1f} s; member 1: view {stats.view}, instance {stats.instance}, "
            f"core {len(stats.core)}"
        )
        timing = getattr(nodes[1].process, "timeouts", None)  # type: ignore[union-attr]
        if timing is not None:
            fit = timing()
            print(
                "member 1's timeouts: "
                + ", ".join(f"{name} {value:.3g}" for name, value in fit.items())
            )
        for node in nodes.values():
            node.abort()


def _spin() -> None:
    while True:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=20)
    p.add_argument("--suspect", type=float, default=TokenRingConfig().suspect_timeout)
    p.add_argument("--change", type=float, default=TokenRingConfig().change_timeout)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--hog", type=int, default=0, help="CPU-bound processes beside the group")
    args = p.parse_args()
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hog)]
    for hog in hogs:
        hog.start()
    try:
        trio.run(_main, args)
    finally:
        for hog in hogs:
            hog.terminate()
            hog.join()


if __name__ == "__main__":
    main()
