"""The synchronous replica on ZeroMQ nodes (real loopback sockets)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from epto.services.trio_rsm import CommandFailedError, ReplicaConfig
from epto.services.zmq_rsm import ZmqReplica
from epto.transports._ports import free_ports

from epto import ConfigurationError
from epto.endpoint import NodeConfig

from .machines import KV


def _configs(n: int) -> dict[int, NodeConfig]:
    ports = free_ports(n, socket.SOCK_STREAM)
    members = {p: f"127.0.0.1:{port}" for p, port in zip(range(1, n + 1), ports, strict=True)}
    return {
        p: NodeConfig(pid=p, bind=a, members=members, round_interval=0.02, seed=p)
        for p, a in members.items()
    }


def test_three_synchronous_replicas_agree(tmp_path: Path) -> None:
    configs = _configs(3)
    replicas = [
        ZmqReplica(
            KV(), c, ReplicaConfig(data_dir=str(tmp_path / str(p)), snapshot_every=10)
        ).__enter__()
        for p, c in configs.items()
    ]
    try:
        results = [replicas[i % 3].call("incr", "n", 1, timeout=20) for i in range(30)]
        assert results == list(range(1, 31))  # each call sees every earlier one: one order
        with pytest.raises(CommandFailedError, match="KeyError"):
            replicas[1].call("fail", "k", timeout=20)
        deadline = time.monotonic() + 20
        while any(r.replica.applied < 31 for r in replicas) and time.monotonic() < deadline:
            for r in replicas:
                r.poll(0.02)
        assert len({(r.replica.cut, r.replica.digest) for r in replicas}) == 1
        assert all(r.machine.data == {"n": 30, "k": "half-done"} for r in replicas)  # type: ignore[attr-defined]
        assert replicas[0].status().snapshots_taken == 3
    finally:
        for r in replicas:
            r.__exit__(None, None, None)
    # A restart on the same data directory recovers the state.
    with ZmqReplica(KV(), configs[1], ReplicaConfig(data_dir=str(tmp_path / "1"))) as again:
        assert again.machine.data == {"n": 30, "k": "half-done"}  # type: ignore[attr-defined]
        assert again.replica.applied == 31


def test_state_transfer_is_left_to_the_trio_driver() -> None:
    with pytest.raises(ConfigurationError, match="trio driver"):
        ZmqReplica(KV(), _configs(1)[1], ReplicaConfig(joining=True))
