"""A replicated key-value store on EpTO: every replica applies the same
commands in the same order, so every replica holds the same data.

Run one replica per process (over UDP with trio)::

    python examples/kv_store.py --id 1 --bind 127.0.0.1:9001 \\
        --peer 2=127.0.0.1:9002 --peer 3=127.0.0.1:9003

then type commands on its standard input:

    set KEY VALUE          replicate: KEY := VALUE
    del KEY                replicate: remove KEY
    cas KEY EXPECTED NEW   replicate: KEY := NEW if KEY == EXPECTED ("-" = absent)
    get KEY                local read: prints ``value KEY VALUE`` or ``missing KEY``
    dump                   local read: prints ``state {...}`` (applied count, data, digest)
    quit                   flush this replica's commands and stop

Writes are broadcast and take effect when delivered (a write is not visible
locally before it is ordered, which is what keeps compare-and-set consistent:
every replica evaluates the same comparison at the same point of the order).
Reads are local: they see this replica's prefix of the order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

import trio
from epto.transports import NodeConfig
from epto.transports.trio_udp import TrioNode


class KVStore:
    """The replicated state machine: deterministic, applied in delivery order."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.applied = 0
        self.cas_failed = 0

    def apply(self, command: bytes) -> None:
        self.applied += 1
        try:
            op = json.loads(command)
            kind, key = op["op"], str(op["key"])
        except (ValueError, KeyError, TypeError):
            return  # a malformed command is a no-op at every replica alike
        if kind == "set":
            self.data[key] = str(op["value"])
        elif kind == "del":
            self.data.pop(key, None)
        elif kind == "cas":
            if self.data.get(key) == op.get("expected"):
                self.data[key] = str(op["value"])
            else:
                self.cas_failed += 1

    def digest(self) -> str:
        blob = json.dumps(sorted(self.data.items())).encode()
        return hashlib.sha256(blob).hexdigest()

    def state(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "cas_failed": self.cas_failed,
            "data": self.data,
            "digest": self.digest(),
        }


def parse_command(line: str) -> bytes | None:
    """A replicated command as bytes, or None when the line is not a write."""
    words = line.split()
    if len(words) == 3 and words[0] == "set":
        return json.dumps({"op": "set", "key": words[1], "value": words[2]}).encode()
    if len(words) == 2 and words[0] == "del":
        return json.dumps({"op": "del", "key": words[1]}).encode()
    if len(words) == 4 and words[0] == "cas":
        expected = None if words[2] == "-" else words[2]
        cas = {"op": "cas", "key": words[1], "expected": expected, "value": words[3]}
        return json.dumps(cas).encode()
    return None


def reply(text: str) -> None:
    print(text, flush=True)


async def serve(config: NodeConfig) -> None:
    store = KVStore()
    async with TrioNode(config) as node, trio.open_nursery() as nursery:
        print(f"ready {config.pid} {node.address}", file=sys.stderr, flush=True)

        async def apply_deliveries() -> None:
            async for delivery in node:
                store.apply(delivery.event.payload)

        nursery.start_soon(apply_deliveries)
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            words = line.split()
            if not line or words == ["quit"]:
                break
            command = parse_command(line)
            if command is not None:
                node.broadcast(command)
            elif len(words) == 2 and words[0] == "get":
                value = store.data.get(words[1])
                reply(f"missing {words[1]}" if value is None else f"value {words[1]} {value}")
            elif words == ["dump"]:
                reply("state " + json.dumps(store.state(), sort_keys=True))
            elif words:
                reply(f"error unknown command {line.strip()!r}")
        nursery.cancel_scope.cancel()
    # Leaving the node's block flushed this replica's commands to the group.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--id", type=int, required=True)
    parser.add_argument("--bind", required=True, help="HOST:PORT")
    parser.add_argument("--peer", action="append", default=[], metavar="ID=HOST:PORT")
    parser.add_argument("--round-interval", type=float, default=0.05)
    args = parser.parse_args(argv)
    members = {args.id: args.bind}
    for spec in args.peer:
        pid, _, address = spec.partition("=")
        members[int(pid)] = address
    config = NodeConfig(
        pid=args.id, bind=args.bind, members=members, round_interval=args.round_interval
    )
    trio.run(serve, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
