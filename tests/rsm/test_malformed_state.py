"""A peer that serves a state the state machine cannot restore (valid
transfer framing, a checksum that matches, a header copied from an honest
replica, and a state of ``{}``, garbage or wrong types) is refused like a
corrupt state: counted, the machine left as it was before (rolled back, not
half-restored), the next provider asked; the replica never crashes."""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from epto.services._rsm_transfer import TransferServer
from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode
from epto.transports._ports import free_ports

from epto.endpoint import NodeConfig
from epto.rsm import Snapshot, StateMachine, replicated

BAD_STATES = {
    "empty-object": b"{}",
    "garbage": b"\xff\x00 not json at all \x80",
    "wrong-types": json.dumps({"text": "evil", "rev": "seven"}).encode(),
}


class Doc(StateMachine):
    """A document whose ``restore`` raises on a malformed state after it has
    already changed a field (``text`` before ``rev``): without a rollback a
    refused state would leave it half-restored."""

    def __init__(self) -> None:
        self.text = ""
        self.rev = 0

    @replicated
    def append(self, more: str) -> int:
        self.text += more
        self.rev += 1
        return self.rev

    def snapshot(self) -> bytes:
        return json.dumps({"text": self.text, "rev": self.rev}).encode()

    def restore(self, state: bytes) -> None:
        value = json.loads(state)
        self.text = value["text"]
        if not isinstance(value["rev"], int):
            raise TypeError("rev must be an integer")
        self.rev = value["rev"]


def _nodes(pids: list[int]) -> dict[int, NodeConfig]:
    ports = free_ports(len(pids), socket.SOCK_DGRAM)
    members = {p: f"127.0.0.1:{port}" for p, port in zip(pids, ports, strict=True)}
    return {
        p: NodeConfig(
            mode="epto", pid=p, bind=members[p], members=members, round_interval=0.02, seed=p
        )
        for p in pids
    }


@asynccontextmanager
async def _hostile(honest: ReplicatedNode, state: bytes) -> AsyncIterator[TransferServer]:
    """A provider that mirrors ``honest``'s cut and digests (so the digest
    check confirms it) and serves ``state`` as the state at that cut."""

    async def snapshot() -> Snapshot:
        r = honest.replica
        return Snapshot(cut=r.cut, applied=r.applied, digest=r.digest, state=state)

    server = TransferServer(
        snapshot=snapshot,
        ready=lambda: True,
        cut=lambda: honest.replica.cut,
        digest_at=honest.replica.digest_at,
        wait=1.0,
        send_timeout=5.0,
    )
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        server.address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"  # type: ignore[attr-defined]
        yield server
        nursery.cancel_scope.cancel()


@pytest.mark.trio
@pytest.mark.parametrize("bad", list(BAD_STATES), ids=list(BAD_STATES))
async def test_a_malformed_state_is_refused_and_the_next_provider_asked(bad: str) -> None:
    # Members 2 (honest) and 3 (the joiner); 1 is the hostile provider, the
    # lowest id: asked first among providers at the same cut.
    nodes = _nodes([2, 3])
    with trio.fail_after(40):
        async with AsyncExitStack() as stack:
            honest = await stack.enter_async_context(
                ReplicatedNode(Doc(), nodes[2], ReplicaConfig(joining=False))
            )
            await honest.wait_ready()
            for word in ("a", "b", "c"):
                await honest.call("append", word)
            hostile = await stack.enter_async_context(_hostile(honest, BAD_STATES[bad]))
            peers = {1: hostile.address, 2: honest.transfer_address}  # type: ignore[attr-defined]
            joiner = await stack.enter_async_context(
                ReplicatedNode(
                    Doc(),
                    nodes[3],
                    ReplicaConfig(joining=True, peers=peers, join_settle=0.3, acknowledge="local"),
                )
            )
            await joiner.wait_ready()
            status = joiner.status()
            assert status.states_refused >= 1 and status.transfer_failures >= 1
            assert status.transfers == 1
            assert hostile.served >= 1
            machine = joiner.machine
            assert isinstance(machine, Doc)
            assert (machine.text, machine.rev) == ("abc", 3)  # the honest state
            assert await joiner.call("append", "d") == 4
            assert honest.status().ready


@pytest.mark.trio
@pytest.mark.parametrize("bad", list(BAD_STATES), ids=list(BAD_STATES))
async def test_with_only_a_hostile_provider_the_machine_is_never_half_restored(bad: str) -> None:
    nodes = _nodes([2, 3])
    with trio.fail_after(40):
        async with AsyncExitStack() as stack:
            honest = await stack.enter_async_context(
                ReplicatedNode(Doc(), nodes[2], ReplicaConfig(joining=False))
            )
            await honest.wait_ready()
            await honest.call("append", "x")
            hostile = await stack.enter_async_context(_hostile(honest, BAD_STATES[bad]))
            machine = Doc()
            joiner = await stack.enter_async_context(
                ReplicatedNode(
                    machine,
                    nodes[3],
                    ReplicaConfig(
                        joining=True,
                        peers={1: hostile.address},  # type: ignore[attr-defined]
                        join_settle=0.3,
                        acknowledge="local",
                    ),
                )
            )
            while joiner.status().states_refused < 3:
                await trio.sleep(0.02)
                # Never half-restored: "evil" would show between two refusals.
                assert (machine.text, machine.rev) == ("", 0)
            assert not joiner.ready and joiner.status().transfers == 0
