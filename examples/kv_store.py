"""A replicated key-value store on epto's state-machine layer: every replica
applies the same commands in the same order, and a replica that joins late
fetches the current state from the others before it serves.

Run one replica per process (EpTO over UDP by default; ``--mode token-ring``
runs the token ring over TCP)::

    python examples/kv_store.py --id 1 --bind 127.0.0.1:9001 --transfer 127.0.0.1:9101 \\
        --peer 2=127.0.0.1:9002 --peer 3=127.0.0.1:9003 \\
        --peer-transfer 2=127.0.0.1:9102 --peer-transfer 3=127.0.0.1:9103

A replica started later with ``--join`` (and the others' ``--peer-transfer``
addresses) starts empty, fetches a snapshot from one replica, checks its
digest with another, and replays what it delivered meanwhile. In token-ring
mode a late joiner is a new identity: give it ``--contact ID=HOST:PORT``
(a running member) instead of ``--peer``. With ``--data-dir`` a replica keeps
its delivery log and snapshots there and recovers them when restarted.

Then type commands on its standard input:

    set KEY VALUE          replicate: KEY := VALUE
    del KEY                replicate: remove KEY
    cas KEY EXPECTED NEW   replicate: KEY := NEW if KEY == EXPECTED ("-" = absent)
    get KEY                local read: prints ``value KEY VALUE`` or ``missing KEY``
    dump                   local read: prints ``state {...}`` (applied count, data, digest)
    status                 prints ``status {...}`` (ready, cut, digest, transfers, ...)
    quit                   stop

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

import attrs
import trio
from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

from epto.endpoint import NodeConfig
from epto.rsm import StateMachine, replicated


class KVStore(StateMachine):
    """The replicated state machine: deterministic, applied in the total order."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.cas_failed = 0

    @replicated
    def set(self, key: str, value: str) -> None:
        self.data[key] = value

    @replicated
    def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    @replicated
    def cas(self, key: str, expected: str | None, value: str) -> bool:
        if self.data.get(key) != expected:
            self.cas_failed += 1
            return False
        self.data[key] = value
        return True

    def snapshot(self) -> bytes:
        return json.dumps({"data": self.data, "cas_failed": self.cas_failed}).encode()

    def restore(self, state: bytes) -> None:
        loaded = json.loads(state)
        self.data = dict(loaded["data"])
        self.cas_failed = int(loaded["cas_failed"])

    def digest(self) -> str:
        blob = json.dumps(sorted(self.data.items())).encode()
        return hashlib.sha256(blob).hexdigest()


def parse_command(line: str) -> tuple[str, tuple[Any, ...]] | None:
    """A replicated command ``(name, args)``, or None when the line is not a write."""
    words = line.split()
    if len(words) == 3 and words[0] == "set":
        return "set", (words[1], words[2])
    if len(words) == 2 and words[0] == "del":
        return "delete", (words[1],)
    if len(words) == 4 and words[0] == "cas":
        return "cas", (words[1], None if words[2] == "-" else words[2], words[3])
    return None


def reply(text: str) -> None:
    print(text, flush=True)


async def serve(node: NodeConfig, config: ReplicaConfig) -> None:
    store = KVStore()
    async with ReplicatedNode(store, node, config) as replica:
        print(
            f"ready {node.pid} {replica.node.address} transfer {replica.transfer_address}",
            file=sys.stderr,
            flush=True,
        )
        if config.joining:
            await replica.wait_ready()
            print(f"caught up {node.pid} {replica.replica.applied}", file=sys.stderr, flush=True)
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            words = line.split()
            if not line or words == ["quit"]:
                break
            command = parse_command(line)
            if command is not None:
                name, args = command
                replica.submit(name, *args)
            elif len(words) == 2 and words[0] == "get":
                value = store.data.get(words[1])
                reply(f"missing {words[1]}" if value is None else f"value {words[1]} {value}")
            elif words == ["dump"]:
                state = {
                    "applied": replica.replica.applied,
                    "cas_failed": store.cas_failed,
                    "data": store.data,
                    "digest": store.digest(),
                }
                reply("state " + json.dumps(state, sort_keys=True))
            elif words == ["status"]:
                reply("status " + json.dumps(attrs.asdict(replica.status()), default=str))
            elif words:
                reply(f"error unknown command {line.strip()!r}")


def _addresses(specs: list[str]) -> dict[int, str]:
    out = {}
    for spec in specs:
        pid, _, address = spec.partition("=")
        out[int(pid)] = address
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--id", type=int, required=True)
    parser.add_argument("--bind", required=True, help="HOST:PORT")
    parser.add_argument("--mode", choices=("epto", "token-ring"), default="epto")
    parser.add_argument("--peer", action="append", default=[], metavar="ID=HOST:PORT")
    parser.add_argument("--contact", action="append", default=[], metavar="ID=HOST:PORT")
    parser.add_argument("--transfer", default="127.0.0.1:0", help="HOST:PORT to serve state on")
    parser.add_argument("--peer-transfer", action="append", default=[], metavar="ID=HOST:PORT")
    parser.add_argument("--join", action="store_true", help="start empty, fetch the state")
    parser.add_argument("--data-dir", help="keep the delivery log and snapshots here")
    parser.add_argument("--snapshot-every", type=int, default=5000)
    parser.add_argument("--round-interval", type=float, default=0.05)
    args = parser.parse_args(argv)
    members = {args.id: args.bind, **_addresses(args.peer)} if not args.contact else {}
    node = NodeConfig(
        mode=args.mode,
        pid=args.id,
        bind=args.bind,
        members=members,
        contacts=_addresses(args.contact),
        round_interval=args.round_interval,
    )
    config = ReplicaConfig(
        data_dir=args.data_dir,
        snapshot_every=args.snapshot_every,
        transfer_bind=args.transfer,
        peers=_addresses(args.peer_transfer),
        joining=args.join,
    )
    trio.run(serve, node, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
