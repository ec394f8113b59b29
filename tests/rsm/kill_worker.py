"""A replica process for the SIGKILL tests (tests/rsm/test_kill.py).

python kill_worker.py write DATA_DIR PORT TRANSFER_PORT
    a one-member token ring that applies ``add(0), add(1), ...`` for ever,
    snapshotting every few commands (each snapshot carries 1 MB of padding,
    so that a kill often lands while one is being written); prints
    ``ready`` once serving, then ``applied N`` now and then.
python kill_worker.py write3 DATA_DIR PORT,PORT,PORT TRANSFER_PORT,TRANSFER_PORT,TRANSFER_PORT
    the same with a three-member group in this one process (members 1, 2, 3;
    member 1 writes), so that the group keeps a majority when a member that
    joined it dies.
python kill_worker.py join DATA_DIR PORT CONTACT_PORT PEER_TRANSFER_ADDRESS...
    member 100 joining that group and fetching its state (started again on
    the same DATA_DIR, it is member 100 again, docs/node.md *Restart*);
    prints ``ready APPLIED DIGEST`` once it has it.
"""

from __future__ import annotations

import json
import sys

import trio

from epto.endpoint import NodeConfig
from epto.rsm import StateMachine, replicated

PADDING = 1 << 20


class Journal(StateMachine):
    """Remembers every command it applied, in order: a command applied twice
    or skipped shows as a list that is not ``0, 1, 2, ...``."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @replicated
    def add(self, i: int) -> int:
        self.seen.append(i)
        return len(self.seen)

    def snapshot(self) -> bytes:
        return json.dumps({"seen": self.seen, "padding": "p" * PADDING}).encode()

    def restore(self, state: bytes) -> None:
        self.seen = json.loads(state)["seen"]


async def write(data_dir: str, port: int, transfer_port: int) -> None:
    from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

    address = f"127.0.0.1:{port}"
    node = NodeConfig(mode="token-ring", pid=1, bind=address, members={1: address}, seed=1)
    config = ReplicaConfig(
        data_dir=data_dir, snapshot_every=7, keep=2, transfer_bind=f"127.0.0.1:{transfer_port}"
    )
    async with ReplicatedNode(Journal(), node, config) as replica:
        machine = replica.machine
        assert isinstance(machine, Journal)
        print("ready", len(machine.seen), flush=True)
        i = len(machine.seen)
        while True:
            await replica.call("add", i)
            i += 1
            if i % 10 == 0:
                print("applied", i, flush=True)


async def write3(data_dir: str, ports: list[int], transfers: list[int]) -> None:
    from contextlib import AsyncExitStack

    from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

    members = {pid: f"127.0.0.1:{port}" for pid, port in enumerate(ports, start=1)}
    peers = {pid: f"127.0.0.1:{port}" for pid, port in enumerate(transfers, start=1)}
    async with AsyncExitStack() as stack:
        replicas = []
        for pid in members:
            node = NodeConfig(
                mode="token-ring", pid=pid, bind=members[pid], members=members, seed=pid
            )
            config = ReplicaConfig(
                data_dir=f"{data_dir}/{pid}",
                snapshot_every=7,
                keep=2,
                transfer_bind=peers[pid],
                peers=peers,
            )
            replicas.append(
                await stack.enter_async_context(ReplicatedNode(Journal(), node, config))
            )
        writer = replicas[0]
        for replica in replicas:
            await replica.wait_ready()
        print("ready", flush=True)
        i = 0
        while True:
            await writer.call("add", i)
            i += 1
            if i % 10 == 0:
                print("applied", i, flush=True)


async def join(data_dir: str, port: int, contact: int, peers: list[str]) -> None:
    from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

    node = NodeConfig(
        mode="token-ring",
        pid=100,
        bind=f"127.0.0.1:{port}",
        contacts={1: f"127.0.0.1:{contact}"},
        seed=port,
    )
    config = ReplicaConfig(
        data_dir=data_dir, joining=True, peers=dict(enumerate(peers, start=1)), snapshot_every=0
    )
    async with ReplicatedNode(Journal(), node, config) as replica:
        await replica.wait_ready()
        print("ready", replica.replica.applied, replica.replica.digest.hex(), flush=True)
        await trio.sleep_forever()


def main() -> None:
    mode, data_dir, *rest = sys.argv[1:]
    if mode == "write":
        trio.run(write, data_dir, int(rest[0]), int(rest[1]))
    elif mode == "write3":
        ports, transfers = ([int(p) for p in arg.split(",")] for arg in rest)
        trio.run(write3, data_dir, ports, transfers)
    else:
        trio.run(join, data_dir, int(rest[0]), int(rest[1]), rest[2:])


if __name__ == "__main__":
    main()
