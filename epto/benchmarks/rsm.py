"""Replicated state machines: epto.rsm (token ring, EpTO) against PySyncObj (Raft), 3 processes.

epto.rsm's ``ReplicatedNode`` on either engine and PySyncObj, side by side on
3 loopback OS processes.

Every system runs the same state machine with the same commands and
payloads: ``incr()`` on a counter, ``set(key, value)`` on a dictionary
(values of 64 characters, keys from a pool of ``--pool``), and ``fill(start,
count)`` that adds ``count`` entries (64 hex characters each) to build a large
state quickly. Three parts:

* **throughput** (3 OS processes on 127.0.0.1, after a barrier): each
  process submits ``--commands`` commands, either as fast as it can with at
  most ``--in-flight`` calls outstanding (saturated) or at ``--rate`` per
  second (paced). Figures: commands applied at every replica per second
  (3 x commands over the time from the first submission to the last replica
  applying the last), and p50/p99 latency from submission to application at
  the submitting replica (epto: ``await node.call(...)``; PySyncObj: the
  callback, which a follower runs when it applies the entry);
* **catch-up**: the three replicas ``fill`` a dictionary of ``--catchup-mb``
  (its JSON snapshot), a fourth replica starts, and its time from start to
  ready (state fetched, confirmed and restored) and to caught up (applied
  the same commands as the others: same count and same state hash) is
  measured while the three keep submitting ``--trickle`` commands per second
  each until it is ready. Token ring: a new identity joining through a
  contact. EpTO: a member listed in everyone's ``members`` from the start
  whose process starts later. PySyncObj: a fourth node in everyone's
  configuration from the start whose process starts later, after every node
  compacted its log (``forceLogCompaction``), so it receives the leader's full
  dump (the in-memory, gzip-pickled serialization) rather than the log;
* **sizes**: the same catch-up for the epto engines at each of ``--sizes``.

Size: one benchmark harness for three systems and two kinds of measurement
(about 900 lines): the shared machine, each system's group, the submitters,
the catch-up choreography and the one table; splitting it would scatter one
measurement protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import threading
import time
from typing import Any

SYSTEMS = ("token-ring", "epto", "pysyncobj")
WORKLOADS = ("counter", "dict")
_FILL = 10_000
"""Entries one ``fill`` command adds (about 0.8 MB of state)."""
_ENTRY_BYTES = 78
"""JSON bytes of one filled entry: ``"k0000001":"<64 hex>",``."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="counter,dict")
    p.add_argument("--parts", default="throughput,catchup,sizes", help="which parts to run")
    p.add_argument("--commands", type=int, default=2000, help="saturated: commands per process")
    p.add_argument("--in-flight", type=int, default=64, help="saturated: calls per process")
    p.add_argument("--rate", type=float, default=500.0, help="paced: commands/s per process")
    p.add_argument("--paced-commands", type=int, default=1000, help="paced: commands per process")
    p.add_argument("--pool", type=int, default=1000, help="dict: keys in the pool")
    p.add_argument("--round-interval", type=float, default=0.02, help="EpTO round, seconds")
    p.add_argument("--clock", choices=("logical", "global"), default="global")
    p.add_argument("--catchup-mb", type=float, default=10.0, help="state for the side by side")
    p.add_argument("--sizes", default="1,10,100", help="MB of state, epto engines only")
    p.add_argument(
        "--trickle", type=float, default=20.0, help="commands/s per member while joining"
    )
    p.add_argument(
        "--exclude-timeout",
        type=float,
        default=None,
        help="token ring: TokenRingConfig.exclude_timeout (default: the library's)",
    )
    p.add_argument(
        "--max-hold",
        type=float,
        default=None,
        help="token ring: TokenRingConfig.max_hold (default: the library's, fixed holds)",
    )
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="small run: 300 commands, 300 paced, 1 MB catch-up, sizes 1",
    )
    p.set_defaults(func=run)


# -- the state machine (its logic shared by both systems) ------------------------


def _value(i: int) -> str:
    return hashlib.blake2b(i.to_bytes(8, "big"), digest_size=32).hexdigest()


class _Watch:
    """When this process's machine reached a count of applied commands."""

    target = -1
    done_at = 0.0
    times: dict[int, float] | None = None  # the joiner: every count reached

    @classmethod
    def mark(cls, n: int) -> None:
        if n == cls.target:
            cls.done_at = time.time()
        if cls.times is not None:
            cls.times[n] = time.time()


class _Core:
    """The commands' logic; ``n`` counts the commands applied (in the state)."""

    n: int
    counter: int
    data: dict[str, str]

    def _reset(self) -> None:
        self.n = 0
        self.counter = 0
        self.data = {}

    def _incr(self) -> int:
        self.counter += 1
        self.n += 1
        _Watch.mark(self.n)
        return self.counter

    def _set(self, key: str, value: str) -> str | None:
        old = self.data.get(key)
        self.data[key] = value
        self.n += 1
        _Watch.mark(self.n)
        return old

    def _fill(self, start: int, count: int) -> int:
        data = self.data
        for i in range(start, start + count):
            data[f"k{i:07d}"] = _value(i)
        self.n += 1
        _Watch.mark(self.n)
        return count

    def _dump(self) -> bytes:
        head = json.dumps({"n": self.n, "counter": self.counter}, separators=(",", ":"))
        return (head + "\n" + json.dumps(self.data, separators=(",", ":"))).encode()

    def _load(self, state: bytes) -> None:
        head, _, data = state.partition(b"\n")
        fields = json.loads(head)
        self.n, self.counter = fields["n"], fields["counter"]
        self.data = json.loads(data)
        _Watch.mark(self.n)


def _epto_machine() -> Any:
    from epto.rsm import StateMachine, replicated

    class Bench(_Core, StateMachine):
        def __init__(self) -> None:
            self._reset()

        @replicated
        def incr(self) -> int:
            return self._incr()

        @replicated
        def set(self, key: str, value: str) -> str | None:
            return self._set(key, value)

        @replicated
        def fill(self, start: int, count: int) -> int:
            return self._fill(start, count)

        def snapshot(self) -> bytes:
            return self._dump()

        def restore(self, state: bytes) -> None:
            self._load(state)

    return Bench()


def _pysyncobj_machine() -> Any:
    from pysyncobj import SyncObjConsumer, replicated

    class Bench(_Core, SyncObjConsumer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._reset()  # after SyncObjConsumer's init: these are serialized

        @replicated  # type: ignore[untyped-decorator]
        def incr(self) -> int:
            return self._incr()

        @replicated  # type: ignore[untyped-decorator]
        def set(self, key: str, value: str) -> str | None:
            return self._set(key, value)

        @replicated  # type: ignore[untyped-decorator]
        def fill(self, start: int, count: int) -> int:
            return self._fill(start, count)

        def _deserialize(self, data: Any) -> None:
            super()._deserialize(data)
            _Watch.mark(self.n)

    return Bench()


def _command(workload: str, index: int, k: int, pool: int) -> tuple[str, tuple[Any, ...]]:
    """Command ``k`` of process ``index``: the same everywhere."""
    if workload == "counter":
        return "incr", ()
    key = f"p{(index * 7919 + k * 31) % pool}"
    return "set", (key, f"{index}:{k}:".ljust(64, "v"))


def _state_hash(machine: _Core) -> str:
    return hashlib.sha256(machine._dump()).hexdigest()[:16]


# -- groups --------------------------------------------------------------------


def _node_configs(system: str, ports: list[int], members: int, args: argparse.Namespace) -> Any:
    import epto
    from epto.endpoint import NodeConfig

    addresses = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(ports[:members])}
    if system == "token-ring":
        ring = _ring_config(args)
        return {
            p: NodeConfig(
                mode="token-ring", pid=p, bind=a, members=addresses, seed=p, tokenring=ring
            )
            for p, a in addresses.items()
        }
    protocol = epto.Config.for_group(members, clock=args.clock, round_interval=args.round_interval)
    return {
        p: NodeConfig(mode="epto", pid=p, bind=a, members=addresses, epto=protocol, seed=p)
        for p, a in addresses.items()
    }


def _ring_config(args: argparse.Namespace) -> Any:
    from epto.tokenring import TokenRingConfig

    fields = {"exclude_timeout": args.exclude_timeout, "max_hold": args.max_hold}
    return TokenRingConfig(**{k: v for k, v in fields.items() if v is not None})


def _syncobj(ports: list[int], index: int, conf: Any, machine: Any) -> Any:
    from pysyncobj import SyncObj

    addresses = [f"127.0.0.1:{p}" for p in ports]
    others = addresses[:index] + addresses[index + 1 :]
    return SyncObj(addresses[index], others, consumers=[machine], conf=conf)


def _wait_leader(obj: Any, timeout: float) -> None:
    deadline = time.time() + timeout
    while (obj.getStatus()["leader"] is None or not obj.isReady()) and time.time() < deadline:
        time.sleep(0.01)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- throughput workers ------------------------------------------------------------


def _plan(args: argparse.Namespace, load: str) -> tuple[int, float, int]:
    """(commands per process, rate or 0, calls in flight or 0)."""
    if load == "saturated":
        return args.commands, 0.0, args.in_flight
    return args.paced_commands, args.rate, 0


def _throughput_epto(
    system: str, workload: str, load: str, index: int, ports: list[int], args: Any, sync: Any
) -> dict[str, Any]:
    import trio

    from epto.benchmarks.replication import _ring_formed
    from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

    count, rate, in_flight = _plan(args, load)
    config = _node_configs(system, ports, 3, args)[index + 1]
    machine = _epto_machine()
    _Watch.target = 3 * count
    latencies: list[float] = []
    out: dict[str, Any] = {}

    async def one(node: Any, k: int) -> None:
        name, call_args = _command(workload, index, k, args.pool)
        t = time.perf_counter()
        await node.call(name, *call_args)
        latencies.append(time.perf_counter() - t)

    async def main() -> None:
        async with ReplicatedNode(machine, config, ReplicaConfig()) as node:
            if system == "token-ring":
                await _ring_formed(node.node, 3, 30.0)
            await trio.to_thread.run_sync(sync["barrier"].wait)
            out["t0"] = time.time()
            cpu0 = time.process_time()
            with trio.move_on_after(args.timeout):
                async with trio.open_nursery() as nursery:
                    if in_flight:

                        async def caller(j: int) -> None:
                            for k in range(j, count, in_flight):
                                await one(node, k)

                        for j in range(in_flight):
                            nursery.start_soon(caller, j)
                    else:
                        start = trio.current_time()
                        for k in range(count):
                            await trio.sleep_until(start + k / rate)
                            nursery.start_soon(one, node, k)
                while machine.n < 3 * count:
                    await trio.sleep(0.005)
            out["cpu"] = time.process_time() - cpu0
            # The others may still need this member: serve until all are done.
            with contextlib.suppress(Exception):
                await trio.to_thread.run_sync(sync["barrier"].wait, args.timeout)
            out["digest"] = node.replica.digest.hex()[:16]
            if system == "epto":
                out["losses"] = _losses(node)

    trio.run(main)
    return {
        **out,
        "finish": _Watch.done_at or time.time(),
        "latencies": latencies,
        "applied": machine.n,
        "state": _state_hash(machine),
    }


def _throughput_pysyncobj(
    workload: str, load: str, index: int, ports: list[int], args: Any, sync: Any
) -> dict[str, Any]:
    from pysyncobj import SyncObjConf

    count, rate, in_flight = _plan(args, load)
    machine = _pysyncobj_machine()
    _Watch.target = 3 * count
    conf = SyncObjConf(dynamicMembershipChange=False, commandsQueueSize=10 * 3 * count)
    obj = _syncobj(ports[:3], index, conf, machine)
    _wait_leader(obj, 30.0)
    latencies: list[float] = []
    errors = 0
    slots = threading.Semaphore(in_flight or 1_000_000)
    answered = threading.Semaphore(0)
    sync["barrier"].wait()
    t0 = time.time()
    cpu0 = time.process_time()
    for k in range(count):
        if rate > 0:
            delay = t0 + k / rate - time.time()
            if delay > 0:
                time.sleep(delay)
        name, call_args = _command(workload, index, k, args.pool)
        slots.acquire()
        started = time.perf_counter()

        def callback(_result: Any, error: Any, started: float = started) -> None:
            nonlocal errors
            if error != 0:
                errors += 1
            else:
                latencies.append(time.perf_counter() - started)
            slots.release()
            answered.release()

        getattr(machine, name)(*call_args, callback=callback)
    deadline = time.time() + args.timeout
    for _ in range(count):
        if not answered.acquire(timeout=max(0.0, deadline - time.time())):
            break
    while machine.n < 3 * count and time.time() < deadline:
        time.sleep(0.005)
    cpu = time.process_time() - cpu0
    with contextlib.suppress(Exception):
        sync["barrier"].wait(args.timeout)
    state = _state_hash(machine)
    obj.destroy()
    return {
        "t0": t0,
        "finish": _Watch.done_at or time.time(),
        "latencies": latencies,
        "applied": machine.n,
        "state": state,
        "cpu": cpu,
        "errors": errors,
    }


# -- catch-up workers --------------------------------------------------------------


def _fill_plan(mb: float) -> list[tuple[int, int]]:
    entries = max(1, int(mb * 1_000_000) // _ENTRY_BYTES)
    return [(s, min(_FILL, entries - s)) for s in range(0, entries, _FILL)]


def _get(q: Any, timeout: float) -> Any:
    return q.get(timeout=timeout)


def _catchup_epto(
    system: str, mb: float, index: int, ports: list[int], args: Any, sync: Any
) -> dict[str, Any]:
    import trio

    from epto.benchmarks.replication import _ring_formed
    from epto.endpoint import NodeConfig
    from epto.services.trio_rsm import ReplicaConfig, ReplicatedNode

    joiner = index == 3
    fills = _fill_plan(mb)
    if system == "epto":
        configs = _node_configs(system, ports, 4, args)
    else:
        configs = _node_configs(system, ports, 3, args)
        configs[4] = NodeConfig(
            mode="token-ring",
            pid=4,
            bind=f"127.0.0.1:{ports[3]}",
            contacts={1: configs[1].bind},
            tokenring=_ring_config(args),
        )
    machine = _epto_machine()
    out: dict[str, Any] = {}

    async def member() -> None:
        _Watch.target = len(fills)
        async with ReplicatedNode(machine, configs[index + 1], ReplicaConfig()) as node:
            sync["addresses"].put((index + 1, node.transfer_address))
            if system == "token-ring":
                await _ring_formed(node.node, 3, 30.0)
            await trio.to_thread.run_sync(sync["barrier"].wait, args.timeout)
            if index == 0:
                limit = trio.CapacityLimiter(16)

                async def fill(start: int, n: int) -> None:
                    async with limit:
                        await node.call("fill", start, n)

                async with trio.open_nursery() as nursery:
                    for start, n in fills:
                        nursery.start_soon(fill, start, n)
            with trio.fail_after(args.timeout):
                while machine.n < len(fills):
                    await trio.sleep(0.01)
            await trio.to_thread.run_sync(sync["barrier"].wait, args.timeout)
            if index == 0:
                sync["go"].set()
            k = 0
            async with trio.open_nursery() as nursery:
                begin = trio.current_time()
                while not sync["ready"].is_set():
                    name, call_args = _command("dict", index, k, args.pool)
                    nursery.start_soon(node.call, name, *call_args)
                    k += 1
                    await trio.sleep_until(begin + k / args.trickle)
            out["trickled"] = k
            await trio.to_thread.run_sync(sync["barrier"].wait, args.timeout)
            await trio.sleep(0.5)
            sync["finals"].put((index, machine.n, node.replica.digest.hex()[:16]))
            await trio.to_thread.run_sync(sync["finished"].wait, args.timeout)
            if system == "epto":
                out["losses"] = _losses(node)

    async def newcomer() -> None:
        _Watch.times = {}
        peers = dict(_get(sync["addresses"], args.timeout) for _ in range(3))
        await trio.to_thread.run_sync(sync["go"].wait, args.timeout)
        out["t_start"] = time.time()
        cfg = ReplicaConfig(joining=True, peers=peers)
        out["phase"] = "starting"
        async with ReplicatedNode(machine, configs[4], cfg) as node:
            out["phase"] = "waiting for a first delivery"

            async def first_delivery() -> None:
                while node.replica.buffered() == 0 and not node.replica.ready:
                    await trio.sleep(0.002)
                if not node.replica.ready:
                    out["t_first"] = time.time()
                out["phase"] = "fetching and restoring the state"

            async def admitted() -> None:
                while 4 not in node.status().members:
                    await trio.sleep(0.002)
                out["t_admitted"] = time.time()
                while 4 not in node.node.statistics().core:
                    await trio.sleep(0.002)
                out["t_core"] = time.time()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(first_delivery)
                if system == "token-ring":
                    nursery.start_soon(admitted)
                await node.wait_ready()
                nursery.cancel_scope.cancel()
            out["t_ready"] = time.time()
            out["phase"] = "ready, catching up"
            sync["ready"].set()
            finals = [await trio.to_thread.run_sync(_get, sync["finals"], args.timeout)]
            finals += [await trio.to_thread.run_sync(_get, sync["finals"], args.timeout)]
            finals += [await trio.to_thread.run_sync(_get, sync["finals"], args.timeout)]
            target = max(f[1] for f in finals)
            with trio.move_on_after(args.timeout):
                while machine.n < target:
                    await trio.sleep(0.005)
            await trio.sleep(0.2)
            times = _Watch.times or {}
            reached = [t for n, t in times.items() if n >= target]
            out["t_caught"] = min(reached) if reached else float("nan")
            out["member_digests"] = sorted({f[2] for f in finals})
            out["member_counts"] = sorted({f[1] for f in finals})
            out["digest"] = node.replica.digest.hex()[:16]
            out["applied"] = machine.n
            out["transfers"] = node.transfers
            out["caught_up"] = node.status().caught_up
            if system == "epto":
                out["losses"] = _losses(node)

    try:
        trio.run(newcomer if joiner else member)
    except BaseException as err:
        where = "joiner" if joiner else "member"
        raise RuntimeError(f"{where} {out.get('phase', '')}: {_leaf(err)}") from err
    _measure_state(machine, out)
    return out


def _losses(node: Any) -> dict[str, int]:
    """EpTO's counters of copies that came too late and events it will never deliver."""
    stats = node.node.statistics()
    return {
        "holes": stats.holes_detected,
        "late": stats.late_rejected,
        "send failures": stats.send_failures,
        "rejected": sum(stats.rejected.values()),
        "dropped": stats.deliveries_dropped,
    }


def _measure_state(machine: _Core, out: dict[str, Any]) -> None:
    """Its size and hash, once the node is closed: dumping a large state takes
    seconds and would stall the node (and the group) if it still ran."""
    state = machine._dump()
    out["state_bytes"] = len(state)
    out["state"] = hashlib.sha256(state).hexdigest()[:16]


def _leaf(err: BaseException) -> str:
    """The first exception inside (exception groups) as one line."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"


def _catchup_pysyncobj(mb: float, index: int, ports: list[int], args: Any, sync: Any) -> Any:
    from pysyncobj import FAIL_REASON, SyncObjConf

    joiner = index == 3
    fills = _fill_plan(mb)
    machine = _pysyncobj_machine()
    # Compaction only when forced (after the fill); the full dump in memory.
    conf = SyncObjConf(
        dynamicMembershipChange=False,
        logCompactionMinEntries=10**9,
        logCompactionMinTime=10**9,
    )
    out: dict[str, Any] = {}
    if joiner:
        _Watch.times = {}
        sync["go"].wait(args.timeout)
        out["t_start"] = time.time()
        obj = _syncobj(ports, 3, conf, machine)
        while not obj.isReady():
            time.sleep(0.002)
        out["t_ready"] = time.time()
        sync["ready"].set()
        finals = [sync["finals"].get(timeout=args.timeout) for _ in range(3)]
        target = max(f[1] for f in finals)
        deadline = time.time() + args.timeout
        while machine.n < target and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(0.2)
        times = dict(_Watch.times)
        reached = [t for n, t in times.items() if n >= target]
        out["t_caught"] = min(reached) if reached else float("nan")
        out["member_counts"] = sorted({f[1] for f in finals})
        out["applied"] = machine.n
        obj.destroy()
        _measure_state(machine, out)
        return out
    _Watch.target = len(fills)
    obj = _syncobj(ports, index, conf, machine)
    _wait_leader(obj, 30.0)
    sync["barrier"].wait(args.timeout)
    if index == 0:
        slots = threading.Semaphore(16)
        for start, n in fills:
            slots.acquire()
            machine.fill(start, n, callback=lambda _r, _e: slots.release())
    deadline = time.time() + args.timeout
    while machine.n < len(fills) and time.time() < deadline:
        time.sleep(0.01)
    obj.forceLogCompaction()
    while obj.getStatus()["log_len"] > 3 and time.time() < deadline:
        time.sleep(0.01)
    out["log_after_compaction"] = obj.getStatus()["log_len"]
    sync["barrier"].wait(args.timeout)
    if index == 0:
        sync["go"].set()
    k = 0
    # Commands are asynchronous here: count how each ended, so that the
    # counts reported below are taken once every committed one is applied
    # (a fixed pause is not enough on a loaded machine).
    ended = {"ok": 0, "failed": 0}
    lock = threading.Lock()

    def done(_result: Any, error: Any) -> None:
        with lock:
            ended["ok" if error == FAIL_REASON.SUCCESS else "failed"] += 1

    t0 = time.time()
    while not sync["ready"].is_set():
        name, call_args = _command("dict", index, k, args.pool)
        getattr(machine, name)(*call_args, callback=done)
        k += 1
        delay = t0 + k / args.trickle - time.time()
        if delay > 0:
            sync["ready"].wait(delay)
    out["trickled"] = k
    deadline = time.time() + args.timeout
    while ended["ok"] + ended["failed"] < k and time.time() < deadline:
        time.sleep(0.01)
    sync["committed"][index] = ended["ok"]
    sync["barrier"].wait(args.timeout)
    total = len(fills) + sum(sync["committed"][:3])
    while machine.n < total and time.time() < deadline:
        time.sleep(0.01)
    sync["finals"].put((index, machine.n, ""))
    sync["finished"].wait(args.timeout)
    obj.destroy()
    _measure_state(machine, out)
    return out


# -- processes ---------------------------------------------------------------------


def _worker(job: tuple[Any, ...], index: int, ports: list[int], args: Any, sync: Any) -> None:
    part, system = job[0], job[1]
    try:
        if part == "throughput":
            workload, load = job[2], job[3]
            if system == "pysyncobj":
                result = _throughput_pysyncobj(workload, load, index, ports, args, sync)
            else:
                result = _throughput_epto(system, workload, load, index, ports, args, sync)
        elif system == "pysyncobj":
            result = _catchup_pysyncobj(job[2], index, ports, args, sync)
        else:
            result = _catchup_epto(system, job[2], index, ports, args, sync)
        sync["results"].put((index, result))
    except BaseException as err:  # reported by the parent, in one line
        sync["results"].put((index, {"error": _leaf(err)[:300]}))


def _spawn(job: tuple[Any, ...], n: int, args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    from epto.benchmarks.replication import _free_ports, collect_results

    ctx = mp.get_context("spawn")
    sync: dict[str, Any] = {
        "barrier": ctx.Barrier(3),
        "results": ctx.Queue(),
        "addresses": ctx.Queue(),
        "finals": ctx.Queue(),
        "go": ctx.Event(),
        "ready": ctx.Event(),
        "finished": ctx.Event(),
        # Commands each member saw committed (PySyncObj's catch-up).
        "committed": ctx.Array("q", n),
    }
    ports = _free_ports(4)
    procs = [
        ctx.Process(target=_worker, args=(job, i, ports, args, sync), daemon=True) for i in range(n)
    ]
    for proc in procs:
        proc.start()

    def finish_on(index: int, result: dict[str, Any]) -> None:
        if index == 3 or "error" in result:
            sync["finished"].set()

    try:
        return collect_results(sync["results"], n, 2 * args.timeout + 60, finish_on)
    finally:
        sync["finished"].set()
        for proc in procs:
            proc.join(timeout=15)
            if proc.is_alive():
                proc.kill()


def _throughput(system: str, workload: str, load: str, args: argparse.Namespace) -> dict[str, Any]:
    results = _spawn(("throughput", system, workload, load), 3, args)
    errors = [r["error"] for r in results.values() if "error" in r]
    if errors:
        return {"error": "; ".join(errors)}
    count = _plan(args, load)[0]
    t0 = min(r["t0"] for r in results.values())
    finish = max(r["finish"] for r in results.values())
    applied = min(r["applied"] for r in results.values())
    latencies = [x for r in results.values() for x in r["latencies"]]
    notes = []
    if applied < 3 * count:
        each = "/".join(str(results[i]["applied"]) for i in sorted(results))
        notes.append(f"incomplete: {applied} of {3 * count} (replicas {each})")
    losses: dict[str, int] = {}
    for r in results.values():
        for key, value in r.get("losses", {}).items():
            losses[key] = losses.get(key, 0) + value
    lost = [f"{value} {key}" for key, value in losses.items() if value]
    if lost:
        notes.append("EpTO: " + ", ".join(lost))
    states = {r["state"] for r in results.values()}
    notes.append("same state" if len(states) == 1 else f"STATES DIFFER: {sorted(states)}")
    errs = sum(r.get("errors", 0) for r in results.values())
    if errs:
        notes.append(f"{errs} failed calls")
    return {
        "rate": applied / max(finish - t0, 1e-9),
        "p50": _percentile(latencies, 0.5),
        "p99": _percentile(latencies, 0.99),
        "cpu": sum(r["cpu"] for r in results.values()),
        "ok": applied >= 3 * count and len(states) == 1,
        "notes": ", ".join(notes),
    }


def _catchup(system: str, mb: float, args: argparse.Namespace) -> dict[str, Any]:
    results = _spawn(("catchup", system, mb), 4, args)
    errors = [f"{i}: {r['error']}" for i, r in results.items() if "error" in r]
    if errors:
        return {"error": "; ".join(errors)}
    j = results[3]
    states = {r["state"] for r in results.values()}
    consistent = len(states) == 1 and j["member_counts"] == [j["applied"]]
    if "digest" in j:
        consistent = consistent and j["member_digests"] == [j["digest"]]
    groups: dict[str, list[str]] = {}
    for i in sorted(results):
        groups.setdefault(results[i]["state"], []).append(str(i + 1))
    split = "; ".join(f"pids {','.join(p)}: {h[:8]}" for h, p in groups.items())
    notes = [
        "same state and count" if consistent else f"INCONSISTENT (state {split})",
        f"applied {j['applied']}",
        f"trickled {sum(r.get('trickled', 0) for r in results.values())}",
    ]
    if "t_admitted" in j:
        notes.append(f"in the view at {j['t_admitted'] - j['t_start']:.2f}s")
    if "t_core" in j:
        notes.append(f"in the core at {j['t_core'] - j['t_start']:.2f}s")
    if "t_first" in j:
        notes.append(f"first delivery at {j['t_first'] - j['t_start']:.2f}s")
    elif system != "pysyncobj":
        notes.append("no delivery before ready")
    if "transfers" in j:
        notes.append(f"{j['transfers']} transfer")
    losses = [
        f"pid {i + 1}: " + ", ".join(f"{v} {k}" for k, v in r["losses"].items() if v)
        for i, r in sorted(results.items())
        if any(r.get("losses", {}).values())
    ]
    if losses:
        notes.append("EpTO " + "; ".join(losses))
    if "log_after_compaction" in results[0]:
        notes.append(f"log {results[0]['log_after_compaction']} entries after compaction")
    return {
        "state_mb": results[0]["state_bytes"] / 1e6,
        "ready": j["t_ready"] - j["t_start"],
        "caught": max(j["t_caught"], j["t_ready"]) - j["t_start"],
        "ok": consistent,
        "notes": ", ".join(notes),
    }


# -- the table -----------------------------------------------------------------------


def _quick(args: argparse.Namespace) -> None:
    if args.quick:
        args.commands = min(args.commands, 300)
        args.paced_commands = min(args.paced_commands, 300)
        args.catchup_mb = min(args.catchup_mb, 1.0)
        args.sizes = "1"


def _command_line(args: argparse.Namespace) -> str:
    """The options this run used, as a command that repeats it."""
    return (
        f"epto bench rsm --systems {args.systems} --workloads {args.workloads} "
        f"--parts {args.parts} --commands {args.commands} --in-flight {args.in_flight} "
        f"--rate {args.rate:g} --paced-commands {args.paced_commands} --pool {args.pool} "
        f"--round-interval {args.round_interval:g} --clock {args.clock} "
        f"--catchup-mb {args.catchup_mb:g} --sizes {args.sizes} --trickle {args.trickle:g}"
    )


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError

    _quick(args)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    for name, given, known in (
        ("--systems", systems, SYSTEMS),
        ("--workloads", workloads, WORKLOADS),
        ("--parts", parts, ("throughput", "catchup", "sizes")),
    ):
        unknown = sorted(set(given) - set(known))
        if unknown or not given:
            raise ConfigurationError(f"{name}: unknown {unknown}; choose from {', '.join(known)}")
    if min(args.commands, args.paced_commands, args.in_flight) < 1 or args.rate <= 0:
        raise ConfigurationError("--commands, --paced-commands, --in-flight, --rate must be > 0")
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    started = time.time()
    print("command: " + _command_line(args))
    print(
        f"3 processes on 127.0.0.1 (a 4th joins for catch-up), load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; saturated: "
        f"{args.commands} commands per process, {args.in_flight} in flight; paced: "
        f"{args.paced_commands} per process at {args.rate:g}/s; EpTO round "
        f"{args.round_interval * 1000:g} ms, {args.clock} clock"
    )
    status = 0
    ms = 1000.0
    if "throughput" in parts:
        print(
            f"{'system':<11} {'workload':<8} {'load':<10} {'applied/s':>10} "
            f"{'p50':>9} {'p99':>9} {'cpu s':>6}  notes"
        )
        for workload in workloads:
            for load in ("saturated", "paced"):
                for system in systems:
                    r = _throughput(system, workload, load, args)
                    head = f"{system:<11} {workload:<8} {load:<10}"
                    if "error" in r:
                        print(f"{head} failed: {r['error']}", flush=True)
                        status = 1
                        continue
                    status |= 0 if r["ok"] else 1
                    print(
                        f"{head} {r['rate']:>10.0f} {r['p50'] * ms:>7.1f}ms "
                        f"{r['p99'] * ms:>7.1f}ms {r['cpu']:>6.2f}  {r['notes']}",
                        flush=True,
                    )
    runs: list[tuple[str, float]] = []
    if "catchup" in parts:
        runs += [(s, args.catchup_mb) for s in systems]
    if "sizes" in parts:
        runs += [
            (s, mb)
            for mb in sizes
            for s in systems
            if s != "pysyncobj" and ("catchup" not in parts or mb != args.catchup_mb)
        ]
    if runs:
        print(
            f"{'system':<11} {'catch-up':<8} {'state':>10} {'ready':>10} {'caught up':>10}  notes"
        )
    for system, mb in runs:
        r = _catchup(system, mb, args)
        head = f"{system:<11} {'joiner':<8}"
        if "error" in r:
            print(f"{head} {mb:>8g}MB failed: {r['error']}", flush=True)
            status = 1
            continue
        status |= 0 if r["ok"] else 1
        print(
            f"{head} {r['state_mb']:>8.1f}MB {r['ready']:>9.2f}s {r['caught']:>9.2f}s  "
            f"{r['notes']}",
            flush=True,
        )
    print(
        f"took {time.time() - started:.0f} s; load average now "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return status
