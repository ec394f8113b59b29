"""Fault injection over real processes: kills, wipes, pauses, partitions; histories checked.

``epto bench faults`` starts ``--replicas`` worker processes, each one
:class:`~epto.transports.trio_rsm.ReplicatedNode` of a replicated register
store (or a grow-only set, ``--workload set``) on the chosen engine, every
link between them through a proxy this process owns
(:mod:`epto.benchmarks._fault_proxy`). Clients (``--clients`` per replica)
issue random operations through the order with a timeout each and record
every one (invocation, completion, result; ``ok``, ``fail`` or ``info``).
A nemesis drawn from ``--seed`` applies faults one after the other
(``--faults``):

* ``kill``: SIGKILL a replica, restart it under the same id with its data
  directory; ``kill-wipe``: the same with its data directory emptied, so it
  must fetch its state (``ReplicaConfig(joining=True, peers=...)``);
* ``pause``: SIGSTOP a replica for ``--fault-duration`` (longer than the
  token ring's suspicion timeout), then SIGCONT;
* ``partition-minority``: cut a minority off the others;
  ``partition-majority``: split the group so that no part holds a majority;
* ``join``: a new member with a new id through the engine's joining path;
* ``several``: a majority of the replicas at once, each killed, wiped (a
  minority at most) or paused, then all brought back.

Then it heals everything, lets the group run under load for ``--quiesce``
seconds, stops the clients, waits for the replicas to agree, reads every
live replica's final state, cut and digest, and judges the run:
linearizable (``epto.check.check_linearizable``, per key), acknowledged
writes lost, divergent final states, the unavailability window after each
fault (definitions: :mod:`epto.benchmarks._fault_verdicts`, docs/faults.md).
It exits non-zero when a run fails a safety verdict.

Size: the run's choreography (cluster, clients, nemesis, final reads) and the
command (options, table, re-check) stay together; the proxy, the worker, the
machines and the verdicts are modules of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

from ._fault_verdicts import (
    Divergence,
    FaultRecord,
    Op,
    Window,
    divergence,
    lost_acknowledged,
    unavailability,
)

ENGINES = ("token-ring", "epto")
FAULTS = (
    "kill",
    "kill-wipe",
    "pause",
    "partition-minority",
    "partition-majority",
    "join",
    "several",
)
WORKLOADS = ("register", "set")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine", default="token-ring", help="token-ring, epto, or both: token-ring,epto"
    )
    p.add_argument("--replicas", type=int, default=3, help="replicas at the start (3 or 5)")
    p.add_argument("--runs", type=int, default=1, help="runs per engine")
    p.add_argument("--seed", type=int, default=1, help="seeds the nemesis and the clients")
    p.add_argument("--faults", default=",".join(FAULTS), help="fault kinds to draw from")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load with faults")
    p.add_argument(
        "--schedule",
        default="",
        help="apply these faults in this order instead of drawing them (e.g. kill,pause)",
    )
    p.add_argument(
        "--workload", default="register", help="register, set, or register,set (alternate)"
    )
    p.add_argument("--clients", type=int, default=2, help="clients per replica")
    p.add_argument("--keys", type=int, default=3, help="registers the clients use")
    p.add_argument("--rate", type=float, default=5.0, help="operations per second per client")
    p.add_argument("--op-timeout", type=float, default=2.0, help="seconds before an op is info")
    p.add_argument("--fault-duration", type=float, default=2.0, help="seconds a fault lasts")
    p.add_argument("--gap", type=float, default=2.0, help="quiet seconds between two faults")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before a fault")
    p.add_argument("--quiesce", type=float, default=4.0, help="seconds of load after healing")
    p.add_argument("--settle", type=float, default=20.0, help="most seconds to wait for agreement")
    p.add_argument("--round-interval", type=float, default=0.05, help="EpTO round, seconds")
    p.add_argument("--max-joins", type=int, default=2, help="joiners at most per run")
    p.add_argument("--max-states", type=int, default=1_000_000, help="checker budget per key")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds to form the group")
    p.add_argument("--keep-dir", default=None, help="keep histories and worker logs here")
    p.add_argument(
        "--check", default=None, metavar="DIR", help="re-judge the runs saved in DIR (--keep-dir)"
    )
    p.set_defaults(func=run)


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
        import trio

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
        peers_of = [p for p in self.running() if p != pid] if joining else listed
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
        import trio

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
        import trio

        try:
            while chunk := await process.stdout.receive_some(65536):
                with open(log_path, "ab") as log:
                    log.write(chunk)
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError, ValueError):
            pass

    async def _watch(self, member: _Member, process: Any) -> None:
        import trio

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
            if process.stdout is not None:
                with contextlib.suppress(Exception):
                    await trio.aclose_forcefully(process.stdout)

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
        import trio

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
        import trio

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
            import trio

            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def run(self) -> None:
        import trio

        spec = self.cluster.spec
        try:
            while True:
                await trio.sleep(self.rng.expovariate(spec.rate))
                await self.one()
        finally:
            await self._close()

    async def one(self) -> None:
        import trio

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
        import trio

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
        import trio

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
            if ok and await c.wait_formed([pid], spec.start_timeout):
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
            for pid, action in actions.items():
                if action == "pause":
                    c.signal(pid, signal.SIGCONT)
                elif not await c.start(pid, wipe=action == "kill-wipe"):
                    note += f" (restart of {pid} failed)"
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
    import trio

    from ._fault_proxy import Links, ProxyNet

    started = time.monotonic()
    links = Links()
    pids = list(range(1, spec.replicas + 1 + spec.max_joins))
    net = ProxyNet(links, pids, gossip="udp" if spec.engine == "epto" else "tcp")
    history: list[Op] = []
    report: RunReport
    async with trio.open_nursery() as nursery:
        await net.start(nursery)
        cluster = Cluster(spec, run_dir, net, nursery)
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
    import trio

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


# -- judging ------------------------------------------------------------------------


def history_ops(history: list[Op]) -> list[Any]:
    """The history as the checker's :class:`epto.check.HistoryOp` records."""
    from epto.check import HistoryOp

    out = []
    for op in history:
        arg = tuple(op.arg) if op.op == "cas" and isinstance(op.arg, list) else op.arg
        result = op.result
        if op.op == "read" and isinstance(result, list):
            result = tuple(result)
        out.append(
            HistoryOp(
                client=op.client,
                key=op.key,
                op=op.op,
                arg=arg,
                result=result,
                status=op.status,
                invoked=op.invoked,
                completed=None if op.status == "info" else op.completed,
            )
        )
    return out


def judge(report: RunReport, *, max_states: int) -> None:
    """Fill in the verdicts of ``report``."""
    from epto.check import check_linearizable

    spec = report.spec
    verdict = check_linearizable(
        history_ops(report.history), model=spec.workload, max_states=max_states
    )
    report.linearizable = verdict.ok
    report.lin_detail = verdict.failure
    ready = {p: f["state"] for p, f in report.finals.items() if f.get("ready")}
    report.lost = lost_acknowledged(report.history, ready, model=spec.workload)
    report.windows = unavailability(report.history, report.faults, report.load_end)
    report.diverged = divergence(report.finals)


# -- saving and loading -------------------------------------------------------------


def save(report: RunReport, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "history.jsonl", "w") as f:
        for op in report.history:
            f.write(op.to_json() + "\n")
    meta = {
        "spec": attrs.asdict(report.spec),
        "faults": [attrs.asdict(f) for f in report.faults],
        "finals": {str(p): f for p, f in report.finals.items()},
        "load_end": report.load_end,
        "last_heal": report.last_heal,
        "events": report.events,
        "proxy": report.proxy,
    }
    (run_dir / "run.json").write_text(json.dumps(meta, indent=1, default=list))


def load(run_dir: Path) -> RunReport:
    meta = json.loads((run_dir / "run.json").read_text())
    spec_fields = dict(meta["spec"])
    spec_fields["faults"] = tuple(spec_fields["faults"])
    history = [
        Op.from_json(line) for line in (run_dir / "history.jsonl").read_text().splitlines() if line
    ]
    faults = [FaultRecord(**{**f, "targets": tuple(f.get("targets", ()))}) for f in meta["faults"]]
    return RunReport(
        spec=RunSpec(**spec_fields),
        history=history,
        faults=faults,
        finals={int(p): f for p, f in meta["finals"].items()},
        load_end=float(meta["load_end"]),
        last_heal=float(meta["last_heal"]),
        events=list(meta.get("events", [])),
        proxy=dict(meta.get("proxy", {})),
    )


# -- printing -----------------------------------------------------------------------


def _lin(value: bool | None) -> str:
    return {True: "yes", False: "NO", None: "undecided"}[value]


def print_report(report: RunReport, label: str) -> None:
    spec = report.spec
    counts = report.counts()
    div = report.diverged
    groups = "" if div is None else " / ".join(",".join(map(str, g)) for g in div.groups)
    print(
        f"{label}: {spec.engine}, {spec.replicas} replicas, {spec.workload}, seed {spec.seed}, "
        f"{report.elapsed:.0f} s"
    )
    print(
        f"  ops {len(report.history)} (ok {counts['ok']}, fail {counts['fail']}, "
        f"info {counts['info']}); ok after the last heal {report.ok_after_heal()}"
    )
    print(
        f"  linearizable {_lin(report.linearizable)}; lost acknowledged writes "
        f"{len(report.lost)}; final states {'DIVERGENT' if div and div.divergent else 'agree'}"
        f" [{groups}]" + (f"; not ready at the end: {list(div.stuck)}" if div and div.stuck else "")
    )
    if div is not None and (div.divergent or div.stuck):
        for pid, final in sorted(report.finals.items()):
            print(
                f"  replica {pid}: ready {final.get('ready')}, applied {final.get('applied')}, "
                f"cut {final.get('cut')}, digest {str(final.get('digest'))[:12]}"
            )
    if report.lin_detail:
        print(f"  checker: {report.lin_detail[:600]}")
    for op, where in report.lost[:5]:
        print(
            f"  lost: client {op.client} {op.op}({op.key}, {op.arg}) ok at "
            f"{op.completed:.2f}s, absent at replicas {list(where)}"
        )
    print(
        f"  {'fault':<19} {'targets':<12} {'start':>7} {'healed':>7} {'gap':>7} "
        f"{'recover':>8}  note"
    )
    for w in report.windows:
        f = w.fault
        recovery = "never" if w.recovery is None else f"{w.recovery:.2f}s"
        targets = ",".join(map(str, f.targets))
        print(
            f"  {f.kind:<19} {targets:<12} {f.start:>6.1f}s {f.healed:>6.1f}s "
            f"{w.gap:>6.2f}s {recovery:>8}  {f.note}"
        )
    for event in report.events:
        print(f"  event: {event}")


def summarize(reports: list[RunReport]) -> str:
    by_engine: dict[str, list[RunReport]] = {}
    for r in reports:
        by_engine.setdefault(r.spec.engine, []).append(r)
    lines = []
    for engine, rs in by_engine.items():
        counts: Counter[str] = Counter()
        for r in rs:
            counts.update(r.counts())
        gaps: dict[str, list[float]] = {}
        for r in rs:
            for w in r.windows:
                gaps.setdefault(w.fault.kind, []).append(w.gap)
        windows = ", ".join(
            f"{k} n={len(v)} max {max(v):.1f}s median {sorted(v)[len(v) // 2]:.1f}s"
            for k, v in sorted(gaps.items())
        )
        lines.append(
            f"summary {engine}: runs {len(rs)}, ops {sum(counts.values())} (ok {counts['ok']}, "
            f"fail {counts['fail']}, info {counts['info']}), linearizable "
            f"{sum(r.linearizable is True for r in rs)}/{len(rs)} "
            f"(undecided {sum(r.linearizable is None for r in rs)}), lost acknowledged writes "
            f"{sum(len(r.lost) for r in rs)}, divergent runs "
            f"{sum(bool(r.diverged and r.diverged.divergent) for r in rs)}, runs with a replica "
            f"not ready at the end {sum(bool(r.diverged and r.diverged.stuck) for r in rs)}, "
            f"unexpected exits {sum(sum('exited by itself' in e for e in r.events) for r in rs)}; "
            f"unavailability: {windows or 'no faults'}"
        )
    return "\n".join(lines)


# -- the command --------------------------------------------------------------------


def _list(value: str, known: tuple[str, ...], option: str) -> tuple[str, ...]:
    from epto import ConfigurationError

    items = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = sorted(set(items) - set(known))
    if unknown or not items:
        raise ConfigurationError(f"{option}: unknown {unknown}; choose from {', '.join(known)}")
    return items


def specs(args: argparse.Namespace) -> list[RunSpec]:
    from epto import ConfigurationError

    engines = _list(args.engine, ENGINES, "--engine")
    faults = _list(args.faults, FAULTS, "--faults")
    workloads = _list(args.workload, WORKLOADS, "--workload")
    schedule = _list(args.schedule, FAULTS, "--schedule") if args.schedule else ()
    if schedule:
        faults = tuple(sorted(set(schedule), key=FAULTS.index))
    if args.replicas < 3 or args.runs < 1 or args.clients < 1 or args.keys < 1:
        raise ConfigurationError("--replicas >= 3, --runs, --clients and --keys >= 1")
    if min(args.rate, args.op_timeout, args.fault_duration, args.duration) <= 0:
        raise ConfigurationError("--rate, --op-timeout, --fault-duration, --duration must be > 0")
    out = []
    for engine in engines:
        for i in range(args.runs):
            out.append(
                RunSpec(
                    engine=engine,
                    replicas=args.replicas,
                    seed=args.seed + i,
                    faults=faults,
                    duration=args.duration,
                    workload=workloads[i % len(workloads)],
                    clients=args.clients,
                    keys=args.keys,
                    rate=args.rate,
                    op_timeout=args.op_timeout,
                    fault_duration=args.fault_duration,
                    gap=args.gap,
                    warmup=args.warmup,
                    quiesce=args.quiesce,
                    settle=args.settle,
                    round_interval=args.round_interval,
                    max_joins=args.max_joins if "join" in faults else 0,
                    start_timeout=args.start_timeout,
                    schedule=schedule,
                )
            )
    return out


def _command_line(args: argparse.Namespace) -> str:
    schedule = f" --schedule {args.schedule}" if args.schedule else ""
    return (
        f"epto bench faults --engine {args.engine} --replicas {args.replicas} --runs {args.runs} "
        f"--seed {args.seed} --faults {args.faults}{schedule} --duration {args.duration:g} "
        f"--workload {args.workload} --clients {args.clients} --keys {args.keys} "
        f"--rate {args.rate:g} --op-timeout {args.op_timeout:g} "
        f"--fault-duration {args.fault_duration:g} --gap {args.gap:g} "
        f"--quiesce {args.quiesce:g} --round-interval {args.round_interval:g}"
    )


def recheck(directory: Path, max_states: int) -> int:
    reports = []
    for run_dir in sorted(p.parent for p in directory.glob("*/run.json")):
        report = load(run_dir)
        judge(report, max_states=max_states)
        print_report(report, run_dir.name)
        reports.append(report)
    if not reports:
        print(f"no run.json under {directory}")
        return 2
    print(summarize(reports))
    return 0 if all(r.safe for r in reports) else 1


def run(args: argparse.Namespace) -> int:
    import trio

    if args.check:
        return recheck(Path(args.check), args.max_states)
    runs = specs(args)
    print("command: " + _command_line(args))
    print(
        f"python {sys.version.split()[0]}, trio {trio.__version__}, {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    base = Path(args.keep_dir) if args.keep_dir else Path(tempfile.mkdtemp(prefix="epto-faults-"))
    reports = []
    try:
        for i, spec in enumerate(runs):
            run_dir = base / f"{spec.engine}-{i + 1:02d}-seed{spec.seed}"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            report = trio.run(run_once, spec, run_dir)
            judge(report, max_states=args.max_states)
            save(report, run_dir)
            print_report(report, f"run {i + 1}/{len(runs)}")
            sys.stdout.flush()
            reports.append(report)
    finally:
        if not args.keep_dir:
            shutil.rmtree(base, ignore_errors=True)
    print(summarize(reports))
    if args.keep_dir:
        print(f"histories and worker logs: {base} (re-judge: epto bench faults --check {base})")
    return 0 if all(r.safe for r in reports) else 1
