"""Figures of the token ring on TCP over loopback (3 nodes in one process).

Prints the delivery delay (broadcast to delivery, every node, every message)
at a steady broadcast rate, then crashes one node while the two others keep
broadcasting for 1.5 s, and prints the longest pause between two deliveries
at a survivor and the delays of those messages.

    .venv/bin/python scripts/token_ring_tcp.py [--messages 600] [--rate 200]
"""

from __future__ import annotations

import argparse
import statistics

import trio
from epto.transports.trio_tcp import TokenRingNode

from epto.endpoint import NodeConfig
from epto.tokenring import TokenRingConfig


async def run(messages: int, rate: float, sealed: bool) -> None:
    from epto import GroupKey

    key = GroupKey(key_id=1, secret=bytes(range(32))) if sealed else None
    pids = (1, 2, 3)
    ring = TokenRingConfig()
    nodes = {
        pid: TokenRingNode(
            NodeConfig(
                mode="token-ring",
                pid=pid,
                members=dict.fromkeys(pids, "127.0.0.1:1"),
                tokenring=ring,
                group_key=key,
            )
        )
        for pid in pids
    }
    sent: dict[tuple[int, int], float] = {}
    delays: list[float] = []
    got: dict[int, int] = dict.fromkeys(pids, 0)

    async def reader(node: TokenRingNode) -> None:
        async for delivery in node:
            delays.append(trio.current_time() - sent[delivery.event.id])
            got[node.pid] += 1

    async with nodes[1], nodes[2], nodes[3], trio.open_nursery() as nursery:
        for node in nodes.values():
            for pid, other in nodes.items():
                node.engine.set_address(pid, other.address)
            nursery.start_soon(reader, node)
        await trio.sleep(0.5)
        start = trio.current_time()
        for i in range(messages):
            node = nodes[pids[i % 3]]
            sent[node.broadcast(b"x" * 100)] = trio.current_time()
            await trio.sleep_until(start + (i + 1) / rate)
        while min(got.values()) < messages:
            await trio.sleep(0.01)
        delays.sort()
        q = statistics.quantiles(delays, n=100)
        print(
            f"steady: {messages} messages at {rate:g}/s, sealed={sealed}: delay p50 "
            f"{q[49] * 1e3:.2f} ms, p99 {q[98] * 1e3:.2f} ms, max {delays[-1] * 1e3:.2f} ms"
        )
        nodes[3].abort()
        crashed = trio.current_time()
        delays.clear()
        stamps: list[float] = []
        base = got[1]

        async def watch() -> None:
            seen = got[1]
            while True:
                if got[1] != seen:
                    seen = got[1]
                    stamps.append(trio.current_time())
                await trio.sleep(0.0005)

        nursery.start_soon(watch)
        after = int(rate * 1.5)
        for i in range(after):
            node = nodes[pids[i % 2]]
            sent[node.broadcast(b"y" * 100)] = trio.current_time()
            await trio.sleep_until(crashed + (i + 1) / rate)
        while got[1] < base + after:
            await trio.sleep(0.01)
        gaps = [b - a for a, b in zip([crashed, *stamps], stamps, strict=False)]
        print(
            f"crash of a member, then {after} messages at {rate:g}/s from the survivors: "
            f"longest pause between deliveries {max(gaps) * 1e3:.0f} ms, delay max "
            f"{max(delays) * 1e3:.0f} ms, p50 {statistics.median(delays) * 1e3:.2f} ms "
            f"(suspect_timeout {ring.suspect_timeout * 1e3:.0f} ms, "
            f"core now {nodes[1].statistics().core})"
        )
        # The watcher runs until cancelled; the readers end with their nodes.
        nursery.cancel_scope.cancel()
        for node in nodes.values():
            node.abort()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--sealed", action="store_true")
    args = parser.parse_args()
    trio.run(run, args.messages, args.rate, args.sealed)


if __name__ == "__main__":
    main()
