"""One replica in a process of its own, for the restart tests
(tests/rsm/test_ready_ack.py).

python restart_worker.py SPEC

SPEC is a JSON object: ``mode`` ("epto" or "token-ring"), ``pid``,
``members`` (pid to node address), ``peers`` (pid to transfer address),
``transfer_bind``, ``data_dir``, ``incr`` (how many ``incr("n", 1)`` to call
once ready). The process prints ``ready`` once ready, ``value V`` after each
call, then ``done``, and waits to be killed.
"""

from __future__ import annotations

import json
import sys

import trio

from epto.endpoint import NodeConfig
from epto.rsm import StateMachine, replicated


class Counters(StateMachine):
    """``tests/rsm/machines.py``'s ``KV`` as far as ``incr`` goes (same
    commands, same snapshot bytes): this file runs as a script, without the
    tests package on its path."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}

    @replicated
    def incr(self, key: str, by: int = 1) -> int:
        value = int(self.data.get(key, 0)) + by  # type: ignore[call-overload]
        self.data[key] = value
        return value

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, state: bytes) -> None:
        self.data = json.loads(state)


async def main(spec: dict[str, object]) -> None:
    from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

    pid = int(spec["pid"])  # type: ignore[call-overload]
    members = {int(p): str(a) for p, a in spec["members"].items()}  # type: ignore[attr-defined]
    peers = {int(p): str(a) for p, a in spec["peers"].items()}  # type: ignore[attr-defined]
    node = NodeConfig(
        mode=spec["mode"],  # type: ignore[arg-type]
        pid=pid,
        bind=members[pid],
        members=members,
        round_interval=0.02,
        seed=pid,
    )
    config = ReplicaConfig(
        data_dir=str(spec["data_dir"]),
        peers=peers,
        transfer_bind=str(spec["transfer_bind"]),
        snapshot_every=5,
    )
    async with ReplicatedNode(Counters(), node, config) as replica:
        await replica.wait_ready(timeout=30)
        print("ready", flush=True)
        for _ in range(int(spec["incr"])):  # type: ignore[call-overload]
            value = await replica.call("incr", "n", 1, timeout=20)
            print("value", value, flush=True)
        print("done", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]))
