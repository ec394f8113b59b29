"""What a call through ``BlockingNode`` costs: broadcasts from the caller's
thread into a one-member token ring, against the same broadcasts made in the
node's own trio task (``run_sync`` of a loop), CPU time of the process and
wall time, best of ``--repeats``.

    python scripts/blocking_overhead.py [--broadcasts 5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import socket
import time

from epto.transports import NodeConfig
from epto.transports._ports import free_ports
from epto.transports.blocking import BlockingNode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broadcasts", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.broadcasts
    rows: dict[str, list[tuple[float, float]]] = {"one call each": [], "one call for all": []}
    for _ in range(args.repeats):
        port = free_ports(1, socket.SOCK_STREAM)[0]
        bind = f"127.0.0.1:{port}"
        config = NodeConfig(mode="token-ring", pid=1, bind=bind, members={1: bind}, seed=1)
        with BlockingNode(config) as node:
            for label in rows:
                cpu, wall = time.process_time(), time.perf_counter()
                if label == "one call each":
                    for i in range(n):
                        node.broadcast(b"%d" % i)
                else:

                    def burst() -> None:
                        for i in range(n):
                            node.node.broadcast(b"%d" % i)

                    node.run_sync(burst)
                got = 0
                while got < n and node.get(timeout=10) is not None:
                    got += 1
                rows[label].append((time.process_time() - cpu, time.perf_counter() - wall))
    print(f"{n} broadcasts into a one-member token ring, delivered; best of {args.repeats}")
    for label, runs in rows.items():
        cpu = min(c for c, _ in runs)
        wall = min(w for _, w in runs)
        print(f"  {label:17} CPU {cpu * 1e6 / n:6.1f} us/broadcast   wall {wall * 1e6 / n:6.1f} us")


if __name__ == "__main__":
    main()
