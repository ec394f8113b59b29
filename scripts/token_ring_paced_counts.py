"""Frames, writes and event-loop wake-ups per command of the token ring on
TCP, paced (three processes on loopback, the schedule of ``epto bench
replication``).

    python scripts/token_ring_paced_counts.py --commands 1500 --rate 500

Each worker runs a ``TokenRingNode``, waits until the ring is formed, then
submits ``--commands`` commands at ``--rate`` per second (the bench's
submitter: one wake-up per ``--submit-tick``, default the node's
batching period under a paced stream, ``max(broadcast_hold, max_hold)``)
and counts, from its first submission until it applied
every command of the three: the frames it sent and received (the node's
statistics), its writes to sockets by the links' tasks
(``trio.SocketStream.send_all`` calls; the writes a turn makes at once on an
idle stream are not among them), trio's task steps and I/O waits (an
instrument) and its CPU seconds. The figures printed are sums over the three
workers divided by the commands applied (3 x ``--commands``).

``--wake-ups`` also prints, per worker and second, what each pass of trio's
loop (from one I/O wait to the next) fed the process: the kinds of the
messages received, ``timer`` for a due timer (a heartbeat round, the token's
pass, held broadcasts leaving, a delivery cut at ``DELIVER_CHUNK``), or, if
nothing, the tasks that ran (``submit``, ``apply``, ``turn``).
``--heartbeat-interval`` and ``--suspect-timeout`` set the token ring's
failure detector, as in ``epto bench replication``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import time
from collections import Counter
from typing import Any

from epto.transports._ports import free_ports


def _worker(
    index: int, ports: list[int], args: argparse.Namespace, barrier: Any, queue: Any
) -> None:
    import trio
    from epto.transports.trio_tcp import TokenRingNode

    from epto.benchmarks.replication import _ring_config, _ring_formed, _ring_period, _trio_submit
    from epto.endpoint import NodeConfig

    counts = {"steps": 0, "io_waits": 0, "writes": 0}
    counting = [False]
    send_all = trio.SocketStream.send_all

    async def counted_send_all(self: Any, data: Any) -> None:
        if counting[0]:
            counts["writes"] += 1
        await send_all(self, data)

    trio.SocketStream.send_all = counted_send_all  # type: ignore[method-assign]

    # --wake-ups: what each pass of trio's loop (from one I/O wait to the
    # next) fed the process: the kinds of the messages it received, "timer"
    # for a due timer; a pass that fed it nothing is named by its tasks
    # ("submit": the submitter, "apply": the application's loop, "turn": the
    # turn task alone). A pass with no time waited (trio polls without
    # sleeping between two batches of tasks) counts too.
    from epto.tokenring import TokenRingProcess

    fed: list[str] = []
    passes: Counter[str] = Counter()
    if args.wake_ups:
        receive = TokenRingProcess.receive
        handle_timer = TokenRingProcess.handle_timer

        def counted_receive(self: Any, sender: Any, message: Any, now: float) -> None:
            fed.append(type(message).__name__)
            receive(self, sender, message, now)

        def counted_timer(self: Any, now: float) -> None:
            if now >= self.get_timer():
                fed.append("timer")
            handle_timer(self, now)

        TokenRingProcess.receive = counted_receive  # type: ignore[method-assign]
        TokenRingProcess.handle_timer = counted_timer  # type: ignore[method-assign]

    tasks = {"_trio_submit": "submit", "main": "apply"}

    class Counting(trio.abc.Instrument):
        def before_task_step(self, task: Any) -> None:
            if counting[0]:
                counts["steps"] += 1
                if args.wake_ups:
                    fed.append("task:" + tasks.get(task.name.rsplit(".", 1)[-1], "turn"))

        def before_io_wait(self, timeout: float) -> None:
            if counting[0]:
                counts["io_waits"] += 1
                if args.wake_ups:
                    inputs = sorted({x for x in fed if not x.startswith("task:")})
                    steps = sorted({x[5:] for x in fed if x.startswith("task:")})
                    passes[" ".join(inputs) if inputs else "+".join(steps) or "nothing"] += 1
            fed.clear()

    import cProfile

    profiler = cProfile.Profile(time.process_time)
    members = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(ports)}
    pid = index + 1
    config = NodeConfig(
        mode="token-ring",
        pid=pid,
        bind=members[pid],
        members=members,
        tokenring=_ring_config(args),
        seed=pid,
    )
    total = 3 * args.commands
    out: dict[str, Any] = {}

    async def main() -> None:
        async with TokenRingNode(config) as node:
            await _ring_formed(node, 3, 30.0)
            await trio.to_thread.run_sync(barrier.wait)
            t0 = time.time()
            cpu0 = time.process_time()
            before = node.statistics()
            counting[0] = True
            if args.profile and index == 0:
                profiler.enable()
            latencies: list[float] = []
            submits: dict[Any, float] = {}

            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    _trio_submit, node, args, t0, submits, _ring_period(config.tokenring)
                )
                n = 0
                async for delivery in node:
                    n += 1
                    sent = submits.get(delivery.event.id)
                    if sent is not None:
                        latencies.append(time.time() - sent)
                    if n == total:
                        break
                counting[0] = False
                if args.profile and index == 0:
                    profiler.disable()
                    profiler.dump_stats(args.profile)
                after = node.statistics()
                out["cpu"] = time.process_time() - cpu0
                out["frames_sent"] = after.frames_sent - before.frames_sent
                out["frames_received"] = after.frames_received - before.frames_received
                out["latencies"] = latencies
                await trio.to_thread.run_sync(barrier.wait)
                nursery.cancel_scope.cancel()

    trio.run(main, instruments=[Counting()])
    out.update(counts)
    out["passes"] = passes
    queue.put((index, out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commands", type=int, default=1500)
    p.add_argument("--rate", type=float, default=500.0)
    p.add_argument("--submit-tick", type=float, default=None)
    p.add_argument("--token-hold", type=float, default=None)
    p.add_argument("--broadcast-hold", type=float, default=None)
    p.add_argument("--max-hold", type=float, default=None)
    p.add_argument("--heartbeat-interval", type=float, default=None)
    p.add_argument("--suspect-timeout", type=float, default=None)
    p.add_argument("--profile", help="write the first worker's profile of the window here")
    p.add_argument(
        "--wake-ups",
        action="store_true",
        help="print what the passes of trio's loop fed the processes, per worker and second",
    )
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(3)
    queue = ctx.Queue()
    ports = free_ports(3, socket.SOCK_STREAM)
    procs = [ctx.Process(target=_worker, args=(i, ports, args, barrier, queue)) for i in range(3)]
    for proc in procs:
        proc.start()
    results = dict(queue.get(timeout=120) for _ in range(3))
    for proc in procs:
        proc.join(timeout=10)
    total = 3 * args.commands
    lat = sorted(x for r in results.values() for x in r["latencies"])
    print(f"commands {total}, rate {args.rate:g}/s per process")
    for key in ("frames_sent", "frames_received", "writes", "io_waits", "steps"):
        s = sum(r[key] for r in results.values())
        print(f"{key:16} {s:8d}  {s / total:6.2f} per command")
    cpu = sum(r["cpu"] for r in results.values())
    print(f"{'cpu s':16} {cpu:8.2f}  {1e6 * cpu / total:6.0f} us per command")
    print(f"{'local p50':16} {1e3 * lat[len(lat) // 2]:8.1f} ms")
    if args.wake_ups:
        # Per worker and second of the window (the commands' span at the rate).
        seconds = 3 * args.commands / args.rate
        passes: Counter[str] = Counter()
        for r in results.values():
            passes.update(r["passes"])
        print("passes of trio's loop per worker and second, by what they fed the process:")
        for name, n in passes.most_common():
            print(f"{n / seconds:8.1f}  {name}")


if __name__ == "__main__":
    main()
