"""What the resolution of a partition with no majority rests on
(docs/rsm.md, *A partition with no majority*): a transfer server notes a
prefix it shared with a peer only when both digests are equal and the asker
sent its own; and EpTO replicas given different ``peers`` refuse each other
in one line instead of counting majorities over different sets."""

from __future__ import annotations

import functools
import socket
from contextlib import AsyncExitStack

import pytest
import trio
from epto.services._rsm_transfer import (
    GroupMismatchError,
    TransferServer,
    fetch_state,
    group_id,
)
from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode
from epto.transports._ports import free_ports

from epto import ConfigurationError
from epto.endpoint import NodeConfig
from epto.rsm import Snapshot

from .machines import KV

CUTS = {(1, 1, 1): bytes(16), (2, 1, 2): bytes(range(16))}


@pytest.mark.trio
async def test_a_server_notes_only_the_matches_it_saw() -> None:
    noted: list[tuple[tuple[int, int, int], bytes]] = []

    async def snapshot() -> Snapshot:
        raise AssertionError("not asked")

    server = TransferServer(
        snapshot=snapshot,
        ready=lambda: True,
        cut=lambda: (2, 1, 2),
        digest_at=CUTS.get,  # type: ignore[arg-type]
        matched=lambda cut, digest: noted.append((cut, digest)),
        group=group_id([1, 2, 3]),
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
            listeners = await nursery.start(serve)
            address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
            # Without the asker's digests: answered, nothing noted.
            state = await fetch_state(address, [(2, 1, 2)], timeout=5)
            assert state.at == (bytes(range(16)),) and noted == []
            # One equal, one different, one unknown to the server.
            cuts = [(2, 1, 2), (1, 1, 1), (9, 9, 9)]
            digests = [bytes(range(16)), b"\x01" * 16, bytes(16)]
            await fetch_state(address, cuts, timeout=5, digests=digests, group=group_id([3, 2, 1]))
            assert noted == [((2, 1, 2), bytes(range(16)))]
            # Another set of replicas: refused, nothing noted.
            with pytest.raises(GroupMismatchError):
                await fetch_state(address, cuts, timeout=5, digests=digests, group=group_id([1, 2]))
            assert noted == [((2, 1, 2), bytes(range(16)))]
            assert server.refused == {"group-mismatch": 1}
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_epto_replicas_given_different_peers_refuse_each_other() -> None:
    udp = free_ports(2, socket.SOCK_DGRAM)
    tcp = free_ports(3, socket.SOCK_STREAM)
    members = {1: f"127.0.0.1:{udp[0]}", 2: f"127.0.0.1:{udp[1]}"}
    transfer = {1: f"127.0.0.1:{tcp[0]}", 2: f"127.0.0.1:{tcp[1]}"}
    with trio.fail_after(20):
        async with AsyncExitStack() as stack:
            replicas = []
            for pid, peers in ((1, transfer), (2, {**transfer, 3: f"127.0.0.1:{tcp[2]}"})):
                node = NodeConfig(mode="epto", pid=pid, bind=members[pid], members=members)
                config = ReplicaConfig(peers=peers, transfer_bind=transfer[pid])
                replicas.append(await stack.enter_async_context(ReplicatedNode(KV(), node, config)))
            for replica in replicas:
                with pytest.raises(ConfigurationError, match="same peers") as caught:
                    await replica.wait_ready(timeout=10)
                assert "\n" not in str(caught.value)
