"""What keeping the member's vote costs the token ring (docs/token-ring.md,
*A majority restarted at once*): 3 TokenRingNodes in one process on TCP
loopback, each with its data directory under ``--dir``, a steady load
(``--rate`` broadcasts of 100 bytes per second, spread over the members),
run once per durability mode.

    .venv/bin/python scripts/token_ring_vote_cost.py [--dir /tmp] [--dir /dev/shm]
        [--messages 1500] [--rate 300]

Prints, per directory and mode: the records written per token hop, the time
one record takes to write (and flush, with ``fsync``: p50, p99, mean, the
``pwrite`` and the ``fdatasync`` timed inside the node), and the delivery
delay (broadcast to delivery at every member: p50, p99) next to the same
run with ``durability="off"``. A token hop writes two records at the member
that holds it (when it accepts it and when it passes it on); a member also
writes one when its acceptor answers a view change and when it installs a
configuration. Figures depend on the disk and on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import trio
from epto.transports import _ring_durable
from epto.transports.trio_tcp import TokenRingNode

from epto.endpoint import NodeConfig
from epto.tokenring import TokenRingConfig

_WRITES: list[float] = []


class _TimedStore(_ring_durable.VoteStore):
    def write(self, payload: bytes) -> None:
        start = time.perf_counter()
        super().write(payload)
        _WRITES.append(time.perf_counter() - start)


async def run(root: str | None, durability: str, messages: int, rate: float) -> str:
    _WRITES.clear()
    pids = (1, 2, 3)
    base = tempfile.mkdtemp(prefix="epto-vote-cost-", dir=root)
    ring = TokenRingConfig(durability=durability)
    nodes = {
        pid: TokenRingNode(
            NodeConfig(
                mode="token-ring",
                pid=pid,
                members=dict.fromkeys(pids, "127.0.0.1:1"),
                tokenring=ring,
                data_dir=os.path.join(base, str(pid)),
            )
        )
        for pid in pids
    }
    sent: dict[tuple[int, int], float] = {}
    delays: list[float] = []
    got = dict.fromkeys(pids, 0)

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
        hops0 = sum(n.process.statistics().tokens_accepted for n in nodes.values())
        writes0 = len(_WRITES)
        start = trio.current_time()
        for i in range(messages):
            node = nodes[pids[i % 3]]
            sent[node.broadcast(b"x" * 100)] = trio.current_time()
            await trio.sleep_until(start + (i + 1) / rate)
        with trio.fail_after(60):
            while min(got.values()) < messages:
                await trio.sleep(0.01)
        hops = sum(n.process.statistics().tokens_accepted for n in nodes.values()) - hops0
        writes = _WRITES[writes0:]
        nursery.cancel_scope.cancel()
    delays.sort()
    q = statistics.quantiles(delays, n=100)
    line = (
        f"{durability:5} delay p50 {q[49] * 1000:.1f} ms p99 {q[98] * 1000:.1f} ms; "
        f"{hops} token hops"
    )
    if writes:
        w = sorted(writes)
        wq = statistics.quantiles(w, n=100)
        line += (
            f", {len(writes)} records ({len(writes) / max(1, hops):.2f} per hop); "
            f"a record written in p50 {wq[49] * 1e6:.0f} us p99 {wq[98] * 1e6:.0f} us "
            f"mean {statistics.fmean(w) * 1e6:.0f} us"
        )
    return line


def main(dirs: list[str], messages: int, rate: float) -> None:
    _ring_durable.VoteStore = _TimedStore  # type: ignore[misc]
    from epto.transports._trio import loop

    loop.VoteStore = _TimedStore  # type: ignore[misc]
    for root in dirs:
        print(f"data directories under {root}:", flush=True)
        for durability in ("off", "write", "fsync"):
            print("  " + trio.run(run, root, durability, messages, rate), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", action="append", default=None)
    parser.add_argument("--messages", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=300.0)
    args = parser.parse_args()
    main(args.dir or [tempfile.gettempdir()], args.messages, args.rate)
