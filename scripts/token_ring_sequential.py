"""A sequential caller's round trip on the token ring over TCP: one command
in flight at a time (broadcast, wait for its delivery at the caller, then
the next), three ``TokenRingNode``s in one process on loopback.

    python scripts/token_ring_sequential.py --commands 40

Prints the median and the largest round trip (broadcast to its delivery at
the caller) after the ring formed. ``--token-hold``, ``--broadcast-hold``
and ``--max-hold`` set the holds (default: the configuration's).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

from epto.transports._ports import free_ports


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commands", type=int, default=40)
    p.add_argument("--token-hold", type=float, default=None)
    p.add_argument("--broadcast-hold", type=float, default=None)
    p.add_argument("--max-hold", type=float, default=None)
    args = p.parse_args()

    import trio
    from epto.transports.trio_tcp import TokenRingNode

    from epto.benchmarks.replication import _ring_config, _ring_formed
    from epto.endpoint import NodeConfig

    members = {
        i + 1: f"127.0.0.1:{port}" for i, port in enumerate(free_ports(3, socket.SOCK_STREAM))
    }
    ring = _ring_config(args)
    trips: list[float] = []

    def node(pid: int) -> TokenRingNode:
        config = NodeConfig(
            pid=pid, bind=members[pid], members=members, mode="token-ring", tokenring=ring, seed=pid
        )
        return TokenRingNode(config)

    async def run() -> None:
        async with (
            node(1) as caller,
            node(2) as second,
            node(3) as third,
            trio.open_nursery() as nursery,
        ):
            for other in (second, third):
                nursery.start_soon(_drain, other)
            await _ring_formed(caller, 3, 30.0)
            deliveries = caller.__aiter__()
            for i in range(args.commands):
                start = time.perf_counter()
                eid = caller.broadcast(b"seq%d" % i)
                while (await deliveries.__anext__()).event.id != eid:
                    pass
                trips.append(time.perf_counter() - start)
            nursery.cancel_scope.cancel()

    async def _drain(node: object) -> None:
        async for _ in node:  # type: ignore[attr-defined]
            pass

    trio.run(run)
    print(
        f"{len(trips)} commands one at a time: p50 {statistics.median(trips) * 1e3:.1f} ms, "
        f"max {max(trips) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
