"""A replica stopped and started again on its data directory comes back as the
same member (docs/rsm.md, *Restart a replica*).

Three replicas of a key-value machine run in one trio process on loopback:
EpTO over UDP, or with ``--mode token-ring`` the token ring over TCP.
Replica 3 writes, stops; the others go on writing; replica 3 is started again
with the same pid and the same data directory, waits until it is ready, and
the three end with one state and one digest::

    python examples/rsm_restart.py
    python examples/rsm_restart.py --mode token-ring \\
        --member 1=127.0.0.1:9001 --member 2=127.0.0.1:9002 --member 3=127.0.0.1:9003 \\
        --transfer 1=127.0.0.1:9101 --transfer 2=127.0.0.1:9102 --transfer 3=127.0.0.1:9103

Every replica is given every replica's transfer address as its ``peers``
(the same list everywhere, docs/rsm.md, *Acknowledgement*): whom a restarted
replica asks, and fetches from, before it is ready.

Each step prints one line (``stopped``, ``restarted``, ``agreed`` with the
replicas' applied counts and digest). The data directories are temporary.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

import trio
from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode
from epto.transports import NodeConfig

from epto.rsm import StateMachine, replicated

DEFAULT_MEMBERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}
DEFAULT_TRANSFERS = {1: "127.0.0.1:9101", 2: "127.0.0.1:9102", 3: "127.0.0.1:9103"}


class KV(StateMachine):
    """Keys and values, replicated."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}

    @replicated
    def set(self, key: str, value: object) -> object:
        old = self.data.get(key)
        self.data[key] = value
        return old

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, state: bytes) -> None:
        self.data = json.loads(state)


def _addresses(values: list[str], default: dict[int, str]) -> dict[int, str]:
    pairs = [value.split("=", 1) for value in values]
    return {int(pid): address for pid, address in pairs} if pairs else default


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--member",
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="each node's address (default: 127.0.0.1:9001 to 9003)",
    )
    p.add_argument(
        "--transfer",
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="each replica's transfer address, TCP (default: 127.0.0.1:9101 to 9103)",
    )
    p.add_argument("--mode", choices=["epto", "token-ring"], default="epto")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds for each step")
    args = p.parse_args()
    args.members = _addresses(args.member, DEFAULT_MEMBERS)
    args.transfers = _addresses(args.transfer, DEFAULT_TRANSFERS)
    if len(args.members) != 3 or set(args.transfers) != set(args.members):
        p.error("give three members, and a transfer address for each")
    return args


def _replica(args: argparse.Namespace, root: Path, pid: int) -> ReplicatedNode:
    node = NodeConfig(
        mode=args.mode,
        pid=pid,
        bind=args.members[pid],
        members=args.members,
        round_interval=0.05,
    )
    config = ReplicaConfig(
        data_dir=str(root / f"kv-{pid}"),  # the same directory at every start
        transfer_bind=args.transfers[pid],
        peers=args.transfers,  # every replica, the same list everywhere
    )
    return ReplicatedNode(KV(), node, config)


async def _agreed(replicas: list[ReplicatedNode]) -> None:
    """Until every replica has applied as much as the others, in one order."""
    while len({(r.status().applied, r.status().digest) for r in replicas}) > 1:
        await trio.sleep(0.05)


async def run(args: argparse.Namespace, root: Path) -> None:
    first, second, third = sorted(args.members)
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(_replica(args, root, first))
        two = await stack.enter_async_context(_replica(args, root, second))
        with trio.fail_after(args.timeout):
            async with _replica(args, root, third) as three:
                for replica in (one, two, three):
                    await replica.wait_ready()
                for i in range(5):
                    await three.call("set", f"before-{i}", i)
                await _agreed([one, two, three])
                print("stopped", third, "after", three.status().applied, "commands", flush=True)
        with trio.fail_after(args.timeout):
            for i in range(5):  # the group goes on without it
                await one.call("set", f"while-down-{i}", i)
        with trio.fail_after(args.timeout):
            async with _replica(args, root, third) as three:
                await three.wait_ready()
                print("restarted", third, "ready", flush=True)
                await one.call("set", "after", "restart")
                await _agreed([one, two, three])
                assert await three.call("set", "from", third) is None
                replicas = [one, two, three]
                await _agreed(replicas)
                assert all(r.machine.data == one.machine.data for r in replicas)  # type: ignore[attr-defined]
                status = three.status()
                print("agreed", [r.status().applied for r in replicas], status.digest, flush=True)


def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory() as root:
        trio.run(run, args, Path(root))


if __name__ == "__main__":
    main()
