"""One node of a sequencing-atoms deployment over TCP (docs/atoms.md).

Every node runs this program with the same configuration file::

    {"groups": {"0": [1, 2, 3, 4], "1": [3, 4, 5, 6]},
     "addresses": {"1": "127.0.0.1:9001", ...}}

    python examples/atoms_group.py --id 3 --config atoms.json --messages 50 \\
        --output deliveries-3.jsonl

It publishes ``--messages`` messages to each of its groups (one every
``--interval`` seconds), writes every delivery as a JSON line (source, seq,
group, the sender's wall time and the delivery's), prints ``complete`` once
it has delivered every message its groups owe it, and goes on serving its
atoms for the others until its standard input closes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import trio
from epto.transports.trio_atoms import AtomsNode

from epto.atoms import AtomsConfig, SequencingGraph
from epto.endpoint import NodeConfig


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--messages", type=int, default=50, help="per group this node is in")
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--output", type=Path, required=True)
    return p.parse_args()


async def _run(args: argparse.Namespace) -> None:
    config = json.loads(args.config.read_text())
    groups = {int(g): frozenset(members) for g, members in config["groups"].items()}
    addresses = {int(pid): address for pid, address in config["addresses"].items()}
    graph = SequencingGraph.build(groups)
    mine = sorted(g for g, members in groups.items() if args.id in members)
    owed = sum(args.messages * len(groups[g]) for g in mine)
    async with (
        AtomsNode(
            NodeConfig(
                pid=args.id,
                members=addresses,
                mode="atoms",
                atoms=AtomsConfig(graph=graph),
                seed=args.id,
            )
        ) as node,
        trio.open_nursery() as nursery,
    ):

        async def publish() -> None:
            for k in range(args.messages):
                for group in mine:
                    body = {"group": group, "k": k, "sent": time.time()}
                    node.engine.publish(group, json.dumps(body).encode())
                await trio.sleep(args.interval)

        async def stop_at_eof() -> None:
            await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
            nursery.cancel_scope.cancel()

        nursery.start_soon(publish)
        nursery.start_soon(stop_at_eof)
        got = 0
        with args.output.open("w") as out:
            async for delivery in node:
                body = json.loads(delivery.event.payload)
                record = {
                    "source": delivery.event.source,
                    "seq": delivery.event.seq,
                    "group": body["group"],
                    "sent": body["sent"],
                    "delivered": time.time(),
                }
                out.write(json.dumps(record) + "\n")
                got += 1
                if got == owed:
                    out.flush()
                    print("complete", flush=True)


def main() -> None:
    trio.run(_run, _parse())


if __name__ == "__main__":
    main()
