"""One node of a sequencing-atoms deployment whose groups change while
messages flow (docs/atoms.md, "Groups that change at run time").

Every node runs this program with the same configuration file::

    {"groups": {"0": [1, 2, 3, 4], "1": [3, 4, 5, 6]},
     "addresses": {"1": "127.0.0.1:9001", ...},
     "changes": [{"after": 8, "add": {"3": [1, 3, 5]}},
                 {"after": 18, "remove": [0]}]}

    python examples/atoms_changes.py --id 3 --config atoms.json --messages 30 \\
        --output node-3.jsonl

Every ``--interval`` seconds, ``--messages`` times, it publishes one message
to each group it is a member of at that moment; the coordinator (the
smallest node) makes each change after its tick ``after``. It writes a JSON
line for every publication (source, seq, group, epoch, the members owed it)
and every delivery, prints ``published`` once its own publications have all
come back, and goes on serving its atoms until its standard input closes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import trio
from epto.transports.trio_atoms import AtomsNode

from epto.atoms import SequencingGraph


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--messages", type=int, default=30, help="ticks of publication")
    p.add_argument("--interval", type=float, default=0.02)
    p.add_argument("--output", type=Path, required=True)
    return p.parse_args()


def _write(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


async def _run(args: argparse.Namespace) -> None:
    config = json.loads(args.config.read_text())
    groups = {int(g): frozenset(members) for g, members in config["groups"].items()}
    addresses = {int(pid): address for pid, address in config["addresses"].items()}
    changes = {int(c["after"]): c for c in config.get("changes", [])}
    graph = SequencingGraph.build(groups)
    with args.output.open("w") as out:
        async with (
            AtomsNode(args.id, graph, addresses, seed=args.id) as node,
            trio.open_nursery() as nursery,
        ):
            process = node.endpoint.process
            coordinator = process.coordinator == args.id

            async def publish() -> None:
                for tick in range(args.messages):
                    for group in sorted(process.groups):
                        body = {"group": group, "sent": time.time()}
                        eid = node.publish(group, json.dumps(body).encode())
                        record = {
                            "kind": "sent",
                            "source": eid[0],
                            "seq": eid[1],
                            "group": group,
                            "epoch": process.epoch,
                            "members": sorted(process.members(group)),
                        }
                        _write(out, record)
                    change = changes.get(tick)
                    if coordinator and change is not None:
                        add = {int(g): m for g, m in change.get("add", {}).items()}
                        node.reconfigure(remove=change.get("remove", []), add=add)
                    await trio.sleep(args.interval)
                while not node.endpoint.flushed():
                    await trio.sleep(0.01)
                print("published", flush=True)

            async def stop_at_eof() -> None:
                await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
                nursery.cancel_scope.cancel()

            nursery.start_soon(publish)
            nursery.start_soon(stop_at_eof)
            async for delivery in node:
                body = json.loads(delivery.event.payload)
                record = {
                    "kind": "delivered",
                    "source": delivery.event.source,
                    "seq": delivery.event.seq,
                    "group": body["group"],
                    "sent": body["sent"],
                    "delivered": time.time(),
                }
                _write(out, record)


def main() -> None:
    trio.run(_run, _parse())


if __name__ == "__main__":
    main()
