"""Replicated counter on 3 loopback processes: EpTO (trio UDP, ZeroMQ) and the
token ring (trio TCP) against PySyncObj (Raft).

Every system runs as three OS processes on 127.0.0.1. Once all three are up
(a barrier), each submits ``--commands`` small increment commands at
``--rate`` per second (or as fast as it can with ``--rate 0``); every process
applies every command it delivers to a counter and records when. Figures:

* throughput: commands applied at every replica per second (3 x commands over
  the time from the first submission to the last replica applying the last);
* latency: from submission to application at the submitting replica (local)
  and at the last of the three replicas (all), p50 and p99;
* cpu s: CPU seconds the three workers used from their first submission until
  they had applied every command (less noisy than the rates on a shared machine);
  a run that did not apply everything shows ``-`` there, and its notes the CPU
  counted until the timeout, which is not comparable;
* EpTO's floor: an event is delivered once stable, ``TTL`` rounds after it
  was broadcast, so latency cannot go below TTL x round interval.

The EpTO and token-ring runs also check the three delivery sequences with
``epto.check``; the token-ring notes count view changes, fetches and the
frames the TCP driver dropped during the measurement (and before it, if any);
the EpTO-over-UDP notes say where copies were lost, when any were: datagrams
the kernel dropped (sent minus received, summed over the three), send
failures, copies refused because the order had passed them, and holes.
Every worker keeps serving (relaying, acknowledging) until all three have
applied everything, as a replica in service does. ``--stall`` stops the
first worker's process for a while mid-run, as a loaded machine deschedules
a replica.
Needs the ``trio`` and ``zmq`` extras and PySyncObj (``pip install pysyncobj``).

Size: one benchmark harness for four systems (about 500 lines): the worker
of each system, the submitter, and the one table they are compared in;
splitting it would scatter one measurement protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue as queue_module
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

SYSTEMS = ("epto-trio", "epto-zmq", "token-ring", "pysyncobj")
_BURST = 64
"""Most commands a trio submitter submits before yielding to its node."""
_STALL_AT = 0.25
"""Seconds after the start at which ``--stall`` stops the first worker."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--commands", type=int, default=3000, help="commands per process")
    p.add_argument("--rate", type=float, default=2000.0, help="commands/s per process; 0 = max")
    p.add_argument("--round-interval", type=float, default=0.01, help="EpTO round, seconds")
    p.add_argument("--clock", choices=("logical", "global"), default="global")
    p.add_argument(
        "--submit-tick",
        type=float,
        default=None,
        help="least seconds between two wake-ups of every system's submitter (commands due "
        "meanwhile are submitted together; their latency counts from when each was due); "
        "default: each node's own batching period (the token ring's broadcast_hold grown to "
        "max_hold, as it is under a paced stream; EpTO's round; PySyncObj's autoTickPeriod)",
    )
    p.add_argument(
        "--token-hold",
        type=float,
        default=None,
        help="TokenRingConfig.token_hold of the token ring (default: the config's)",
    )
    p.add_argument(
        "--broadcast-hold",
        type=float,
        default=None,
        help="TokenRingConfig.broadcast_hold of the token ring (default: the config's)",
    )
    p.add_argument(
        "--max-hold",
        type=float,
        default=None,
        help="TokenRingConfig.max_hold of the token ring (default: the config's; 0: fixed holds)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=None,
        help="TokenRingConfig.heartbeat_interval of the token ring (default: the config's; "
        "PySyncObj's leader sends its heartbeats every appendEntriesPeriod, 0.1 s)",
    )
    p.add_argument(
        "--suspect-timeout",
        type=float,
        default=None,
        help="TokenRingConfig.suspect_timeout of the token ring (default: the config's; "
        "PySyncObj's followers start an election after raftMinTimeout, 0.4 s, or more)",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument(
        "--stall",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop the first worker's process (SIGSTOP) for SECONDS, "
        f"{_STALL_AT:g} s after the start: a replica descheduled by a loaded machine",
    )
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument(
        "--profile",
        metavar="DIR",
        default=None,
        help="run each worker under cProfile and write DIR/<system>-<index>.pstats",
    )
    p.set_defaults(func=run)


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(("127.0.0.1", s.getsockname()[1]))
        except OSError:
            u.close()
            s.close()
            continue
        socks += [s, u]
    ports = [s.getsockname()[1] for s in socks[::2]]
    for s in socks:
        s.close()
    return ports[:n]


def _protocol(args: argparse.Namespace) -> Any:
    import epto

    return epto.Config.for_group(3, clock=args.clock, round_interval=args.round_interval)


async def _trio_submit(
    node: Any,
    args: argparse.Namespace,
    t0: float,
    submits: dict[tuple[int, int], float],
    period: float,
) -> None:
    """The schedule of every system (the threads' submitters follow it with
    ``time.sleep``), for a node on trio: command ``k`` is due
    at ``t0 + k / rate`` and counts as submitted then (its latency starts
    there). The submitter wakes at most once per ``--submit-tick`` (default
    ``period``, the node's own batching period: a broadcast made sooner
    waits in the node for it anyway) and submits every command due by then,
    at most ``_BURST`` before letting the node run. A trio wake-up costs
    about four times a thread's ``time.sleep`` (the PySyncObj submitter's),
    so one wake-up per command would charge the node for the harness's
    pacing; the wait until the tick is part of the latency measured."""
    import trio

    tick = period if args.submit_tick is None else args.submit_tick
    k = 0
    while k < args.commands:
        delay = _wait(t0, k, args.rate, tick)
        if delay > 0:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()
        dues = _due(t0, k, args.rate, args.commands)
        for due in dues:
            submits[node.broadcast(b"incr")] = due
        k += len(dues)


def _thread_submit(
    submit: Callable[[int, float], None], args: argparse.Namespace, t0: float, tick: float
) -> None:
    """The schedule of :func:`_trio_submit` in a thread (``time.sleep``):
    ``submit(k, due)`` for every command, in order."""
    k = 0
    while k < args.commands:
        delay = _wait(t0, k, args.rate, tick)
        if delay > 0:
            time.sleep(delay)
        dues = _due(t0, k, args.rate, args.commands)
        for j, due in enumerate(dues, k):
            submit(j, due)
        k += len(dues)


def _wait(t0: float, k: int, rate: float, tick: float) -> float:
    """Seconds to sleep before command ``k`` is due: at least ``tick`` when
    it is not due yet (0: it is)."""
    if rate <= 0:
        return 0.0
    delay = t0 + k / rate - time.time()
    return max(delay, tick) if delay > 0 else 0.0


def _due(t0: float, k: int, rate: float, commands: int) -> list[float]:
    """When commands ``k, k + 1, ...`` were due, for those due now (at most
    ``_BURST``, and ``k`` always: the caller waited for it); their latency
    counts from there."""
    now = time.time()
    if rate <= 0:
        return [now] * min(_BURST, commands - k)
    dues = [t0 + k / rate]
    for j in range(k + 1, min(commands, k + _BURST)):
        due = t0 + j / rate
        if due > now:
            break
        dues.append(due)
    return dues


# -- workers (one OS process each) ---------------------------------------------


def _loopback_members(ports: list[int]) -> dict[int, str]:
    """Worker ``i`` is process ``i + 1`` and listens on ``ports[i]``."""
    return {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(ports)}


def _epto_config(index: int, ports: list[int], args: argparse.Namespace) -> Any:
    from epto.transports import NodeConfig

    members = _loopback_members(ports)
    pid = index + 1
    return NodeConfig(pid=pid, bind=members[pid], members=members, epto=_protocol(args), seed=pid)


def _epto_zmq(
    index: int, ports: list[int], args: argparse.Namespace, barrier: Any
) -> dict[str, Any]:
    from epto.transports.zmq_node import ZmqNode

    config = _epto_config(index, ports, args)
    total = 3 * args.commands
    applied: dict[tuple[int, int], float] = {}
    order: list[tuple[int, int]] = []
    done = threading.Event()
    with ZmqNode(config) as node:

        def drain() -> None:
            for delivery in node:
                eid = delivery.event.id
                applied[eid] = time.time()
                order.append(eid)
                if len(order) == total:
                    done.set()
                    return

        threading.Thread(target=drain, daemon=True).start()
        barrier.wait()
        _stall_later(args, index)
        t0 = time.time()
        cpu0 = time.process_time()
        submits = {}
        tick = args.round_interval if args.submit_tick is None else args.submit_tick

        def submit(_k: int, due: float) -> None:
            submits[node.broadcast(b"incr")] = due

        _thread_submit(submit, args, t0, tick)
        done.wait(args.timeout)
        cpu = time.process_time() - cpu0
        _wait_for_all(barrier, args.timeout)
        return {"t0": t0, "submits": submits, "applied": applied, "order": order, "cpu": cpu}


def _epto_trio(
    index: int, ports: list[int], args: argparse.Namespace, barrier: Any
) -> dict[str, Any]:
    import trio

    from epto.transports.trio_udp import UdpNode

    config = _epto_config(index, ports, args)
    total = 3 * args.commands
    applied: dict[tuple[int, int], float] = {}
    order: list[tuple[int, int]] = []
    submits: dict[tuple[int, int], float] = {}
    result: dict[str, Any] = {}

    async def main() -> None:
        async with UdpNode(config) as node:
            await trio.to_thread.run_sync(barrier.wait)
            _stall_later(args, index)
            t0 = result["t0"] = time.time()
            cpu0 = time.process_time()

            async with trio.open_nursery() as nursery:
                period = config.epto.round_interval
                nursery.start_soon(_trio_submit, node, args, t0, submits, period)
                with trio.move_on_after(args.timeout):
                    async for delivery in node:
                        eid = delivery.event.id
                        applied[eid] = time.time()
                        order.append(eid)
                        if len(order) == total:
                            break
                result["cpu"] = time.process_time() - cpu0
                # Keep gossiping until every worker has applied everything: a
                # member that stops relaying early takes copies from the others.
                await trio.to_thread.run_sync(_wait_for_all, barrier, args.timeout)
                nursery.cancel_scope.cancel()
            result["losses"] = _udp_losses(node.statistics())

    trio.run(main)
    return {
        "t0": result["t0"],
        "submits": submits,
        "applied": applied,
        "order": order,
        "cpu": result.get("cpu", 0.0),
        "losses": result.get("losses", {}),
    }


def _stall_later(args: argparse.Namespace, index: int) -> None:
    """With ``--stall``, the first worker stops its own process
    ``_STALL_AT`` seconds from now; the parent (:func:`_resume_stalled`)
    continues it ``--stall`` seconds later."""
    if args.stall > 0 and index == 0:
        timer = threading.Timer(_STALL_AT, os.kill, (os.getpid(), signal.SIGSTOP))
        timer.daemon = True
        timer.start()


def _resume_stalled(pid: int, seconds: float, deadline: float) -> None:
    """Continue process ``pid`` ``seconds`` after it stopped itself (polls
    its state in ``/proc``; gives up at ``deadline``, a ``time.monotonic()``)."""
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            return  # gone
        if state == b"T":
            time.sleep(seconds)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
            return
        time.sleep(0.001)


def _wait_for_all(barrier: Any, timeout: float) -> None:
    """Wait until every worker has applied everything (or ``timeout``; a
    broken barrier means another worker failed or gave up)."""
    with contextlib.suppress(Exception):
        barrier.wait(timeout)


def _udp_losses(stats: Any) -> dict[str, int]:
    """Where an EpTO node over UDP lost copies: the datagrams it sent and
    received (the parent sums them: on loopback the difference was dropped by
    the kernel, a receive buffer full while its process was not running), the
    copies it refused because the order had passed them, the holes it knows
    of, and the frames its driver could not send."""
    return {
        "sent": stats.datagrams_sent,
        "received": stats.datagrams_received,
        "late": stats.late_rejected,
        "holes": stats.holes_detected,
        "send_failures": stats.send_failures,
    }


def _token_ring(
    index: int, ports: list[int], args: argparse.Namespace, barrier: Any
) -> dict[str, Any]:
    import trio

    from epto.endpoint import NodeConfig
    from epto.transports.trio_tcp import TokenRingNode

    members = _loopback_members(ports)
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
    applied: dict[tuple[int, int], float] = {}
    order: list[tuple[int, int]] = []
    submits: dict[tuple[int, int], float] = {}
    result: dict[str, Any] = {}

    async def main() -> None:
        async with TokenRingNode(config) as node:
            # Like PySyncObj's wait for a leader: start once the ring is formed
            # (all three members in the token list, a token accepted there).
            await _ring_formed(node, len(members), min(30.0, args.timeout))
            await trio.to_thread.run_sync(barrier.wait)
            _stall_later(args, index)
            t0 = result["t0"] = time.time()
            cpu0 = time.process_time()
            before = node.process.statistics()
            node_before = node.statistics()

            async with trio.open_nursery() as nursery:
                period = _ring_period(config.tokenring)
                nursery.start_soon(_trio_submit, node, args, t0, submits, period)
                with trio.move_on_after(args.timeout):
                    async for delivery in node:
                        eid = delivery.event.id
                        applied[eid] = time.time()
                        order.append(eid)
                        if len(order) == total:
                            break
                result["cpu"] = time.process_time() - cpu0
                # The others may still wait for this member's acknowledgements:
                # keep serving until every worker has applied everything.
                await trio.to_thread.run_sync(_wait_for_all, barrier, args.timeout)
                nursery.cancel_scope.cancel()
            # View changes and fetches during the measured part.
            s = node.process.statistics()
            result["changes"] = s.light_changes + s.full_changes
            result["changes"] -= before.light_changes + before.full_changes
            result["fetches"] = s.fetches - before.fetches
            # Tokens sent again, and copies sent through other members (a
            # member that saw a loss lately: docs/token-ring.md, *Losses*).
            result["token_resends"] = s.token_resends - before.token_resends
            result["tokens_relayed"] = s.tokens_relayed - before.tokens_relayed
            # Frames the driver lost (to a broken stream or a full queue),
            # during the measured part and before it (the ring's start).
            node_after = node.statistics()
            result["dropped"] = node_after.frames_dropped - node_before.frames_dropped
            result["dropped_before"] = node_before.frames_dropped

    trio.run(main)
    return {
        "t0": result["t0"],
        "submits": submits,
        "applied": applied,
        "order": order,
        "cpu": result.get("cpu", 0.0),
        "changes": result.get("changes", 0),
        "fetches": result.get("fetches", 0),
        "token_resends": result.get("token_resends", 0),
        "tokens_relayed": result.get("tokens_relayed", 0),
        "dropped": result.get("dropped", 0),
        "dropped_before": result.get("dropped_before", 0),
    }


def _ring_config(args: argparse.Namespace) -> Any:
    """The token ring's configuration: the defaults, but for the holds and
    the failure detector's times given."""
    from epto.tokenring import TokenRingConfig

    given = {
        "token_hold": args.token_hold,
        "broadcast_hold": args.broadcast_hold,
        "max_hold": args.max_hold,
        "heartbeat_interval": getattr(args, "heartbeat_interval", None),
        "suspect_timeout": getattr(args, "suspect_timeout", None),
    }
    return TokenRingConfig(**{k: v for k, v in given.items() if v is not None})


def _ring_period(ring: Any) -> float:
    """The token ring's batching period under a paced stream: its
    ``broadcast_hold``, grown to ``max_hold`` while several of a member's
    broadcasts are in flight (a paced stream's are)."""
    hold: float = ring.broadcast_hold
    return max(hold, ring.max_hold) if hold else hold


async def _ring_formed(node: Any, size: int, timeout: float) -> None:
    """Wait until ``node``'s configuration has every member in its token list
    and has not changed for a while (members that start later are first
    suspected and moved out, then readmitted)."""
    import trio

    with trio.move_on_after(timeout):
        stable_since = trio.current_time()
        last = None
        while True:
            s = node.process.statistics()
            key = (s.instance, len(s.core))
            if key != last:
                last, stable_since = key, trio.current_time()
            elif len(s.core) == size and trio.current_time() - stable_since >= 0.5:
                return
            await trio.sleep(0.02)


def _pysyncobj(
    index: int, ports: list[int], args: argparse.Namespace, barrier: Any
) -> dict[str, Any]:
    from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated

    applied: dict[tuple[int, int], float] = {}
    total = 3 * args.commands
    done = threading.Event()

    class Counter(SyncObjConsumer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.value = 0

        @replicated  # type: ignore[untyped-decorator]
        def inc(self, tag: tuple[int, int]) -> int:
            self.value += 1
            applied[tuple(tag)] = time.time()  # type: ignore[index]
            if self.value == total:
                done.set()
            return self.value

    addresses = [f"127.0.0.1:{p}" for p in ports]
    counter = Counter()
    conf = SyncObjConf(dynamicMembershipChange=False, commandsQueueSize=10 * total)
    obj = SyncObj(
        addresses[index], addresses[:index] + addresses[index + 1 :], consumers=[counter], conf=conf
    )
    deadline = time.time() + 30
    while obj.getStatus()["leader"] is None and time.time() < deadline:
        time.sleep(0.01)
    barrier.wait()
    _stall_later(args, index)
    t0 = time.time()
    cpu0 = time.process_time()
    submits = {}
    errors = 0

    def callback(_result: Any, error: Any) -> None:
        nonlocal errors
        if error != 0:
            errors += 1

    # Default tick: PySyncObj's own batching period, the auto-tick thread's
    # (a command waits in its queue for the next tick anyway).
    tick = conf.autoTickPeriod if args.submit_tick is None else args.submit_tick

    def submit(k: int, due: float) -> None:
        tag = (index + 1, k)
        submits[tag] = due
        counter.inc(tag, callback=callback)

    _thread_submit(submit, args, t0, tick)
    done.wait(args.timeout)
    cpu = time.process_time() - cpu0
    _wait_for_all(barrier, args.timeout)
    obj.destroy()
    return {
        "t0": t0,
        "submits": submits,
        "applied": applied,
        "order": [],
        "errors": errors,
        "cpu": cpu,
    }


_WORKERS = {
    "epto-trio": _epto_trio,
    "epto-zmq": _epto_zmq,
    "token-ring": _token_ring,
    "pysyncobj": _pysyncobj,
}


def _worker(
    system: str, index: int, ports: list[int], args: argparse.Namespace, barrier: Any, queue: Any
) -> None:
    try:
        if getattr(args, "profile", None):
            import cProfile
            import os

            os.makedirs(args.profile, exist_ok=True)
            profiler = cProfile.Profile()
            try:
                result = profiler.runcall(_WORKERS[system], index, ports, args, barrier)
            finally:
                profiler.dump_stats(os.path.join(args.profile, f"{system}-{index}.pstats"))
            queue.put((index, result))
            return
        queue.put((index, _WORKERS[system](index, ports, args, barrier)))
    except BaseException as err:  # reported by the parent
        queue.put((index, {"error": repr(err)}))
        raise


# -- the parent ------------------------------------------------------------------


_RESULT_GRACE = 60.0
"""Seconds the parent waits for the workers' results beyond ``--timeout``
(their start-up and their own bounded waits); a worker still silent then
is reported as failed and its system's row says so, and the next system
still runs."""


def collect_results(
    results: Any,
    n: int,
    wait: float,
    on_result: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[int, dict[str, Any]]:
    """The ``(index, result)`` pairs workers ``0 .. n - 1`` put on the queue
    ``results`` within ``wait`` seconds (``on_result`` called on each as it
    comes); a worker still silent then gets an error result that says so
    (and ``"missing": True``).
    Shared by the benchmarks that run their workers as processes."""
    out: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + wait
    while len(out) < n:
        try:
            index, result = results.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue_module.Empty:
            break
        out[index] = result
        if on_result is not None:
            on_result(index, result)
    for index in range(n):
        out.setdefault(
            index, {"error": f"worker {index}: no result within {wait:g} s", "missing": True}
        )
    return out


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(system: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(3)
    queue = ctx.Queue()
    ports = _free_ports(3)
    procs = [
        ctx.Process(target=_worker, args=(system, i, ports, args, barrier, queue)) for i in range(3)
    ]
    for proc in procs:
        proc.start()
    if args.stall > 0:
        threading.Thread(
            target=_resume_stalled,
            args=(procs[0].pid, args.stall, time.monotonic() + args.timeout + _RESULT_GRACE),
            daemon=True,
        ).start()
    late = True
    try:
        results = collect_results(queue, 3, args.timeout + _RESULT_GRACE)
        late = any(r.get("missing") for r in results.values())
    finally:
        # A worker that missed the deadline is stopped at once: its result
        # would come too late to count, and waiting for it only delays the
        # next system's run.
        for proc in procs:
            if late:
                proc.kill()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    errors = [r["error"] for r in results.values() if "error" in r]
    if errors:
        return {"system": system, "error": "; ".join(errors)}
    total = 3 * args.commands
    t0 = min(r["t0"] for r in results.values())
    complete = all(len(r["applied"]) == total for r in results.values())
    finish = max(max(r["applied"].values(), default=t0) for r in results.values())
    local, everywhere = [], []
    for index, r in results.items():
        for tag, submitted in r["submits"].items():
            tag = tuple(tag)
            if tag in r["applied"]:
                local.append(r["applied"][tag] - submitted)
            times = [o["applied"].get(tag) for o in results.values()]
            if all(t is not None for t in times):
                everywhere.append(max(times) - submitted)  # type: ignore[type-var,unused-ignore]
        del index
    out = {
        "system": system,
        "complete": complete,
        "applied": min(len(r["applied"]) for r in results.values()),
        "throughput": min(len(r["applied"]) for r in results.values()) / (finish - t0),
        "local_p50": _percentile(local, 0.5),
        "local_p99": _percentile(local, 0.99),
        "all_p50": _percentile(everywhere, 0.5),
        "all_p99": _percentile(everywhere, 0.99),
        "cpu": sum(r.get("cpu", 0.0) for r in results.values()),
    }
    if system.startswith("epto") or system == "token-ring":
        from epto.check import check

        report = check({i: r["order"] for i, r in results.items()})
        out["check"] = "ok" if report.ok else report.summary().replace("\n", "; ")
    if system == "epto-trio":
        losses = [r.get("losses", {}) for r in results.values()]
        out["losses"] = {k: sum(x.get(k, 0) for x in losses) for k in _LOSS_KEYS}
    if system == "token-ring":
        out["changes"] = max(r["changes"] for r in results.values())
        out["fetches"] = sum(r["fetches"] for r in results.values())
        out["token_resends"] = sum(r["token_resends"] for r in results.values())
        out["tokens_relayed"] = sum(r["tokens_relayed"] for r in results.values())
        out["dropped"] = sum(r["dropped"] for r in results.values())
        out["dropped_before"] = sum(r["dropped_before"] for r in results.values())
    return out


_LOSS_KEYS = ("sent", "received", "late", "holes", "send_failures")


def _loss_notes(losses: dict[str, int]) -> list[str]:
    """EpTO over UDP: where copies were lost, when any were (see :func:`_udp_losses`)."""
    notes = []
    dropped = losses["sent"] - losses["received"]
    if dropped > 0:
        notes.append(f"{dropped} of {losses['sent']} datagrams dropped by the kernel")
    if losses["send_failures"]:
        notes.append(f"{losses['send_failures']} send failures")
    if losses["late"]:
        notes.append(f"{losses['late']} copies refused as late")
    if losses["holes"]:
        notes.append(f"{losses['holes']} holes")
    return notes


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError

    if args.commands < 1:
        raise ConfigurationError(f"--commands must be at least 1, got {args.commands}")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown or not systems:
        raise ConfigurationError(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    protocol = _protocol(args)
    floor = protocol.ttl * protocol.round_interval
    print(
        f"3 processes on 127.0.0.1, {args.commands} commands each at "
        f"{'max' if args.rate <= 0 else f'{args.rate:g}/s'} per process"
    )
    print(
        f"EpTO: fanout {protocol.fanout}, TTL {protocol.ttl}, "
        f"round {protocol.round_interval * 1000:g} ms, clock {protocol.clock}; "
        f"nominal latency floor TTL x round = {floor * 1000:.0f} ms"
    )
    header = (
        f"{'system':<11} {'applied/s':>10} {'local p50':>10} {'local p99':>10} "
        f"{'all p50':>9} {'all p99':>9} {'cpu s':>6}  notes"
    )
    print(header)
    status = 0
    for system in systems:
        r = _measure(system, args)
        if "error" in r:
            print(f"{system:<11} failed: {r['error']}")
            status = 1
            continue
        if not r["complete"]:
            status = 1
        print(_row(r, args.commands))
    return status


def _row(r: dict[str, Any], commands: int) -> str:
    """One system's line of the table (``r``: what :func:`_measure` returned)."""
    notes = []
    cpu = f"{r['cpu']:>6.2f}"
    if not r["complete"]:
        notes.append(f"incomplete: {r['applied']} of {3 * commands}")
        # Its workers counted CPU until the timeout, not until the last
        # command applied: not comparable with a complete run's.
        notes.append(f"cpu {r['cpu']:.2f} s until the timeout")
        cpu = f"{'-':>6}"
    if "check" in r:
        notes.append(f"order {r['check']}")
    if "losses" in r:
        notes.extend(_loss_notes(r["losses"]))
    if r.get("changes"):
        notes.append(f"{r['changes']} view changes")
    if "fetches" in r:
        # Always shown for the token ring: on reliable FIFO links a fetch
        # means a message was lost or late.
        notes.append(f"{r['fetches']} fetches")
        if r.get("token_resends") or r.get("tokens_relayed"):
            notes.append(
                f"{r['token_resends']} token resends, {r['tokens_relayed']} relayed copies"
            )
        dropped = f"{r['dropped']} frames dropped"
        if r["dropped_before"]:
            dropped += f" ({r['dropped_before']} before the start)"
        notes.append(dropped)
    ms = 1000.0
    return (
        f"{r['system']:<11} {r['throughput']:>10.0f} {r['local_p50'] * ms:>8.1f}ms "
        f"{r['local_p99'] * ms:>8.1f}ms {r['all_p50'] * ms:>7.1f}ms "
        f"{r['all_p99'] * ms:>7.1f}ms {cpu}  " + ", ".join(notes)
    )
