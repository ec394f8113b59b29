"""One conformance suite for every transport (in the spirit of trio's
``trio.testing.check_*_stream`` functions).

A transport module provides a :class:`Transport`: how to start a node, how to
feed it hostile bytes. Every scenario runs against it with the same
assertions. Real sockets bind 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio
from epto.transports import DeliveryOverflowError, NodeConfig, TransportStatistics

import epto
import epto.wire
from epto.check import check

WAIT = 30.0
"""Upper bound of any wait; scenarios normally finish in well under a second."""


def protocol(n: int) -> epto.Config:
    """Short rounds and a small fanout, so that a group of 20 nodes sharing one
    test process (and a loaded machine) is far from CPU-bound: the paper's safe
    fanout for 20 is 15, which makes every node decode 15 balls a round.

    Agreement in EpTO holds when copies arrive within TTL rounds; a process
    whose event loop lags by more than that shows holes (safety still holds).
    The round interval grows with the group so that the per-second work of the
    process stays small; the TTL is generous (0.4 s and more), so that a test
    process descheduled for a while on a busy machine still meets it.
    """
    interval = 0.02 if n <= 5 else 0.05
    return epto.Config(
        fanout=min(n - 1, 4), ttl=2 * math.ceil(math.log2(n)) + 16, round_interval=interval
    )


class Transport(ABC):
    """How the suite starts nodes of one transport."""

    name: str
    faults = frozenset({"truncated", "bad-magic", "oversized", "wrong-group"})
    """Faults the garbage of :func:`garbage_datagrams` must be refused for."""
    large_group = 20
    """Members of the large group scenario, all in this one test process."""

    @abstractmethod
    def group(self) -> contextlib.AbstractAsyncContextManager[Group]: ...


class Group(ABC):
    """Running nodes of one transport, with a delivery collector per node."""

    def __init__(self) -> None:
        self.sequences: dict[int, list[epto.EventId]] = {}
        self.broadcast_ids: set[epto.EventId] = set()
        self.live: list[int] = []

    @abstractmethod
    async def start(self, pid: int, config: NodeConfig) -> None:
        """Start a node (binding a free port) and begin collecting its deliveries."""

    @abstractmethod
    def address(self, pid: int) -> Any: ...

    @abstractmethod
    def node(self, pid: int) -> Any: ...

    @abstractmethod
    async def stop(self, pid: int, *, graceful: bool) -> None: ...

    @abstractmethod
    async def send_garbage(self, pid: int, datagrams: list[bytes]) -> None: ...

    def statistics(self, pid: int) -> TransportStatistics:
        stats: TransportStatistics = self.node(pid).statistics()
        return stats

    def broadcast(self, pid: int, payload: bytes) -> epto.EventId:
        eid: epto.EventId = self.node(pid).broadcast(payload)
        self.broadcast_ids.add(eid)
        return eid

    async def start_all(self, pids: list[int], config: epto.Config, **fields: Any) -> None:
        for pid in pids:
            await self.start(
                pid, NodeConfig(pid=pid, bind=self.bind_for(pid), epto=config, seed=pid, **fields)
            )
        for pid in pids:
            for other in self.live:
                self.node(pid).engine.add_member(other, self.address(other))
                self.node(other).engine.add_member(pid, self.address(pid))

    def bind_for(self, pid: int) -> Any:
        return "127.0.0.1:0"

    async def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        with trio.move_on_after(WAIT):
            while not condition():
                await trio.sleep(0.005)
            return
        detail = {pid: (len(self.sequences[pid]), self.statistics(pid)) for pid in self.live}
        raise AssertionError(f"timed out waiting for {what}: {detail}")

    async def wait_delivered(self, events: set[epto.EventId], pids: list[int]) -> None:
        def done() -> bool:
            return all(events <= set(self.sequences[p]) for p in pids)

        await self.wait_until(done, f"{len(events)} events at {pids}")


# -- scenarios ----------------------------------------------------------------


def assert_safe(group: Group) -> epto.check.CheckReport:
    report = check(group.sequences, broadcast=group.broadcast_ids)
    assert not report.order_violations, report.summary()
    assert not report.integrity_violations, report.summary()
    return report


async def all_deliver_same_sequence(transport: Transport, n: int) -> None:
    pids = list(range(1, n + 1))
    async with transport.group() as g:
        await g.start_all(pids, protocol(n))
        for k in range(3):
            for pid in pids:
                g.broadcast(pid, b"event %d from %d" % (k, pid))
            await trio.sleep(0.01)
        await g.wait_delivered(set(g.broadcast_ids), pids)
        report = assert_safe(g)
        assert report.ok, report.summary()
        first = g.sequences[pids[0]]
        assert len(first) == 3 * n
        assert all(g.sequences[p] == first for p in pids)
        for pid in pids:
            stats = g.statistics(pid)
            assert stats.delivered == 3 * n
            assert stats.holes_detected == 0
            assert stats.rejected == {}


async def all_deliver_3(transport: Transport) -> None:
    await all_deliver_same_sequence(transport, 3)


async def all_deliver_large(transport: Transport) -> None:
    await all_deliver_same_sequence(transport, transport.large_group)


async def node_stops_rest_go_on(transport: Transport) -> None:
    pids = [1, 2, 3, 4, 5]
    async with transport.group() as g:
        await g.start_all(pids, protocol(5))
        for pid in pids:
            g.broadcast(pid, b"before")
        await g.wait_delivered(set(g.broadcast_ids), pids)
        await g.stop(1, graceful=False)
        rest = pids[1:]
        after = {g.broadcast(pid, b"after %d" % i) for i in range(3) for pid in rest}
        await g.wait_delivered(after, rest)
        report = assert_safe(g)
        assert all(g.sequences[p] == g.sequences[2] for p in rest), report.summary()


async def node_joins(transport: Transport) -> None:
    pids = [1, 2, 3, 4]
    config = protocol(5)
    async with transport.group() as g:
        await g.start_all(pids, config)
        for pid in pids:
            g.broadcast(pid, b"old")
        await g.wait_delivered(set(g.broadcast_ids), pids)
        await g.start_all([9], config)
        assert g.statistics(9).members == 5
        # Old members speak first; the newcomer's logical clock learns the
        # group's time from their events before it broadcasts itself.
        news = {g.broadcast(pid, b"news") for pid in pids}
        await g.wait_delivered(news, [*pids, 9])
        joined = {g.broadcast(9, b"hello %d" % i) for i in range(3)}
        await g.wait_delivered(joined, [*pids, 9])
        assert_safe(g)
        assert all(g.sequences[p] == g.sequences[1] for p in pids)
        # Everything broadcast after the join ends everyone's sequence, in the
        # same order at the newcomer (which may also have caught old events
        # still in flight: a subsequence of the others', by the order check).
        recent = len(news) + len(joined)
        assert set(g.sequences[1][-recent:]) == news | joined
        assert g.sequences[9][-recent:] == g.sequences[1][-recent:]


LIMITS = epto.Limits(max_frame_size=1400)


def garbage_datagrams(seed: int = 7) -> list[bytes]:
    """Random bytes, cut and padded frames, an oversized datagram, a frame of
    another group, and frames sealed under a key the group does not have."""
    rng = random.Random(seed)
    ball = {(5, 0): (epto.Event(source=5, seq=0, ts=1, payload=b"p" * 40), 1)}
    real = epto.wire.FrameCodec(group=0, limits=LIMITS).encode(5, ball)[0]
    other_group = epto.wire.FrameCodec(group=77, limits=LIMITS).encode(5, ball)[0]
    outsider = epto.wire.GroupSealer(OUTSIDER_KEY, counter_start=1, prefix=b"\0\0\0\1")
    sealed = epto.wire.FrameCodec(group=0, limits=LIMITS, sealer=outsider).encode(5, ball)[0]
    out = [rng.randbytes(rng.randrange(1, 300)) for _ in range(20)]
    out += [b"\xe7\x70", real[:-3], real + b"tail", b"\x00" * (LIMITS.max_frame_size + 100)]
    out += [real[:2] + b"\x09" + real[3:], other_group, sealed]
    return out


GROUP_KEY = epto.GroupKey(key_id=1, secret=bytes(range(32)))
OUTSIDER_KEY = epto.GroupKey(key_id=1, secret=bytes(range(1, 33)))


async def garbage_arrives(transport: Transport, *, sealed: bool = False) -> None:
    pids = [1, 2, 3]
    key = GROUP_KEY if sealed else None
    async with transport.group() as g:
        await g.start_all(pids, protocol(3), limits=LIMITS, group_key=key)
        junk = garbage_datagrams()
        if sealed:  # an unsealed frame of the right group is refused too
            ball = {(5, 0): (epto.Event(source=5, seq=0, ts=1, payload=b"x"), 1)}
            junk += epto.wire.FrameCodec(group=0, limits=LIMITS).encode(5, ball)
        await g.send_garbage(1, junk)

        def counted() -> bool:
            return sum(g.statistics(1).rejected.values()) == len(junk)

        await g.wait_until(counted, "rejections")
        for pid in pids:
            g.broadcast(pid, b"still alive")
        await g.wait_delivered(set(g.broadcast_ids), pids)
        report = assert_safe(g)
        assert report.ok, report.summary()
        rejected = g.statistics(1).rejected
        assert transport.faults <= set(rejected), rejected
        if sealed:
            assert {"bad-tag", "unsealed"} <= set(rejected), rejected
        assert g.statistics(2).rejected == {}
        assert g.statistics(1).delivered == 3


async def garbage_arrives_sealed(transport: Transport) -> None:
    await garbage_arrives(transport, sealed=True)


async def shutdown_while_busy(transport: Transport) -> None:
    pids = [1, 2, 3, 4, 5]
    async with transport.group() as g:
        await g.start_all(pids, protocol(5))
        stop_talking = trio.Event()

        async def talk(pid: int) -> None:
            i = 0
            while not stop_talking.is_set() and pid in g.live:
                g.broadcast(pid, b"%d-%d" % (pid, i))
                i += 1
                await trio.sleep(0.002)

        async with trio.open_nursery() as nursery:
            for pid in pids:
                nursery.start_soon(talk, pid)
            await trio.sleep(0.1)
            with trio.fail_after(WAIT):
                await g.stop(1, graceful=True)  # flushes its events while others keep talking
            await trio.sleep(0.05)
            stop_talking.set()
        rest = pids[1:]
        mine = {e for e in g.broadcast_ids if e[0] == 1}
        assert mine
        await g.wait_delivered(mine, rest)
        await g.wait_delivered({e for e in g.broadcast_ids if e[0] != 1}, rest)
        report = assert_safe(g)
        assert all(g.sequences[p] == g.sequences[2] for p in rest), report.summary()
        # Closing the others while they still gossip ends within the bound too.
        with trio.fail_after(WAIT):
            for pid in rest:
                g.broadcast(pid, b"last words")
                await g.stop(pid, graceful=True)


SCENARIOS: list[Callable[[Transport], Awaitable[None]]] = [
    all_deliver_3,
    all_deliver_large,
    node_stops_rest_go_on,
    node_joins,
    garbage_arrives,
    garbage_arrives_sealed,
    shutdown_while_busy,
]


# -- groups for the trio-based transports and for ZeroMQ ------------------------


class TrioGroup(Group):
    """Nodes that are async context managers (trio UDP, in-memory hub)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        make: Callable[[NodeConfig], Any],
        garbage: Callable[[Any, list[bytes]], Awaitable[None]],
        bind: Callable[[int], Any] | None = None,
    ) -> None:
        super().__init__()
        self._nursery = nursery
        self._make = make
        self._garbage = garbage
        self._bind = bind
        self._nodes: dict[int, Any] = {}

    def bind_for(self, pid: int) -> Any:
        return self._bind(pid) if self._bind else super().bind_for(pid)

    async def start(self, pid: int, config: NodeConfig) -> None:
        node = self._make(config)
        self._nodes[pid] = node
        self.sequences[pid] = []
        await self._nursery.start(self._run, pid, node)
        self.live.append(pid)

    async def _run(self, pid: int, node: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with node:
            task_status.started()
            async for delivery in node:
                self.sequences[pid].append(delivery.event.id)

    def address(self, pid: int) -> Any:
        return self._nodes[pid].address

    def node(self, pid: int) -> Any:
        return self._nodes[pid]

    async def stop(self, pid: int, *, graceful: bool) -> None:
        self.live.remove(pid)
        node = self._nodes[pid]
        if graceful:
            await node.aclose()
        else:
            node.abort()

    async def send_garbage(self, pid: int, datagrams: list[bytes]) -> None:
        await self._garbage(self._nodes[pid], datagrams)

    async def close(self) -> None:
        for pid in list(self.live):
            self._nodes[pid].abort()


@contextlib.asynccontextmanager
async def trio_group(
    make: Callable[[NodeConfig], Any],
    garbage: Callable[[Any, list[bytes]], Awaitable[None]],
    bind: Callable[[int], Any] | None = None,
) -> AsyncIterator[Group]:
    async with trio.open_nursery() as nursery:
        group = TrioGroup(nursery, make, garbage, bind)
        try:
            yield group
        finally:
            await group.close()


class ThreadGroup(Group):
    """Nodes with a synchronous, thread-safe API (ZeroMQ)."""

    def __init__(
        self, make: Callable[[NodeConfig], Any], garbage: Callable[[Any, list[bytes]], None]
    ) -> None:
        super().__init__()
        self._make = make
        self._garbage = garbage
        self._nodes: dict[int, Any] = {}
        self._threads: list[threading.Thread] = []

    async def start(self, pid: int, config: NodeConfig) -> None:
        node = self._make(config).start()
        self._nodes[pid] = node
        self.sequences[pid] = []

        def collect() -> None:
            for delivery in node:
                self.sequences[pid].append(delivery.event.id)

        thread = threading.Thread(target=collect, daemon=True)
        thread.start()
        self._threads.append(thread)
        self.live.append(pid)

    def address(self, pid: int) -> Any:
        return self._nodes[pid].address

    def node(self, pid: int) -> Any:
        return self._nodes[pid]

    async def stop(self, pid: int, *, graceful: bool) -> None:
        self.live.remove(pid)
        node = self._nodes[pid]
        await trio.to_thread.run_sync(node.close if graceful else node.abort)

    async def send_garbage(self, pid: int, datagrams: list[bytes]) -> None:
        await trio.to_thread.run_sync(self._garbage, self._nodes[pid], datagrams)

    async def close(self) -> None:
        for pid in list(self.live):
            await trio.to_thread.run_sync(self._nodes[pid].abort)
        for thread in self._threads:
            await trio.to_thread.run_sync(thread.join, 5.0)


@contextlib.asynccontextmanager
async def thread_group(
    make: Callable[[NodeConfig], Any], garbage: Callable[[Any, list[bytes]], None]
) -> AsyncIterator[Group]:
    group = ThreadGroup(make, garbage)
    try:
        yield group
    finally:
        await group.close()


__all__ = ["SCENARIOS", "DeliveryOverflowError", "Transport", "thread_group", "trio_group"]
