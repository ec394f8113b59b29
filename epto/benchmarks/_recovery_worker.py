"""One replica process of ``epto bench recovery`` (epto/benchmarks/recovery.py).

A worker runs one replica of the benchmark's state machine
(:func:`epto.benchmarks.rsm._epto_machine` or ``_pysyncobj_machine``) with a
data directory, and obeys the orchestrator's orders from its end of a pipe,
one at a time, each answered on the pipe as ``(tag, payload)``:

* ``("fill", plan)``: the ``fill`` commands of ``plan``, 16 outstanding;
* ``("incr", k)``: ``k`` ``incr`` calls one after the other (the last value);
* ``("durable", fills)``: until the filled state is on disk (epto: a snapshot
  taken; PySyncObj: the log compacted into its full dump file);
* ``("settle", n)``: until this replica applied ``n`` commands;
* ``("stop",)``: close the replica, answer with its counter, count and state
  hash.

A *restarted* worker (the same id, addresses and data directory as the one
killed) first reports ``first``: the times, from the orchestrator's spawn, at
which its imports were done, its replica was open, it was ready (epto:
``wait_ready()``; PySyncObj: ``isReady()``) and its first command (``incr``,
issued here) returned, the value it returned, the entries its state holds
then and the CPU seconds this process used so far. Every wait is bounded by
``timeout``; a failure is reported as ``("error", {"error": ...})`` and ends
the worker.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import signal
import threading
import time
from typing import Any

_IN_FLIGHT = 16
"""``fill`` commands outstanding at once."""
PRE_INCR = 5
"""``incr`` commands committed after the fill and before the crash."""


def worker(spec: dict[str, Any], conn: Any) -> None:
    """The process's entry point (a ``multiprocessing`` target)."""
    spec["t_boot"] = time.time()
    # A worker that stops answering is sent SIGUSR1 before it is killed: its
    # threads' stacks go to standard error, to say where it was stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        if spec["system"] == "pysyncobj":
            _PySyncObjReplica(spec, conn).run()
        else:
            _run_epto(spec, conn)
    except BaseException as err:  # reported to the orchestrator, in one line
        with contextlib.suppress(OSError):
            conn.send(("error", {"error": _leaf(err)[:300]}))


def _leaf(err: BaseException) -> str:
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"


def _first(spec: dict[str, Any], machine: Any, value: Any, times: dict[str, float]) -> Any:
    return {
        **times,
        "t_spawn": spec["t_spawn"],
        "t_boot": spec["t_boot"],
        "value": value,
        "entries": len(machine.data),
        "cpu": time.process_time(),
    }


def _get(conn: Any, timeout: float) -> Any:
    """The next order; ``stop`` when the orchestrator is gone or silent."""
    try:
        if conn.poll(timeout):
            return conn.recv()
    except (EOFError, OSError):
        pass
    return ("stop",)


# -- epto (either engine) ---------------------------------------------------------


def _epto_configs(spec: dict[str, Any]) -> tuple[Any, Any]:
    import attrs

    import epto
    from epto.endpoint import NodeConfig
    from epto.services.trio_rsm import ReplicaConfig

    n, pid = spec["n"], spec["index"] + 1
    addresses = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(spec["ports"])}
    transfers = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(spec["transfer_ports"])}
    fields: dict[str, Any] = {"pid": pid, "bind": addresses[pid], "members": addresses, "seed": pid}
    if "data_dir" in attrs.fields_dict(NodeConfig):
        fields["data_dir"] = spec["data_dir"]  # the incarnation kept there
    if spec["system"] == "token-ring":
        node = NodeConfig(mode="token-ring", **fields)
    else:
        protocol = epto.Config.for_group(
            n, clock=spec["clock"], round_interval=spec["round_interval"]
        )
        node = NodeConfig(mode="epto", epto=protocol, **fields)
    replica = ReplicaConfig(
        data_dir=spec["data_dir"],
        peers={p: a for p, a in transfers.items() if p != pid},
        transfer_bind=transfers[pid],
        # No snapshot by policy: one, asked for right after the fill (as
        # PySyncObj's one compaction); what follows stays in the log.
        snapshot_every=0,
        snapshot_interval=math.inf,
    )
    return node, replica


def _run_epto(spec: dict[str, Any], conn: Any) -> None:
    import trio

    from epto.benchmarks.replication import _ring_formed
    from epto.benchmarks.rsm import _epto_machine, _state_hash
    from epto.services.trio_rsm import ReplicatedNode

    timeout = spec["timeout"]
    times = {"t_imported": time.time()}
    machine = _epto_machine()
    node_config, replica_config = _epto_configs(spec)
    phase = ["starting"]

    def put(tag: str, payload: Any) -> None:
        conn.send((tag, payload))

    async def restarted(node: Any) -> None:
        phase[0] = "waiting until ready"
        with trio.move_on_after(timeout) as waiting:
            await node.wait_ready()
        if waiting.cancelled_caught:
            raise TimeoutError(f"not ready {timeout:g} s after its start ({_where(node)})")
        times["t_ready"] = time.time()
        phase[0] = "ready, calling incr"
        with trio.move_on_after(timeout) as calling:
            value = await node.call("incr")
        if calling.cancelled_caught:
            raise TimeoutError(
                f"ready, but its first call did not return within {timeout:g} s ({_where(node)})"
            )
        times["t_first"] = time.time()
        put("first", _first(spec, machine, value, times))

    def _where(node: Any) -> str:
        """What the replica knows of the group, for a failure row."""
        status = node.status()
        where = f"applied {status.applied}, members {list(status.members)}"
        core = getattr(node.node.statistics(), "core", None)
        if core is not None:
            where += f", core {sorted(core)}, quorum {status.quorum}"
        return where

    async def fill(node: Any, plan: list[tuple[int, int]]) -> None:
        limit = trio.CapacityLimiter(_IN_FLIGHT)

        async def one(start: int, count: int) -> None:
            async with limit:
                await node.call("fill", start, count)

        async with trio.open_nursery() as nursery:
            for start, count in plan:
                nursery.start_soon(one, start, count)

    async def applied(n: int) -> None:
        while machine.n < n:
            await trio.sleep(0.01)

    async def handle(node: Any, op: str, arg: Any) -> Any:
        if op == "fill":
            await fill(node, arg)
        elif op == "incr":
            value = None
            for _ in range(arg):
                value = await node.call("incr")
            return {"value": value}
        elif op == "durable":
            await applied(arg)
            # In a worker thread while the group is quiet (no command is in
            # flight between the fill and the next orders).
            await trio.to_thread.run_sync(node.take_snapshot)
        elif op == "settle":
            await applied(arg)
        return {}

    async def serve(node: Any) -> None:
        while True:
            phase[0] = "serving"
            msg = await trio.to_thread.run_sync(_get, conn, 4 * timeout, abandon_on_cancel=True)
            if msg[0] == "stop":
                phase[0] = "stopped"
                return
            phase[0] = f"obeying {msg[0]!r}"
            with trio.fail_after(timeout):
                put(msg[0], await handle(node, *msg))

    async def main() -> None:
        async with ReplicatedNode(machine, node_config, replica_config) as node:
            times["t_open"] = time.time()
            if spec["restarted"]:
                await restarted(node)
            else:
                # The group's first start: ready once a majority of the
                # replicas answered (ReplicaConfig.joining "auto").
                phase[0] = "waiting until ready"
                with trio.fail_after(timeout):
                    await node.wait_ready()
                if spec["system"] == "token-ring":
                    await _ring_formed(node.node, spec["n"], timeout)
                put("up", {})
            await serve(node)

    trio.run(main)
    if phase[0] != "stopped":
        # The replica's block ended without an exception and without our
        # leave: the library cancelled it (its node stopped).
        raise RuntimeError(f"the replica ended without an error while {phase[0]}")
    put("stop", {"counter": machine.counter, "n": machine.n, "state": _state_hash(machine)})


# -- PySyncObj --------------------------------------------------------------------


def _sync_incr(machine: Any, deadline: float) -> Any:
    """One ``incr`` through this node, tried again while the group has no
    leader (the leader was killed, or a majority is coming back), until
    ``deadline`` (``time.monotonic()``). A retried command may have been applied once already:
    the orchestrator's check of the returned value would then say so."""
    from pysyncobj import FAIL_REASON, SyncObjException

    names = {v: k for k, v in vars(FAIL_REASON).items() if k.isupper()}
    while True:
        try:
            return machine.incr(sync=True, timeout=max(0.1, deadline - time.monotonic()))
        except SyncObjException as err:
            reason = names.get(err.errorCode, err.errorCode)
            if time.monotonic() > deadline or err.errorCode == "timeout":
                raise TimeoutError(f"incr failed: {reason}") from None
            time.sleep(0.05)


class _PySyncObjReplica:
    def __init__(self, spec: dict[str, Any], conn: Any) -> None:
        self.spec, self.conn = spec, conn
        self.index = spec["index"]
        self.timeout = spec["timeout"]

    def put(self, tag: str, payload: Any) -> None:
        self.conn.send((tag, payload))

    def run(self) -> None:
        from pysyncobj import SyncObj, SyncObjConf

        from epto.benchmarks.rsm import _pysyncobj_machine, _state_hash

        spec, timeout = self.spec, self.timeout
        times = {"t_imported": time.time()}
        machine = _pysyncobj_machine()
        data_dir = spec["data_dir"]
        os.makedirs(data_dir, exist_ok=True)
        conf = SyncObjConf(
            dynamicMembershipChange=False,
            journalFile=os.path.join(data_dir, "journal"),
            fullDumpFile=os.path.join(data_dir, "dump"),
            # Compaction only when asked (after the fill), as epto's one snapshot.
            logCompactionMinEntries=10**9,
            logCompactionMinTime=10**9,
        )
        addresses = [f"127.0.0.1:{p}" for p in spec["ports"]]
        me = addresses[self.index]
        obj = SyncObj(me, [a for a in addresses if a != me], consumers=[machine], conf=conf)
        try:
            times["t_open"] = time.time()
            if spec["restarted"]:
                if not self._until(obj.isReady, timeout):
                    raise TimeoutError(f"not ready {timeout:g} s after its start")
                times["t_ready"] = time.time()
                value = _sync_incr(machine, time.monotonic() + timeout)
                times["t_first"] = time.time()
                self.put("first", _first(spec, machine, value, times))
            else:
                if not self._until(lambda: self._leader(obj) is not None, timeout):
                    raise TimeoutError(f"no leader within {timeout:g} s")
                self.put("up", {})
            self.serve(obj, machine, me)
        finally:
            obj.destroy()
        self.put(
            "stop", {"counter": machine.counter, "n": machine.n, "state": _state_hash(machine)}
        )

    @staticmethod
    def _leader(obj: Any) -> str | None:
        leader = obj.getStatus().get("leader")
        return None if leader is None or not obj.isReady() else str(leader)

    @staticmethod
    def _until(predicate: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def serve(self, obj: Any, machine: Any, me: str) -> None:
        while True:
            msg = _get(self.conn, 4 * self.timeout)
            if msg[0] == "stop":
                return
            self.put(msg[0], self.handle(obj, machine, me, *msg))

    def handle(self, obj: Any, machine: Any, me: str, op: str, arg: Any = None) -> Any:
        timeout = self.timeout
        if op == "leader":
            self._until(lambda: self._leader(obj) is not None, timeout)
            return {"leader": self._leader(obj), "me": me, "term": obj.getStatus()["raft_term"]}
        if op == "fill":
            self.fill(machine, arg)
        elif op == "incr":
            value = None
            deadline = time.monotonic() + timeout
            for _ in range(arg):
                value = _sync_incr(machine, deadline)
            return {"value": value}
        elif op == "durable":
            # The filled state into the full dump file; the journal keeps
            # what follows.
            if not self._until(lambda: machine.n >= arg, timeout):
                raise TimeoutError("durable: the fill is not applied")
            self.compact(obj, timeout)
        elif op == "settle" and not self._until(lambda: machine.n >= arg, timeout):
            raise TimeoutError(f"settle: {machine.n} of {arg} commands applied")
        return {}

    def compact(self, obj: Any, timeout: float) -> None:
        """Compact the log into the full dump file; asked again every few
        seconds, since a dump that fails (its forked writer) is not retried."""
        deadline = time.monotonic() + timeout
        while True:
            obj.forceLogCompaction()
            if self._until(lambda: obj.getStatus()["log_len"] <= 3, 3.0):
                return
            if time.monotonic() > deadline:
                length = obj.getStatus()["log_len"]
                raise TimeoutError(f"durable: the log was not compacted ({length} entries)")

    def fill(self, machine: Any, plan: list[tuple[int, int]]) -> None:
        from pysyncobj import FAIL_REASON

        slots = threading.Semaphore(_IN_FLIGHT)
        failed: list[Any] = []

        def done(_result: Any, error: Any) -> None:
            if error != FAIL_REASON.SUCCESS:
                failed.append(error)
            slots.release()

        for start, count in plan:
            if not slots.acquire(timeout=self.timeout):
                raise TimeoutError("fill: no answer")
            machine.fill(start, count, callback=done)
        for _ in range(_IN_FLIGHT):
            if not slots.acquire(timeout=self.timeout):
                raise TimeoutError("fill: no answer")
        if failed:
            raise RuntimeError(f"fill: {len(failed)} commands failed ({failed[0]})")
