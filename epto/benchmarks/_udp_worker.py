"""One worker of ``epto bench udp_scale``: a block of trio UDP nodes in one event loop.

The worker talks to the parent over two one-way pipes, in this order::

    worker -> parent  ("bound", {pid: "host:port"})   its nodes' sockets are bound
    parent -> worker  ("table", {pid: "host:port"})   every node of every worker
    worker -> parent  ("ready", None)                 its nodes know the group
    parent -> worker  ("go", start)                   broadcast at time.time() == start
    worker -> parent  ("done", time)                  its nodes delivered everything
    parent -> worker  ("stop", None)                  every worker is done, or time is up
    worker -> parent  ("result", {...})               sequences, times, counters

A worker keeps its nodes running after it said "done": the other workers'
nodes may still need the copies they relay. Any failure is sent as
``("error", text)`` instead of the next message.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import attrs

from epto import Config, EventId

LAG_PERIOD = 0.05
"""Seconds between two probes of the event loop's lag."""


@attrs.frozen(kw_only=True)
class WorkerSpec:
    """What one worker runs (pickled to a spawned process)."""

    pids: tuple[int, ...]
    senders: tuple[int, ...]
    """The worker's nodes that broadcast."""
    events: int
    """Broadcasts per sender."""
    total: int
    """Events in the whole run: what every node delivers."""
    config: Config
    seed: int


def digest(sequence: list[EventId]) -> str:
    """A digest of a delivered sequence: equal digests, equal sequences."""
    h = hashlib.blake2b(digest_size=16)
    for source, seq in sequence:
        h.update(b"%d,%d;" % (source, seq))
    return h.hexdigest()


def main(inbox: Connection, outbox: Connection, spec: WorkerSpec) -> None:
    """The entry point of a worker process (or of a thread, with one worker)."""
    import trio

    try:
        trio.run(_run, inbox, outbox, spec)
    except BaseException as err:
        outbox.send(("error", f"{type(err).__name__}: {err}"))
        raise
    finally:
        outbox.close()


async def _receive(inbox: Connection, expected: str) -> Any:
    import trio

    kind, value = await trio.to_thread.run_sync(inbox.recv)
    if kind != expected:
        raise RuntimeError(f"expected {expected!r} from the parent, got {kind!r}")
    return value


async def _run(inbox: Connection, outbox: Connection, spec: WorkerSpec) -> None:
    import trio

    from epto.transports import NodeConfig
    from epto.transports.trio_udp import UdpNode

    cpu_start = time.process_time()
    total = spec.total
    nodes: dict[int, UdpNode] = {}
    sequences: dict[int, list[EventId]] = {pid: [] for pid in spec.pids}
    delivered_at: dict[int, list[float]] = {pid: [] for pid in spec.pids}
    complete = trio.Event()
    finished = 0

    async def run_node(pid: int, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal finished
        config = NodeConfig(
            pid=pid, epto=spec.config, seed=spec.seed * 100_003 + pid, flush_timeout=0.0
        )
        sequence = sequences[pid]
        times = delivered_at[pid]
        clock: Callable[[], float] = time.time
        async with UdpNode(config) as node:
            nodes[pid] = node
            task_status.started()
            async for delivery in node:
                sequence.append(delivery.event.id)
                times.append(clock())
                if len(sequence) == total:
                    finished += 1
                    if finished == len(spec.pids):
                        complete.set()

    lags: list[float] = []

    async def probe_lag() -> None:
        # How late the loop wakes a sleeping task: rounds are late by as much.
        while True:
            before = trio.current_time()
            await trio.sleep(LAG_PERIOD)
            lags.append(trio.current_time() - before - LAG_PERIOD)

    async def say_done() -> None:
        await complete.wait()
        outbox.send(("done", time.time()))

    async with trio.open_nursery() as nursery:
        for pid in spec.pids:
            await nursery.start(run_node, pid)
        outbox.send(("bound", {pid: node.address for pid, node in nodes.items()}))
        table: dict[int, str] = await _receive(inbox, "table")
        for node in nodes.values():
            for pid, address in table.items():
                node.engine.add_member(pid, address)
        outbox.send(("ready", None))
        # Every worker broadcasts at the same wall-clock instant: one that
        # heard "go" first must not flood the others' nodes (whose loops then
        # take long to hear it) before they broadcast too.
        start: float = await _receive(inbox, "go")
        await trio.sleep(max(0.0, start - time.time()))
        cpu_go = time.process_time()
        broadcast_at: dict[EventId, float] = {}
        for k in range(spec.events):
            for pid in spec.senders:
                eid = nodes[pid].broadcast(b"event %d of %d" % (k, pid))
                broadcast_at[eid] = time.time()
        nursery.start_soon(probe_lag)
        nursery.start_soon(say_done)
        await _receive(inbox, "stop")
        cpu_end = time.process_time()
        stats = [node.statistics() for node in nodes.values()]
        nursery.cancel_scope.cancel()
    outbox.send(
        (
            "result",
            {
                "sequences": sequences,
                "delivered_at": delivered_at,
                "digests": {pid: digest(s) for pid, s in sequences.items()},
                "broadcast_at": broadcast_at,
                "cpu": cpu_end - cpu_start,
                "cpu_run": cpu_end - cpu_go,
                "lags": lags,
                "rounds": max(s.rounds for s in stats),
                "rounds_min": min(s.rounds for s in stats),
                "datagrams_sent": sum(s.datagrams_sent for s in stats),
                "datagrams_received": sum(s.datagrams_received for s in stats),
                "send_failures": sum(s.send_failures for s in stats),
                "rejected": sum(sum(s.rejected.values()) for s in stats),
                "holes_detected": sum(s.holes_detected for s in stats),
                "late_rejected": sum(s.late_rejected for s in stats),
                "deliveries_dropped": sum(s.deliveries_dropped for s in stats),
            },
        )
    )
