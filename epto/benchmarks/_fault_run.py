"""One run of the fault suite (``epto bench faults``, docs/faults.md): the
worker processes and their proxies (:class:`Cluster`), the clients that
record the history, the nemesis that applies the faults, and the final
reading of every replica's state (:func:`run_once`).

Everything runs in one trio loop in the harness process: the proxies
(:mod:`._fault_proxy`), the clients (one TCP connection each to its
replica's API, :mod:`._fault_worker`), the nemesis, and a task per worker
process that notices when it exits by itself.

Size: the cluster, the clients and the nemesis are three parts of one
choreography that share the cluster's state (which worker runs where, which
is paused, the run's clock) and the history; each is a class of its own
here, and what is not choreography (the network, the worker, the machines,
the verdicts, the command) lives in the modules beside this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

from ._fault_proxy import Links, ProxyNet
from ._fault_verdicts import Divergence, FaultRecord, Op, Window

__all__ = ["Cluster", "Nemesis", "RunReport", "RunSpec", "run_once"]

JOIN_TIMEOUT = 20.0
"""Seconds the nemesis waits for a joiner to be ready (then it notes "joiner
not ready" and goes on; its clients never start)."""


@attrs.frozen(kw_only=True)
class RunSpec:
    """One run's parameters."""

    engine: str
    replicas: int
    seed: int
    faults: tuple[str, ...]
    duration: float
    workload: str = "register"
    clients: int = 2
    keys: int = 3
    rate: float = 5.0
    op_timeout: float = 2.0
    fault_duration: float = 2.0
    gap: float = 2.0
    warmup: float = 1.0
    quiesce: float = 4.0
    settle: float = 20.0
    round_interval: float = 0.05
    max_joins: int = 2
    start_timeout: float = 60.0
    schedule: tuple[str, ...] = ()
    """Faults to apply in this order (targets still drawn from the seed)
    instead of kinds drawn from ``faults`` until ``duration`` is over."""


@attrs.define(kw_only=True)
class RunReport:
    """What one run found."""

    spec: RunSpec
    history: list[Op]
    faults: list[FaultRecord]
    finals: dict[int, dict[str, Any]]
    load_end: float
    last_heal: float
    events: list[str] = attrs.field(factory=list)
    """Unexpected things: a worker that exited by itself, a start that failed."""
    proxy: dict[str, int] = attrs.field(factory=dict)
    linearizable: bool | None = None
    lin_detail: str = ""
    lost: list[tuple[Op, tuple[int, ...]]] = attrs.field(factory=list)
    windows: list[Window] = attrs.field(factory=list)
    diverged: Divergence | None = None
    elapsed: float = 0.0

    def counts(self) -> Counter[str]:
        return Counter(op.status for op in self.history)

    def ok_after_heal(self) -> int:
        return sum(1 for op in self.history if op.status == "ok" and op.invoked >= self.last_heal)

    @property
    def safe(self) -> bool:
        return (
            self.linearizable is not False
            and not self.lost
            and not (self.diverged is not None and self.diverged.divergent)
        )


# -- the cluster ----------------------------------------------------------------------


class _Member:
    """One replica id: its current worker process, ports and data directory."""

    def __init__(self, pid: int, data_dir: Path, log_dir: Path) -> None:
        self.pid = pid
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.process: Any = None
        self.api_port: int | None = None
        self.starts = 0
        self.paused = False
        self.expected_exit = False


class Cluster:
    """The workers of one run and their proxies (runs in the harness's trio loop)."""

    def __init__(self, spec: RunSpec, run_dir: Path, net: Any, nursery: Any) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.net = net
        self.nursery = nursery
        self.founders = list(range(1, spec.replicas + 1))
        self.joiners = list(range(spec.replicas + 1, spec.replicas + 1 + spec.max_joins))
        self.members: dict[int, _Member] = {}
        self.events: list[str] = []
        self.t0 = 0.0
        for pid in self.founders + self.joiners:
            self.members[pid] = _Member(pid, run_dir / "data" / str(pid), run_dir / "logs")

    def now(self) -> float:
        return trio.current_time() - self.t0

    def running(self) -> list[int]:
        return sorted(p for p, m in self.members.items() if m.process is not None)

    def _listed(self) -> list[int]:
        """The members every EpTO node lists: the founders, and the joiners
        when joins may happen (EpTO's full view has no other joining path)."""
        if self.spec.engine == "epto" and "join" in self.spec.faults:
            return self.founders + self.joiners
        return self.founders

    def _worker_spec(self, pid: int, *, joining: bool, contacts: list[int]) -> dict[str, Any]:
        spec = self.spec
        net = self.net
        member = self.members[pid]
        listed = self._listed()
        # Whom a replica fetches from and, on EpTO, counts its majority over.
        # EpTO: every listed member, at every replica (joiners included: the
        # majority must be over one set everywhere, else two disjoint sides
        # can each hold a majority of their own list). Token ring: the
        # founders (a joiner or a wiped replica: those running now).
        if spec.engine == "epto":
            peers_of = listed
        elif joining:
            peers_of = [p for p in self.running() if p != pid]
        else:
            peers_of = self.founders
        worker: dict[str, Any] = {
            "engine": spec.engine,
            "pid": pid,
            "workload": spec.workload,
            "seed": spec.seed * 1000 + pid * 10 + member.starts,
            "data_dir": str(member.data_dir),
            "joining": joining,
            "peers": {str(p): net.transfer_address(pid, p) for p in peers_of if p != pid},
            "call_timeout": spec.op_timeout + 1.0,
            "round_interval": spec.round_interval,
        }
        if spec.engine == "token-ring":
            worker["advertise"] = net.gossip_address(pid)
            if contacts:
                worker["contacts"] = {str(p): net.gossip_address(p) for p in contacts}
            else:
                worker["members"] = {str(p): net.gossip_address(p) for p in self.founders}
        else:
            worker["members"] = {str(p): net.gossip_address(p) for p in listed}
            worker["group_size"] = len(listed)
        return worker

    async def start(
        self, pid: int, *, joining: bool = False, wipe: bool = False, contacts: tuple[int, ...] = ()
    ) -> bool:
        """Start ``pid``'s worker; True once it listens (its ``ready`` line)."""
        member = self.members[pid]
        if wipe and member.data_dir.exists():
            shutil.rmtree(member.data_dir)
        member.data_dir.mkdir(parents=True, exist_ok=True)
        member.log_dir.mkdir(parents=True, exist_ok=True)
        worker = self._worker_spec(pid, joining=joining or wipe, contacts=list(contacts))
        member.starts += 1
        log_path = member.log_dir / f"worker-{pid}-{member.starts}.log"
        with open(log_path, "ab") as log:
            log.write((json.dumps(worker) + "\n").encode())
            log.flush()
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "epto.benchmarks._fault_worker", json.dumps(worker)],
                stdin=subprocess.PIPE,  # closed when this process ends: the worker stops
                stdout=subprocess.PIPE,
                stderr=log,
                env=dict(os.environ),
            )
        member.process = process
        member.expected_exit = False
        member.paused = False
        member.api_port = None
        self.nursery.start_soon(self._watch, member, process)
        line = b""
        assert process.stdout is not None
        with trio.move_on_after(self.spec.start_timeout):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    break
                line += chunk
        text = line.decode(errors="replace").strip()
        if not text.startswith("ready "):
            why = _last_error(member.log_dir / f"worker-{pid}-{member.starts}.log")
            self.events.append(f"{self.now():.1f}s pid {pid} did not start: {why or text[:200]!r}")
            await self.kill(pid)
            return False
        ports = json.loads(text.split(" ", 1)[1])
        member.api_port = int(ports["api"])
        self.net.set_target(
            pid, ("127.0.0.1", int(ports["gossip"])), ("127.0.0.1", int(ports["transfer"]))
        )
        self.nursery.start_soon(self._drain, process, log_path)
        return True

    async def _drain(self, process: Any, log_path: Path) -> None:
        """Copy what the worker prints after its ready line to its log."""
        try:
            while chunk := await process.stdout.receive_some(65536):
                with open(log_path, "ab") as log:
                    log.write(chunk)
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError, ValueError):
            pass

    async def _watch(self, member: _Member, process: Any) -> None:
        try:
            code = await process.wait()
            if member.process is process:
                member.process = None
                member.api_port = None
                self.net.set_target(member.pid, None, None)
                if not member.expected_exit:
                    name = f"worker-{member.pid}-{member.starts}.log"
                    why = _last_error(member.log_dir / name)
                    self.events.append(
                        f"{self.now():.1f}s pid {member.pid} exited by itself (code {code}; "
                        f"logs/{name}): {why}"
                    )
        finally:
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    with contextlib.suppress(Exception):
                        await trio.aclose_forcefully(pipe)

    async def kill(self, pid: int) -> None:
        member = self.members[pid]
        process = member.process
        if process is None:
            return
        member.expected_exit = True
        member.process = None
        member.api_port = None
        self.net.set_target(pid, None, None)
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
        await process.wait()

    def signal(self, pid: int, sig: int) -> None:
        member = self.members[pid]
        if member.process is not None:
            try:
                member.process.send_signal(sig)
            except ProcessLookupError:
                return
            member.paused = sig == signal.SIGSTOP

    async def request(self, pid: int, request: dict[str, Any], timeout: float) -> Any:
        """One request on a connection of its own; the answer, or None."""
        port = self.members[pid].api_port
        if port is None:
            return None
        with trio.move_on_after(timeout):
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                return None
            async with stream:
                try:
                    await stream.send_all(json.dumps(request).encode() + b"\n")
                    line = await _read_line(stream)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return None
                return None if line is None else json.loads(line)
        return None

    async def status(self, pid: int) -> dict[str, Any] | None:
        answer = await self.request(pid, {"op": "status"}, 2.0)
        if isinstance(answer, dict) and answer.get("ok"):
            result: dict[str, Any] = answer["result"]
            return result
        return None

    async def wait_formed(self, pids: list[int], timeout: float) -> bool:
        """Until every one of ``pids`` is ready (token ring: and sees them all)."""
        with trio.move_on_after(timeout):
            while True:
                good = 0
                for pid in pids:
                    st = await self.status(pid)
                    if st is None or not st["ready"]:
                        continue
                    if self.spec.engine == "token-ring" and not set(pids) <= set(st["members"]):
                        continue
                    good += 1
                if good == len(pids):
                    return True
                await trio.sleep(0.2)
        return False

    async def stop_all(self) -> None:
        for pid in self.running():
            self.signal(pid, signal.SIGCONT)
            await self.kill(pid)


def _last_error(log: Path) -> str:
    """The last line of a worker's log that names an error (its traceback's end)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    found = [x for x in lines if "Error" in x or "error" in x]
    return found[-1].strip()[:300] if found else ""


async def _read_line(stream: Any, limit: int = 1 << 22) -> bytes | None:
    buffer = b""
    while b"\n" not in buffer:
        if len(buffer) > limit:
            return None
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        buffer += chunk
    return buffer.split(b"\n", 1)[0]


# -- clients ------------------------------------------------------------------------


class _Client:
    """One client: sequential operations against one replica, each recorded.

    After an indeterminate operation the client continues under a new client
    id (the checker assumes one operation at a time per client, and the old
    one may still take effect)."""

    def __init__(self, index: int, pid: int, cluster: Cluster, history: list[Op]) -> None:
        spec = cluster.spec
        self.index = index
        self.client_id = index
        self.pid = pid
        self.cluster = cluster
        self.history = history
        self.rng = random.Random(spec.seed * 7919 + index)
        self.keys = [f"k{i}" for i in range(spec.keys)]
        self.counter = 0
        self.seen: dict[str, Any] = {}
        self.stream: Any = None
        self.port: int | None = None

    def _value(self) -> int:
        self.counter += 1
        return self.index * 1_000_000 + self.counter

    def _next(self) -> tuple[dict[str, Any], str, str, Any]:
        """(request, key, op, arg)."""
        rng = self.rng
        if self.cluster.spec.workload == "set":
            if rng.random() < 0.75:
                value = self._value()
                return {"op": "add", "element": value}, "set", "add", value
            return {"op": "read"}, "set", "read", None
        key = rng.choice(self.keys)
        r = rng.random()
        if r < 0.4:
            return {"op": "read", "key": key}, key, "read", None
        if r < 0.8:
            value = self._value()
            return {"op": "write", "key": key, "value": value}, key, "write", value
        expected, new = self.seen.get(key), self._value()
        request = {"op": "cas", "key": key, "expected": expected, "new": new}
        return request, key, "cas", [expected, new]

    async def _close(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def run(self) -> None:
        spec = self.cluster.spec
        try:
            while True:
                await trio.sleep(self.rng.expovariate(spec.rate))
                await self.one()
        finally:
            await self._close()

    async def one(self) -> None:
        spec = self.cluster.spec
        request, key, op, arg = self._next()
        invoked = self.cluster.now()
        status, result, error = "info", None, ""
        sent = False
        try:
            with trio.fail_after(spec.op_timeout):
                port = self.cluster.members[self.pid].api_port
                if self.stream is not None and port != self.port:
                    await self._close()
                if self.stream is None:
                    if port is None:
                        status, error = "fail", "replica down"
                    else:
                        try:
                            self.stream = await trio.open_tcp_stream("127.0.0.1", port)
                            self.port = port
                        except OSError as exc:
                            status, error = "fail", f"connect: {exc.strerror or exc}"
                if self.stream is not None:
                    sent = True
                    await self.stream.send_all(json.dumps(request).encode() + b"\n")
                    line = await _read_line(self.stream)
                    if line is None:
                        status, error = "info", "connection closed"
                        await self._close()
                    else:
                        answer = json.loads(line)
                        if answer.get("ok"):
                            status, result = "ok", answer.get("result")
                        else:
                            error = str(answer.get("error", ""))[:200]
                            status = "fail" if answer.get("definite") else "info"
        except trio.TooSlowError:
            status, error = "info", "timeout"
            await self._close()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            status, error = "info" if sent else "fail", f"connection: {exc}"
            await self._close()
        except trio.Cancelled:
            # The load stopped with this operation under way: indeterminate.
            if sent or self.stream is not None:
                self._record(key, op, arg, "info", None, invoked, "stopped")
            raise
        self._record(key, op, arg, status, result, invoked, error)
        if status == "ok" and op in ("read", "write", "cas") and spec.workload == "register":
            if op == "read":
                self.seen[key] = result
            elif op == "write":
                self.seen[key] = arg
            elif result is True:
                self.seen[key] = arg[1]

    def _record(
        self, key: str, op: str, arg: Any, status: str, result: Any, invoked: float, error: str
    ) -> None:
        completed = max(self.cluster.now(), invoked)
        self.history.append(
            Op(
                client=self.client_id,
                key=key,
                op=op,
                arg=arg,
                result=result,
                status=status,
                invoked=invoked,
                completed=completed,
                replica=self.pid,
                error=error,
            )
        )
        if status == "info":
            self.client_id += 1_000_000  # a fresh client id from now on


# -- the nemesis --------------------------------------------------------------------


class Nemesis:
    """Applies the run's faults one at a time, drawn from its own RNG."""

    def __init__(self, cluster: Cluster, start_clients: Any) -> None:
        self.cluster = cluster
        self.spec = cluster.spec
        self.rng = random.Random(cluster.spec.seed * 104729 + 1)
        self.faults: list[FaultRecord] = []
        self.start_clients = start_clients
        self.joined = 0

    def _live(self) -> list[int]:
        c = self.cluster
        return [p for p in c.running() if not c.members[p].paused]

    def _kinds(self) -> list[str]:
        kinds = list(self.spec.faults)
        if self.joined >= self.spec.max_joins and "join" in kinds:
            kinds.remove("join")
        return kinds or ["pause"]

    async def run(self, until: float) -> None:
        c = self.cluster
        await trio.sleep(self.spec.warmup)
        if self.spec.schedule:
            for kind in self.spec.schedule:
                await self.apply(kind)
                await trio.sleep(self.spec.gap)
            return
        while c.now() < until:
            kind = self.rng.choice(self._kinds())
            await self.apply(kind)
            await trio.sleep(self.spec.gap)

    async def apply(self, kind: str) -> None:
        c, spec, rng = self.cluster, self.spec, self.rng
        live = self._live()
        n = len(live)
        start = c.now()
        targets: list[int] = []
        note = ""
        if kind in ("kill", "kill-wipe"):
            targets = [rng.choice(live)]
            await c.kill(targets[0])
            await trio.sleep(spec.fault_duration)
            ok = await c.start(targets[0], wipe=kind == "kill-wipe")
            note = "" if ok else "restart failed"
        elif kind == "pause":
            targets = [rng.choice(live)]
            c.signal(targets[0], signal.SIGSTOP)
            await trio.sleep(spec.fault_duration)
            c.signal(targets[0], signal.SIGCONT)
        elif kind in ("partition-minority", "partition-majority"):
            shuffled = rng.sample(live, n)
            if kind == "partition-minority":
                parts = [shuffled[: (n - 1) // 2], shuffled[(n - 1) // 2 :]]
            else:  # no part holds a majority of the live members
                size = max(1, (n - 1) // 2)
                parts = [shuffled[i : i + size] for i in range(0, n, size)]
            everyone = set(c.members)
            for part in parts:
                c.net.links.partition(part, everyone - set(part))
            targets = parts[0]
            note = " | ".join(",".join(map(str, sorted(p))) for p in parts)
            await trio.sleep(spec.fault_duration)
            c.net.links.heal()
        elif kind == "join":
            pid = c.joiners[self.joined]
            self.joined += 1
            targets = [pid]
            contacts = live if spec.engine == "token-ring" else []
            ok = await c.start(pid, joining=True, contacts=tuple(contacts))
            if ok and await c.wait_formed([pid], min(spec.start_timeout, JOIN_TIMEOUT)):
                self.start_clients(pid)
            else:
                note = "joiner not ready"
        elif kind == "several":
            k = n // 2 + 1
            targets = rng.sample(live, min(k, n))
            wipes = 0
            actions: dict[int, str] = {}
            for pid in targets:
                options = [f for f in ("kill", "kill-wipe", "pause") if f in spec.faults]
                if wipes >= (n - 1) // 2 and "kill-wipe" in options:
                    options.remove("kill-wipe")
                action = rng.choice(options or ["kill"])
                wipes += action == "kill-wipe"
                actions[pid] = action
            for pid, action in actions.items():
                if action == "pause":
                    c.signal(pid, signal.SIGSTOP)
                else:
                    await c.kill(pid)
            note = " ".join(f"{p}:{a}" for p, a in sorted(actions.items()))
            await trio.sleep(spec.fault_duration)
            failed: list[int] = []

            async def restart(pid: int, wipe: bool) -> None:
                if not await c.start(pid, wipe=wipe):
                    failed.append(pid)

            async with trio.open_nursery() as restarts:  # all at once
                for pid, action in actions.items():
                    if action == "pause":
                        c.signal(pid, signal.SIGCONT)
                    else:
                        restarts.start_soon(restart, pid, action == "kill-wipe")
            if failed:
                note += f" (restart of {sorted(failed)} failed)"
        else:
            raise ValueError(f"unknown fault {kind!r}")
        self.faults.append(
            FaultRecord(
                kind=kind, start=start, healed=c.now(), targets=tuple(sorted(targets)), note=note
            )
        )

    async def heal_all(self) -> None:
        c = self.cluster
        c.net.links.heal()
        for pid in c.running():
            c.signal(pid, signal.SIGCONT)


# -- one run ------------------------------------------------------------------------


async def run_once(spec: RunSpec, run_dir: Path) -> RunReport:
    """Run ``spec`` in ``run_dir`` (data directories and logs); :func:`judge` judges it."""
    started = time.monotonic()
    links = Links()
    pids = list(range(1, spec.replicas + 1 + spec.max_joins))
    net = ProxyNet(links, pids, gossip="udp" if spec.engine == "epto" else "tcp")
    history: list[Op] = []
    report: RunReport
    async with trio.open_nursery() as nursery:
        await net.start(nursery)
        cluster = Cluster(spec, run_dir, net, nursery)
        try:
            cluster.t0 = trio.current_time()
            for pid in cluster.founders:
                if not await cluster.start(pid):
                    break
            formed = await cluster.wait_formed(cluster.founders, spec.start_timeout)
            if not formed:
                cluster.events.append("the group did not form")
            cluster.t0 = trio.current_time()  # the history's times count from the load's start
            clients: list[_Client] = []
            async with trio.open_nursery() as load:

                def start_clients(pid: int) -> None:
                    for _ in range(spec.clients):
                        client = _Client(len(clients), pid, cluster, history)
                        clients.append(client)
                        load.start_soon(client.run)

                for pid in cluster.founders:
                    start_clients(pid)
                nemesis = Nemesis(cluster, start_clients)
                if formed:
                    await nemesis.run(cluster.now() + spec.duration)
                await nemesis.heal_all()
                for pid in cluster.founders:
                    if cluster.members[pid].process is None:
                        await cluster.start(pid, wipe=False)
                last_heal = cluster.now()
                await trio.sleep(spec.quiesce)
                load_end = cluster.now()
                load.cancel_scope.cancel()
            finals = await _final_states(cluster)
            report = RunReport(
                spec=spec,
                history=history,
                faults=nemesis.faults,
                finals=finals,
                load_end=load_end,
                last_heal=last_heal,
                events=cluster.events,
            )
        finally:
            with trio.CancelScope(shield=True):  # no worker outlives the run
                await cluster.stop_all()
        report.proxy = net.counts()
        nursery.cancel_scope.cancel()
    report.elapsed = time.monotonic() - started
    return report


async def _final_states(cluster: Cluster) -> dict[int, dict[str, Any]]:
    """Every running replica's final state, cut and digest, read once the
    group is quiet: the same reading twice in a row (0.5 s apart) with every
    replica ready at one cut and digest, or whatever it is after ``settle``
    seconds. (Commands whose callers gave up may still be delivered after
    the load stopped: one reading could catch replicas mid-way.)"""
    finals: dict[int, dict[str, Any]] = {}
    previous = None
    with trio.move_on_after(cluster.spec.settle):
        while True:
            finals = await _read_states(cluster)
            cuts = {json.dumps([f.get("cut"), f.get("digest")]) for f in finals.values()}
            reading = json.dumps(finals, sort_keys=True)
            agreed = all(f.get("ready") for f in finals.values()) and len(cuts) <= 1
            if agreed and reading == previous:
                return finals
            previous = reading
            await trio.sleep(0.5)
    return await _read_states(cluster)


async def _read_states(cluster: Cluster) -> dict[int, dict[str, Any]]:
    finals: dict[int, dict[str, Any]] = {}
    for pid in cluster.running():
        answer = await cluster.request(pid, {"op": "state"}, 5.0)
        if isinstance(answer, dict) and answer.get("ok"):
            finals[pid] = answer["result"]
        else:
            finals[pid] = {"ready": False, "error": "no answer to the state request"}
    return finals
