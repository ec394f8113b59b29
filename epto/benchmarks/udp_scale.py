"""Many trio nodes on UDP loopback sockets in one process: every event everywhere, one order.

Each node binds its own UDP socket on 127.0.0.1 and runs its own round timer;
all of them share one trio event loop (one CPU core). Every node broadcasts
``--events`` events; the run ends when every node delivered every event (or
at ``--timeout``) and the delivered sequences go through ``epto.check``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--events", type=int, default=1, help="broadcasts per broadcasting node")
    p.add_argument("--senders", type=int, help="nodes that broadcast (default: all)")
    p.add_argument("--round-interval", type=float, default=0.2, help="seconds")
    p.add_argument("--fanout", type=int, help="K (default: the EpTO paper's value)")
    p.add_argument("--ttl", type=int, help="TTL (default: the EpTO paper's value)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    return trio.run(_main, args)


async def _main(args: argparse.Namespace) -> int:
    import trio

    import epto
    from epto.check import check
    from epto.transports import NodeConfig
    from epto.transports.trio_udp import TrioNode

    n = args.nodes
    derived = epto.Config.for_group(n)
    config = epto.Config(
        fanout=args.fanout or derived.fanout,
        ttl=args.ttl or derived.ttl,
        round_interval=args.round_interval,
    )
    print(
        f"nodes={n} fanout={config.fanout} ttl={config.ttl} "
        f"round={config.round_interval}s events={min(n, args.senders or n) * args.events}"
    )
    senders = min(n, args.senders or n)
    total = senders * args.events
    sequences: dict[int, list[tuple[int, int]]] = {pid: [] for pid in range(n)}
    complete = trio.Event()
    finished = 0
    nodes: list[Any] = []

    async def run_node(pid: int, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal finished
        node_config = NodeConfig(
            pid=pid, epto=config, seed=args.seed * 100_003 + pid, flush_timeout=0.0
        )
        async with TrioNode(node_config) as node:
            nodes.append(node)
            task_status.started(node)
            async for delivery in node:
                sequences[pid].append(delivery.event.id)
                if len(sequences[pid]) == total:
                    finished += 1
                    if finished == n:
                        complete.set()

    started = time.perf_counter()
    cpu = time.process_time()
    async with trio.open_nursery() as nursery:
        for pid in range(n):
            await nursery.start(run_node, pid)
        for node in nodes:
            for other in nodes:
                node.add_member(other.pid, other.address)
        setup = time.perf_counter() - started
        t0 = time.perf_counter()
        for k in range(args.events):
            for node in nodes[:senders]:
                node.broadcast(b"event %d of %d" % (k, node.pid))
        with trio.move_on_after(args.timeout):
            await complete.wait()
        elapsed = time.perf_counter() - t0
        stats = [node.statistics() for node in nodes]
        nursery.cancel_scope.cancel()
    report = check(sequences)
    delivered = sum(len(s) for s in sequences.values())
    rounds = max(s.rounds for s in stats)
    print(f"setup {setup:.2f} s; all delivered: {complete.is_set()} after {elapsed:.2f} s")
    print(f"deliveries {delivered} of {n * total}; rounds run (max) {rounds}")
    print(f"floor: TTL x round = {config.ttl * config.round_interval:.2f} s")
    print(
        f"datagrams sent {sum(s.datagrams_sent for s in stats)}, send failures "
        f"{sum(s.send_failures for s in stats)}, "
        f"rejected {sum(sum(s.rejected.values()) for s in stats)}"
    )
    print(f"cpu {time.process_time() - cpu:.1f} s of {time.perf_counter() - started:.1f} s wall")
    print(report.summary())
    return 0 if report.ok and complete.is_set() else 1
