"""Ready means ready, and an acknowledgement never lies (docs/rsm.md, *Ready*
and *Acknowledgement*), on real loopback sockets:

* a replica killed (SIGKILL) and started again with its id and data
  directory answers its first call on the group's whole state (EpTO, in a
  process of its own), and so does a token-ring replica started again in
  this process, by its own id or by a new one on the old directory;
* a call before ready raises :class:`ReplicaNotReadyError` and broadcasts
  nothing; ``status().ready`` is false until the state is fetched;
* an EpTO replica cut off from its group (its datagrams dropped by a proxy)
  has its calls time out under the majority acknowledgement, and after the
  cut heals the group's state holds everything any replica acknowledged;
  with ``acknowledge="local"`` the same cut loses acknowledged writes;
* three of five token-ring replicas restarted together are ready within a
  bound (the time each took is printed: ``pytest -s``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path

import pytest
import trio
from epto.services.trio_rsm import (
    CommandTimeoutError,
    ReplicaConfig,
    ReplicaNotReadyError,
    ReplicatedNode,
)
from epto.transports._ports import free_ports

from epto.endpoint import NodeConfig

from .machines import KV

WORKER = Path(__file__).resolve().parent / "restart_worker.py"


def _addresses(n: int, kind: socket.SocketKind) -> list[str]:
    return [f"127.0.0.1:{port}" for port in free_ports(n, kind)]


def _node(mode: str, pid: int, members: dict[int, str], bind: str | None = None) -> NodeConfig:
    return NodeConfig(
        mode=mode,  # type: ignore[arg-type]
        pid=pid,
        bind=bind or members[pid],
        members=members,
        round_interval=0.02,
        seed=pid,
    )


async def _agreed(replicas: list[ReplicatedNode], timeout: float = 30.0) -> None:
    """Until every replica is ready with one cut and digest."""
    with trio.fail_after(timeout):
        while not all(r.ready for r in replicas) or (
            len({(r.replica.cut, r.replica.digest) for r in replicas}) != 1
        ):
            await trio.sleep(0.02)


class _Lines:
    """The lines a child process prints."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdout is not None
        self._stdout = process.stdout
        self._buffer = b""

    async def next(self, prefix: str, timeout: float = 30.0) -> str:
        with trio.fail_after(timeout):
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    text = line.decode()
                    if text.startswith(prefix):
                        return text
                chunk = await self._stdout.receive_some()
                if not chunk:
                    raise AssertionError(f"the worker exited before {prefix!r}")
                self._buffer += chunk


@asynccontextmanager
async def _worker(spec: dict[str, object]) -> AsyncIterator[tuple[trio.Process, _Lines]]:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process, _Lines(process)
    finally:
        process.kill()  # SIGKILL: no goodbye to the group, nothing flushed
        with trio.move_on_after(10):
            await process.wait()
        assert process.stdout is not None
        await process.stdout.aclose()


# -- restart as oneself ------------------------------------------------------------


@pytest.mark.trio
async def test_an_epto_replica_killed_and_restarted_continues_the_groups_counter(
    tmp_path: Path,
) -> None:
    members = dict(enumerate(_addresses(3, socket.SOCK_DGRAM), start=1))
    transfer = dict(enumerate(_addresses(3, socket.SOCK_STREAM), start=1))
    spec: dict[str, object] = {
        "mode": "epto",
        "pid": 3,
        "members": members,
        "peers": transfer,
        "transfer_bind": transfer[3],
        "data_dir": str(tmp_path / "3"),
    }
    with trio.fail_after(90):
        async with AsyncExitStack() as stack:
            group = [
                await stack.enter_async_context(
                    ReplicatedNode(
                        KV(),
                        _node("epto", p, members),
                        ReplicaConfig(
                            data_dir=str(tmp_path / str(p)),
                            peers=transfer,
                            transfer_bind=transfer[p],
                        ),
                    )
                )
                for p in (1, 2)
            ]
            async with _worker({**spec, "incr": 4}) as (_, lines):
                await lines.next("ready")
                values = [int((await lines.next("value")).split()[1]) for _ in range(4)]
                await lines.next("done")
            # Killed: it applied 1..4 (the group's first four), logged and
            # snapshotted on its disk. The group goes on without it.
            assert values == [1, 2, 3, 4]
            for r in group:
                await r.wait_ready(timeout=20)
            for i in range(10):
                await group[i % 2].call("incr", "n", 1, timeout=20)
            async with _worker({**spec, "incr": 1}) as (_, lines):
                await lines.next("ready")
                first = int((await lines.next("value")).split()[1])
            # On the group's whole state: 4 + 10 before it, so 15 (it once
            # answered from its own state alone, or raised ResultUnavailableError).
            assert first == 15
            # A majority (it and one of them) holds it; the other one soon.
            with trio.fail_after(20):
                while not all(r.machine.data["n"] == 15 for r in group):  # type: ignore[attr-defined]
                    await trio.sleep(0.02)


@pytest.mark.trio
@pytest.mark.parametrize("same_id", [True, False], ids=["same-id", "new-id-old-directory"])
async def test_a_token_ring_replica_started_again_continues_the_groups_counter(
    same_id: bool, tmp_path: Path
) -> None:
    members = dict(enumerate(_addresses(3, socket.SOCK_STREAM), start=1))
    transfer = dict(enumerate(_addresses(3, socket.SOCK_STREAM), start=1))

    def replica(pid: int, node: NodeConfig) -> ReplicatedNode:
        cfg = ReplicaConfig(
            data_dir=str(tmp_path / "3" if pid not in (1, 2) else tmp_path / str(pid)),
            peers=transfer,
            transfer_bind=transfer[3 if pid not in (1, 2) else pid],
            snapshot_every=4,
        )
        return ReplicatedNode(KV(), node, cfg)

    with trio.fail_after(90):
        async with AsyncExitStack() as stack:
            group = [
                await stack.enter_async_context(replica(p, _node("token-ring", p, members)))
                for p in (1, 2)
            ]
            async with replica(3, _node("token-ring", 3, members)) as third:
                for r in (*group, third):
                    await r.wait_ready(timeout=20)
                for i in range(9):
                    await (group[0], group[1], third)[i % 3].call("incr", "n", 1)
                assert third.machine.data["n"] == 9  # type: ignore[attr-defined]
            for i in range(6):  # the group goes on without it
                await group[i % 2].call("incr", "n", 1, timeout=20)
            if same_id:
                again = replica(3, _node("token-ring", 3, members))
            else:
                port = free_ports(1, socket.SOCK_STREAM)[0]
                again = replica(
                    7,
                    NodeConfig(
                        mode="token-ring",
                        pid=7,
                        bind=f"127.0.0.1:{port}",
                        contacts={1: members[1]},
                        seed=7,
                    ),
                )
            async with again:
                # Not ready at once: in the view, then its state confirmed or fetched.
                assert not again.status().ready
                with pytest.raises(ReplicaNotReadyError):
                    await again.call("incr", "n", 1)
                await again.wait_ready(timeout=30)
                status = again.status()
                assert status.ready and status.members
                assert await again.call("incr", "n", 1, timeout=20) == 16
                await _agreed([*group, again])


# -- not ready ---------------------------------------------------------------------


@pytest.mark.trio
async def test_a_call_before_ready_raises_and_broadcasts_nothing(tmp_path: Path) -> None:
    members = dict(enumerate(_addresses(3, socket.SOCK_DGRAM), start=1))
    transfer = dict(enumerate(_addresses(3, socket.SOCK_STREAM), start=1))
    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            group = [
                await stack.enter_async_context(
                    ReplicatedNode(
                        KV(),
                        _node("epto", p, members),
                        ReplicaConfig(peers=transfer, transfer_bind=transfer[p]),
                    )
                )
                for p in (1, 2)
            ]
            for r in group:
                await r.wait_ready(timeout=20)
            for i in range(6):
                await group[i % 2].call("incr", "n", 1, timeout=20)
            joiner = await stack.enter_async_context(
                ReplicatedNode(
                    KV(),
                    _node("epto", 3, members),
                    ReplicaConfig(
                        joining=True, join_settle=1.0, peers=transfer, transfer_bind=transfer[3]
                    ),
                )
            )
            status = joiner.status()
            assert not status.ready and status.transfers == 0
            with pytest.raises(ReplicaNotReadyError, match="not ready"):
                await joiner.call("incr", "n", 1)
            with pytest.raises(ReplicaNotReadyError):
                joiner.submit("incr", "n", 1)
            with pytest.raises(ReplicaNotReadyError):
                await joiner.wait_ready(timeout=0.05)
            assert joiner.node.statistics().broadcasts == 0
            await joiner.wait_ready(timeout=30)
            status = joiner.status()
            assert status.ready and status.transfers >= 1
            assert await joiner.call("incr", "n", 1, timeout=20) == 7
            await _agreed([*group, joiner])


# -- the acknowledgement, under a cut ------------------------------------------------


class _Cut:
    """UDP proxies in front of one member: every datagram to it and from it
    passes through one, and is dropped while :attr:`cut` is set."""

    def __init__(self) -> None:
        self.cut = False
        self.dropped = 0

    async def relay(
        self,
        listen: str,
        target: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        host, port = listen.rsplit(":", 1)
        thost, tport = target.rsplit(":", 1)
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
            await sock.bind((host, int(port)))
            task_status.started()
            while True:
                data, _ = await sock.recvfrom(65536)
                if self.cut:
                    self.dropped += 1
                    continue
                with suppress(OSError):
                    await sock.sendto(data, (thost, int(tport)))


async def _cut_off_run(acknowledge: str | None) -> tuple[set[str], set[str], dict[str, object]]:
    """Three EpTO replicas; replica 3 is cut off for 2 s and calls meanwhile.
    The keys acknowledged by anyone, those replica 3 wrote while cut off and
    saw acknowledged, and the group's final state."""
    real = dict(enumerate(_addresses(3, socket.SOCK_DGRAM), start=1))
    proxy_in, to_1, to_2 = _addresses(3, socket.SOCK_DGRAM)
    transfer = dict(enumerate(_addresses(3, socket.SOCK_STREAM), start=1))
    seen_by_others = {1: real[1], 2: real[2], 3: proxy_in}
    seen_by_3 = {1: to_1, 2: to_2, 3: real[3]}
    cut = _Cut()
    acked: set[str] = set()
    acked_while_cut: set[str] = set()
    async with trio.open_nursery() as proxies, AsyncExitStack() as stack:
        await proxies.start(cut.relay, proxy_in, real[3])
        await proxies.start(cut.relay, to_1, real[1])
        await proxies.start(cut.relay, to_2, real[2])
        replicas = []
        for p in (1, 2, 3):
            node = _node("epto", p, seen_by_3 if p == 3 else seen_by_others, bind=real[p])
            cfg = ReplicaConfig(
                peers=transfer,
                transfer_bind=transfer[p],
                acknowledge=acknowledge,  # type: ignore[arg-type]
                audit_interval=0.3,
            )
            replicas.append(await stack.enter_async_context(ReplicatedNode(KV(), node, cfg)))
        for r in replicas:
            await r.wait_ready(timeout=20)

        async def write(r: ReplicatedNode, key: str, into: set[str] | None = None) -> None:
            try:
                await r.call("set", key, 1, timeout=1.5)
            except CommandTimeoutError:
                return
            acked.add(key)
            if into is not None:
                into.add(key)

        for i in range(6):
            await write(replicas[i % 3], f"before-{i}")
        cut.cut = True
        async with trio.open_nursery() as calls:
            for i in range(3):
                calls.start_soon(write, replicas[2], f"cut-off-{i}", acked_while_cut)
                calls.start_soon(write, replicas[i % 2], f"group-{i}")
        await trio.sleep(max(0.0, 2.0 - 1.5))
        cut.cut = False
        # After the cut: traffic lets replica 3's audits compare prefixes.
        with trio.fail_after(45):
            i = 0
            while True:
                await write(replicas[i % 2], f"after-{i}")
                i += 1
                states = [r.machine.data for r in replicas]  # type: ignore[attr-defined]
                if all(r.ready for r in replicas) and all(s == states[0] for s in states):
                    break
                await trio.sleep(0.1)
        final = dict(replicas[0].machine.data)  # type: ignore[attr-defined]
        assert cut.dropped > 0
        proxies.cancel_scope.cancel()
    return acked, acked_while_cut, final


@pytest.mark.trio
async def test_a_cut_off_epto_replica_acknowledges_nothing_the_group_loses() -> None:
    with trio.fail_after(90):
        acked, acked_while_cut, final = await _cut_off_run(None)
    # Its calls timed out: none returned ok while it was cut off ...
    assert acked_while_cut == set()
    # ... and everything acknowledged anywhere is in the group's state.
    assert acked <= set(final)
    assert {f"group-{i}" for i in range(3)} <= acked


@pytest.mark.trio
async def test_with_the_local_acknowledgement_a_cut_loses_acknowledged_writes() -> None:
    with trio.fail_after(90):
        _acked, acked_while_cut, final = await _cut_off_run("local")
    # The cut-off replica applied its own commands and said ok; the group
    # never ordered them, and its audits replaced its state.
    assert acked_while_cut
    assert not acked_while_cut & set(final)


# -- recovering together -------------------------------------------------------------


@pytest.mark.trio
async def test_token_ring_replicas_recovering_together_are_ready_soon(tmp_path: Path) -> None:
    # Five replicas; two are stopped and started again as themselves while a
    # new identity joins: three recover at once, two of them from their own
    # disk, and none waits on another that is not ready.
    members = dict(enumerate(_addresses(5, socket.SOCK_STREAM), start=1))
    transfer = dict(enumerate(_addresses(5, socket.SOCK_STREAM), start=1))

    def replica(pid: int) -> ReplicatedNode:
        cfg = ReplicaConfig(
            data_dir=str(tmp_path / str(pid)),
            peers=transfer,
            transfer_bind=transfer.get(pid, "127.0.0.1:0"),
            snapshot_every=5,
        )
        if pid in members:
            node = _node("token-ring", pid, members)
        else:
            port = free_ports(1, socket.SOCK_STREAM)[0]
            node = NodeConfig(
                mode="token-ring", pid=pid, bind=f"127.0.0.1:{port}", contacts={1: members[1]}
            )
        return ReplicatedNode(KV(), node, cfg)

    took: dict[int, float] = {}

    async def ready(r: ReplicatedNode, start: float) -> None:
        await r.wait_ready(timeout=20)
        took[r.node_config.pid] = trio.current_time() - start

    stop = trio.CancelScope()

    async def traffic(stay: list[ReplicatedNode]) -> None:
        with stop:
            for i in range(30):
                with trio.move_on_after(3):  # it may wait while the view changes
                    await stay[i % 3].call("incr", "n", 1)
                await trio.sleep(0.02)

    with trio.fail_after(120):
        async with AsyncExitStack() as stack:
            stay = [await stack.enter_async_context(replica(p)) for p in (1, 2, 3)]
            async with AsyncExitStack() as leaving:
                going = [await leaving.enter_async_context(replica(p)) for p in (4, 5)]
                for r in (*stay, *going):
                    await r.wait_ready(timeout=20)
                for i in range(20):
                    await (*stay, *going)[i % 5].call("incr", "n", 1, timeout=20)
            async with trio.open_nursery() as nursery, AsyncExitStack() as again:
                nursery.start_soon(traffic, stay)
                # Started together (entering returns at once; readiness after).
                start = trio.current_time()
                back = [await again.enter_async_context(replica(p)) for p in (4, 5, 9)]
                assert not back[2].ready
                async with trio.open_nursery() as waiting:
                    for r in back:
                        waiting.start_soon(ready, r, start)
                print(
                    "ready after the start, s:", {p: round(t, 2) for p, t in sorted(took.items())}
                )
                assert sorted(took) == [4, 5, 9] and max(took.values()) < 20
                everyone = [*stay, *back]
                stop.cancel()
                await _agreed(everyone)
                n = everyone[0].machine.data["n"]  # type: ignore[attr-defined]
                # On the group's state (a command of the cancelled traffic may
                # still come before it): at least the group's value plus one.
                assert await back[2].call("incr", "n", 1, timeout=20) >= n + 1 > 20
                await _agreed(everyone)


# -- quorum ------------------------------------------------------------------------


@pytest.mark.trio
async def test_an_epto_replica_without_a_quorum_says_so() -> None:
    members = dict(enumerate(_addresses(3, socket.SOCK_DGRAM), start=1))
    transfer = dict(enumerate(_addresses(3, socket.SOCK_STREAM), start=1))

    def replica(p: int) -> ReplicatedNode:
        cfg = ReplicaConfig(peers=transfer, transfer_bind=transfer[p], quorum_timeout=0.6)
        return ReplicatedNode(KV(), _node("epto", p, members), cfg)

    with trio.fail_after(30):
        async with replica(1) as one:
            async with replica(2) as two:
                async with replica(3) as three:
                    for r in (one, two, three):
                        await r.wait_ready(timeout=20)
                    while not one.status().quorum:  # it has heard them
                        await trio.sleep(0.05)
                await trio.sleep(1.0)
                assert one.status().quorum  # two of three: still a majority
            # Both others gone: it hears nobody within quorum_timeout.
            while one.status().quorum:
                await trio.sleep(0.05)
            assert one.status().quorum is False
