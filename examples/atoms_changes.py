"""One node of a sequencing-atoms deployment whose groups change while
messages flow (docs/atoms.md, "Groups that change at run time").

Every node runs this program with the same configuration file::

    {"groups": {"0": [1, 2, 3, 4], "1": [3, 4, 5, 6]},
     "addresses": {"1": "127.0.0.1:9001", ...},
     "changes": [{"after": 8, "add": {"3": [1, 3, 5]}},
                 {"after": 18, "remove": [0]}],
     "suspect_after": 1.0, "crash": {"node": 4, "after": 10},
     "until_epoch": 1, "ticks_after": 10, "start_at": 1767225600.0}

    python examples/atoms_changes.py --id 3 --config atoms.json --messages 30 \\
        --output node-3.jsonl

Every ``--interval`` seconds, ``--messages`` times, it publishes one message
to each group it is a member of at that moment; the coordinator (the
smallest node) makes each change after its tick ``after``. With
``suspect_after`` every node runs the crash detector; the ``crash`` node
ends abruptly (a crashed sequencing machine) ``after`` ticks after it
first delivered a message of the coordinator (which has heard from it by
then); ``until_epoch`` and ``ticks_after`` keep every node publishing
until it has published that many ticks in that epoch. ``start_at``
(wall-clock seconds) holds every node's first publication until then. It
writes a JSON line for every publication (source, seq, group, epoch, the
members owed it) and every delivery, prints ``published`` once its own
publications have all come back (or were lost with a crashed node), goes on
serving its atoms until its standard input closes, and then writes its
counters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import trio
from epto.transports.trio_atoms import AtomsNode

from epto.atoms import AtomsConfig, SequencingGraph
from epto.endpoint import NodeConfig


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
    crash = config.get("crash") or {}
    suspect_after = config.get("suspect_after")
    graph = SequencingGraph.build(groups)
    with args.output.open("w") as out:
        async with (
            AtomsNode(
                NodeConfig(
                    pid=args.id,
                    members=addresses,
                    mode="atoms",
                    atoms=AtomsConfig(graph=graph, suspect_after=suspect_after),
                    seed=args.id,
                )
            ) as node,
            trio.open_nursery() as nursery,
        ):
            process = node.engine.process
            coordinator = process.coordinator == args.id

            seen = {"coordinator": False}
            until_epoch = int(config.get("until_epoch", 0))
            ticks_after = int(config.get("ticks_after", 0))

            def more(tick: int, in_epoch: int) -> bool:
                """Ticks go on to --messages, and then until ``ticks_after``
                ticks of epoch ``until_epoch`` (at most 20 times as many)."""
                if tick >= 20 * args.messages:
                    return False
                return tick < args.messages or in_epoch < ticks_after

            async def publish() -> None:
                await trio.sleep(max(0.0, config.get("start_at", 0.0) - time.time()))
                tick = in_epoch = 0
                countdown = None
                while more(tick, in_epoch):
                    for group in sorted(process.groups):
                        body = {"group": group, "sent": time.time()}
                        eid = node.engine.publish(group, json.dumps(body).encode())
                        record = {
                            "kind": "sent",
                            "source": eid[0],
                            "seq": eid[1],
                            "group": group,
                            "epoch": process.epoch,
                            "members": sorted(process.members(group)),
                        }
                        _write(out, record)
                    if crash.get("node") == args.id and seen["coordinator"]:
                        # Crash ``after`` ticks after the coordinator is seen up
                        # (it has heard this node's heartbeats by then).
                        countdown = crash["after"] if countdown is None else countdown - 1
                        if countdown <= 0:
                            os._exit(0)  # a crash: no goodbye, the streams are cut
                    change = changes.get(tick)
                    if coordinator and change is not None:
                        add = {int(g): m for g, m in change.get("add", {}).items()}
                        node.engine.reconfigure(remove=change.get("remove", []), add=add)
                    tick += 1
                    in_epoch += process.epoch >= until_epoch
                    await trio.sleep(args.interval)
                while not node.endpoint.flushed():
                    await trio.sleep(0.01)
                print("published", flush=True)

            async def stop_at_eof() -> None:
                await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
                nursery.cancel_scope.cancel()

            nursery.start_soon(publish)
            nursery.start_soon(stop_at_eof)
            try:
                async for delivery in node:
                    seen["coordinator"] |= delivery.event.source == process.coordinator
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
            finally:
                stats = process.statistics()
                record = {
                    "kind": "statistics",
                    "epoch": stats.epoch,
                    "delivering_epoch": stats.delivering_epoch,
                    "pending": stats.pending,
                    "lost": stats.lost,
                    "crashed": sorted(process.crashed),
                    "rejected": stats.rejected,
                }
                _write(out, record)


def main() -> None:
    trio.run(_run, _parse())


if __name__ == "__main__":
    main()
