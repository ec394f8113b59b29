"""What the majority acknowledgement costs an EpTO replica's ``call``
(docs/rsm.md, *Acknowledgement*): three replicas in one trio process over
loopback, with ``peers``, the same workload under ``acknowledge="majority"``
and ``"local"`` in turn.

    python scripts/rsm_ack_latency.py [--calls 200] [--in-flight 8] [--rounds 3]

Prints per variant and round the median and 95th percentile of a call's
latency (from ``call`` to its return) and the calls per second, sequential
(one call at a time) and with ``--in-flight`` calls under way per replica.
A measurement, not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from contextlib import AsyncExitStack

import trio
from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode
from epto.transports._ports import free_ports

from epto.endpoint import NodeConfig
from epto.rsm import StateMachine, replicated


class Counter(StateMachine):
    def __init__(self) -> None:
        self.n = 0

    @replicated
    def incr(self) -> int:
        self.n += 1
        return self.n

    def snapshot(self) -> bytes:
        return str(self.n).encode()

    def restore(self, state: bytes) -> None:
        self.n = int(state)


async def _run(acknowledge: str, calls: int, in_flight: int, round_interval: float) -> str:
    members = {
        p: f"127.0.0.1:{port}"
        for p, port in zip((1, 2, 3), free_ports(3, socket.SOCK_DGRAM), strict=True)
    }
    transfer = {
        p: f"127.0.0.1:{port}"
        for p, port in zip((1, 2, 3), free_ports(3, socket.SOCK_STREAM), strict=True)
    }
    async with AsyncExitStack() as stack:
        replicas = []
        for p in (1, 2, 3):
            node = NodeConfig(
                mode="epto", pid=p, bind=members[p], members=members, round_interval=round_interval
            )
            config = ReplicaConfig(
                peers=transfer,
                transfer_bind=transfer[p],
                acknowledge=acknowledge,  # type: ignore[arg-type]
            )
            replicas.append(
                await stack.enter_async_context(ReplicatedNode(Counter(), node, config))
            )
        for r in replicas:
            await r.wait_ready(timeout=30)
        sequential: list[float] = []
        for _ in range(calls):
            t = time.perf_counter()
            await replicas[0].call("incr", timeout=30)
            sequential.append(time.perf_counter() - t)
        loaded: list[float] = []

        async def caller(r: ReplicatedNode, k: int) -> None:
            for _ in range(k):
                t = time.perf_counter()
                await r.call("incr", timeout=30)
                loaded.append(time.perf_counter() - t)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for r in replicas:
                for _ in range(in_flight):
                    nursery.start_soon(caller, r, max(1, calls // in_flight))
        wall = time.perf_counter() - start

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100)[int(p) - 1] * 1000

    return (
        f"{acknowledge:9} sequential median {statistics.median(sequential) * 1000:7.1f} ms "
        f"p95 {q(sequential, 95):7.1f} ms | {3 * in_flight} in flight: median "
        f"{statistics.median(loaded) * 1000:7.1f} ms p95 {q(loaded, 95):7.1f} ms, "
        f"{len(loaded) / wall:7.0f} calls/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round-interval", type=float, default=0.02)
    args = parser.parse_args()
    for i in range(args.rounds):
        for acknowledge in ("local", "majority"):
            line = trio.run(_run, acknowledge, args.calls, args.in_flight, args.round_interval)
            print(f"round {i + 1}: {line}", flush=True)


if __name__ == "__main__":
    main()
