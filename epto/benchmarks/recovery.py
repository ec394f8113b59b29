"""Recovery after a crash: SIGKILLed replicas restarted as themselves, epto.rsm against PySyncObj.

Every system runs the state machine of ``epto bench rsm`` (``incr``, ``set``,
``fill``) with a data directory per replica, each replica an OS process on
127.0.0.1: epto's ``ReplicatedNode`` on the token ring and on EpTO
(``ReplicaConfig(data_dir=...)``, and ``NodeConfig.data_dir`` where the
library has it), PySyncObj with ``SyncObjConf(journalFile=...,
fullDumpFile=...)``. A run:

1. start the group, fill the state with ``--state-mb`` of values through
   ``fill`` commands, make it durable (epto: a snapshot,
   ``ReplicatedNode.take_snapshot``; PySyncObj: ``forceLogCompaction``, the
   full dump file), then commit 5 ``incr`` (in the log or journal only);
2. SIGKILL the victims; while they are down a survivor commits ``--missed``
   more ``incr`` (scenario ``one`` only: with 3 of 5 down, PySyncObj has no
   majority);
3. restart each victim as a new process with the same id, addresses,
   configuration and data directory, and measure, from the spawn of its
   process, the time until it is ready (epto: ``wait_ready()`` returned;
   PySyncObj: ``isReady()``) and until its first command, an ``incr`` issued
   at the restarted replica, returned (epto: ``call``; PySyncObj: a ``sync``
   call). The value must continue the group's counter (scenario ``one``:
   exactly 5 + missed + 1; ``many``: the restarted get distinct values just
   above 5) and the replica must hold every filled entry then;
4. stop everyone; the survivors and the restarted must end with the same
   counter, count of commands and state hash.

Scenarios: ``one``, 3 replicas and one of them killed (PySyncObj: a follower,
and in a second case the leader; the epto engines have no leader: pid 2);
``many``, 5 replicas and ``--at-once`` of them (3: pids 3, 4, 5) killed and
restarted at once (PySyncObj: followers), whose target is every one serving a command
within ``--target`` seconds. Runs are interleaved across systems, round by
round; every wait is bounded by ``--timeout``, and a run that fails prints a
failure row saying where.

Size: one harness (about 500 lines) for three systems and two scenarios: the
group of worker processes and its pipes, the choreography of one crash, the
checks of what the restarted replicas return and the two tables; the replica
processes themselves are ``_recovery_worker.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterable
from typing import Any

from ._recovery_worker import PRE_INCR, worker

SYSTEMS = ("token-ring", "epto", "pysyncobj")
SCENARIOS = ("one", "many")
CASES = ("follower", "leader")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="one,many")
    p.add_argument("--state-mb", default="1,10", help="MB of state (its JSON snapshot) per run")
    p.add_argument("--rounds", type=int, default=3, help="rounds of scenario one")
    p.add_argument("--rounds-many", type=int, default=1, help="rounds of scenario many")
    p.add_argument(
        "--at-once", type=int, default=3, help="scenario many: replicas of 5 killed at once"
    )
    p.add_argument(
        "--pysyncobj-cases",
        default=",".join(CASES),
        help="scenario one, PySyncObj: kill a follower, the leader, or both cases",
    )
    p.add_argument("--missed", type=int, default=20, help="incr committed while a replica is down")
    p.add_argument("--down", type=float, default=1.0, help="seconds between kill and restart")
    p.add_argument("--target", type=float, default=10.0, help="scenario many: seconds")
    p.add_argument("--round-interval", type=float, default=0.02, help="EpTO round, seconds")
    p.add_argument("--clock", choices=("logical", "global"), default="global")
    p.add_argument("--timeout", type=float, default=60.0, help="bound on every wait, seconds")
    p.add_argument("--quick", action="store_true", help="0.2 MB, 1 round, both scenarios")
    p.set_defaults(func=run)


def _split(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


# -- one run ----------------------------------------------------------------------


class RunFailed(Exception):
    """A run that could not finish; the message says where."""


class _Group:
    """The worker processes of one run and their pipes."""

    def __init__(self, system: str, n: int, mb: float, args: argparse.Namespace) -> None:
        from .replication import _free_ports
        from .rsm import _fill_plan

        self.ctx = mp.get_context("spawn")
        self.system, self.n, self.args = system, n, args
        self.plan = _fill_plan(mb)
        # One pipe per worker, not a queue shared by all: a worker SIGKILLed
        # while it held a shared queue's lock would leave it held for good.
        self.conns: dict[int, Any] = {}
        self.procs: dict[int, Any] = {}
        self.killed: set[int] = set()
        ports = _free_ports(2 * n)
        self.ports, self.transfer_ports = ports[:n], ports[n:]
        self.root = tempfile.mkdtemp(prefix=f"epto-recovery-{system}-")
        self.stage = "starting"

    def spawn(self, index: int, restarted: bool) -> None:
        spec = {
            "system": self.system,
            "index": index,
            "n": self.n,
            "ports": self.ports,
            "transfer_ports": self.transfer_ports,
            "data_dir": os.path.join(self.root, f"replica-{index + 1}"),
            "restarted": restarted,
            "timeout": self.args.timeout,
            "round_interval": self.args.round_interval,
            "clock": self.args.clock,
            "t_spawn": time.time(),
        }
        mine, theirs = self.ctx.Pipe()
        proc = self.ctx.Process(target=worker, args=(spec, theirs), daemon=True)
        self.conns[index], self.procs[index] = mine, proc
        self.killed.discard(index)
        proc.start()
        theirs.close()

    def send(self, indices: Iterable[int], *msg: Any) -> None:
        for i in indices:
            self.conns[i].send(msg)

    def expect(
        self, tag: str, indices: Iterable[int], wait: float, *, each: bool = False
    ) -> dict[int, Any]:
        """The ``tag`` answers of ``indices`` within ``wait`` seconds; any
        worker's error, a death or silence raises :class:`RunFailed`, or with
        ``each``, for one of ``indices``, is its answer (``{"error": ...}``)."""
        want = set(indices)
        got: dict[int, Any] = {}
        deadline = time.monotonic() + wait
        while want - got.keys():
            live = {self.conns[i]: i for i in self.conns if i not in self.killed}
            for ready in mp_connection.wait(list(live), timeout=0.2):
                index = live[ready]
                conn: Any = ready
                try:
                    got_tag, payload = conn.recv()
                except (EOFError, OSError):
                    self.killed.add(index)  # it will not answer again
                    if index not in want or index in got:
                        continue  # it answered, then left (a stop)
                    self.procs[index].join(timeout=2)
                    code = self.procs[index].exitcode
                    got_tag, payload = "error", {"error": f"exited (code {code})"}
                if got_tag == "error" and each and index in want:
                    got[index] = payload
                elif got_tag == "error":
                    raise RunFailed(f"{self.stage}: pid {index + 1}: {payload['error']}")
                elif got_tag == tag and index in want:
                    got[index] = payload
            silent = sorted(want - got.keys())
            if silent and time.monotonic() > deadline:
                self._dump_stacks(silent)
                if not each:
                    pids = ",".join(str(i + 1) for i in silent)
                    raise RunFailed(f"{self.stage}: no answer from pid {pids} in {wait:g} s")
                for i in silent:
                    got[i] = {"error": f"no answer in {wait:g} s"}
        return got

    def _dump_stacks(self, indices: Iterable[int]) -> None:
        """Ask silent workers for their threads' stacks (on standard error)."""
        for i in indices:
            pid = self.procs[i].pid
            if pid is not None and self.procs[i].is_alive():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGUSR1)
        time.sleep(0.5)

    def order(self, stage: str, indices: Iterable[int], *msg: Any) -> dict[int, Any]:
        indices = list(indices)
        self.stage = stage
        self.send(indices, *msg)
        return self.expect(msg[0], indices, self.args.timeout + 10)

    def kill(self, indices: Iterable[int]) -> None:
        self.killed.update(indices)
        for i in indices:
            self.procs[i].kill()  # SIGKILL
        for i in indices:
            self.procs[i].join(timeout=10)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        for proc in self.procs.values():
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _one_run(system: str, scenario: str, case: str, mb: float, args: argparse.Namespace) -> Any:
    """One crash and restart: the restarted replicas' figures, or raises
    :class:`RunFailed`."""
    n = 3 if scenario == "one" else 5
    group = _Group(system, n, mb, args)
    try:
        return _choreography(group, scenario, case)
    finally:
        group.close()


def _choreography(group: _Group, scenario: str, case: str) -> dict[str, Any]:
    args, n = group.args, group.n
    everyone = range(n)
    for i in everyone:
        group.spawn(i, restarted=False)
    group.expect("up", everyone, args.timeout + 30)  # imports, then the group forms
    victims = _victims(group, scenario, case)
    issuer = min(set(everyone) - set(victims))
    fills = len(group.plan)
    group.order("filling", [issuer], "fill", group.plan)
    group.order("making the state durable", everyone, "durable", fills)
    counter = group.order("committing before the crash", [issuer], "incr", PRE_INCR)[issuer]
    counter = counter["value"]
    applied = fills + PRE_INCR
    group.order("settling before the crash", everyone, "settle", applied)
    group.stage = "killing"
    group.kill(victims)
    down = ",".join(str(v + 1) for v in victims)
    missed = args.missed if scenario == "one" else 0
    if missed:
        stage = f"committing while pid {down} is down"
        counter = group.order(stage, [issuer], "incr", missed)[issuer]["value"]
        applied += missed
    time.sleep(args.down)
    notes = []
    survivors = [i for i in everyone if i not in victims]
    before = _leader(group, survivors) if group.system == "pysyncobj" and missed else None
    group.stage = "restarting"
    for v in victims:
        group.spawn(v, restarted=True)
    group.stage = "recovering"
    firsts = group.expect("first", victims, 2 * args.timeout + 30, each=True)
    failed = {i: f["error"] for i, f in firsts.items() if "error" in f}
    if failed and scenario == "one":
        ((v, error),) = failed.items()
        raise RunFailed(f"recovering: pid {v + 1}: {error}")
    if failed:  # the others' figures are still worth a row
        return {"victims": victims, "firsts": firsts, "bad": ["FAILED"], "notes": []}
    applied += len(victims)
    bad = _check_values(firsts, counter, len(victims), _entries(group.plan))
    if before is not None:
        after = _leader(group, everyone)
        if after != before:
            notes.append(
                f"leader pid {before[0] + 1} in term {before[1]} before the restart, "
                f"pid {after[0] + 1} in term {after[1]} after"
            )
    group.order("settling after the restart", everyone, "settle", applied)
    finals = group.order("stopping", everyone, "stop")
    ends = {(f["counter"], f["n"], f["state"]) for f in finals.values()}
    if len(ends) != 1:
        each = "; ".join(
            f"pid {i + 1}: counter {f['counter']}, n {f['n']}, {f['state'][:8]}"
            for i, f in sorted(finals.items())
        )
        bad.append(f"REPLICAS DIFFER at the end ({each})")
    return {"victims": victims, "firsts": firsts, "bad": bad, "notes": notes}


def _leader(group: _Group, indices: Iterable[int]) -> tuple[int, int]:
    """PySyncObj: the index of the leader the replicas ``indices`` agree on,
    and the highest Raft term among them."""
    answers = group.order("finding the leader", indices, "leader")
    leaders = {a["leader"] for a in answers.values()}
    if len(leaders) != 1 or None in leaders:
        raise RunFailed(f"finding the leader: the replicas disagree ({sorted(map(str, leaders))})")
    (leader,) = leaders
    term = max(a["term"] for a in answers.values())
    return group.ports.index(int(leader.rsplit(":", 1)[1])), term


def _victims(group: _Group, scenario: str, case: str) -> list[int]:
    n = group.n
    if group.system != "pysyncobj":
        return [1] if scenario == "one" else list(range(n - group.args.at_once, n))
    leader = _leader(group, range(n))[0]
    if scenario == "one" and case == "leader":
        return [leader]
    followers = [i for i in range(n) if i != leader]
    return followers[:1] if scenario == "one" else followers[-group.args.at_once :]


def _entries(plan: list[tuple[int, int]]) -> int:
    return sum(count for _, count in plan)


def _check_values(firsts: dict[int, Any], counter: int, restarted: int, entries: int) -> list[str]:
    """What the restarted replicas' first commands returned, against the
    group's counter ``counter`` before them."""
    bad = []
    values = sorted(f["value"] for f in firsts.values())
    if values != list(range(counter + 1, counter + restarted + 1)):
        expected = ",".join(str(counter + k) for k in range(1, restarted + 1))
        got = ",".join(map(str, values))
        bad.append(f"WRONG VALUE: incr returned {got}, the group's counter gives {expected}")
    short = [
        f"pid {i + 1}: {f['entries']}" for i, f in sorted(firsts.items()) if f["entries"] != entries
    ]
    if short:
        bad.append(f"STATE INCOMPLETE: {', '.join(short)} of {entries} entries")
    return bad


# -- the tables ---------------------------------------------------------------------


def _label(system: str, case: str) -> str:
    return f"{system}/{case}" if system == "pysyncobj" else system


def _row_one(system: str, case: str, mb: float, rnd: int, r: dict[str, Any]) -> str:
    ((v, f),) = r["firsts"].items()
    return (
        f"  round {rnd} {_label(system, case):<18} {mb:>5g}MB pid {v + 1}: "
        f"python up {f['t_imported'] - f['t_spawn']:.2f}s, "
        f"ready {f['t_ready'] - f['t_spawn']:.2f}s, "
        f"first command {f['t_first'] - f['t_spawn']:.2f}s (incr -> {f['value']}), "
        f"cpu {f['cpu']:.2f}s" + "".join(f"; {b}" for b in r["bad"] + r["notes"])
    )


def _summary(times: list[float]) -> str:
    if not times:
        return f"{'-':>7} {'-':>7} {'-':>7}"
    return f"{min(times):>6.2f}s {statistics.median(times):>6.2f}s {max(times):>6.2f}s"


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):>6.2f}s" if values else f"{'-':>7}"


def _scenario_one(
    systems: list[str], cases: list[str], sizes: list[float], args: argparse.Namespace
) -> int:
    status = 0
    runs = [(s, c) for s in systems for c in (cases if s == "pysyncobj" else ["pid 2"])]
    results: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    failures: dict[tuple[str, str, float], list[str]] = {}
    print(
        f"scenario one: 3 replicas, one SIGKILLed after the fill, {args.missed} incr "
        f"committed while it is down, restarted {args.down:g} s after the kill"
    )
    for rnd in range(1, args.rounds + 1):
        for mb in sizes:
            for system, case in runs:
                key = (system, case, mb)
                try:
                    r = _one_run(system, "one", case, mb, args)
                except RunFailed as err:
                    failures.setdefault(key, []).append(str(err))
                    print(
                        f"  round {rnd} {_label(system, case):<18} {mb:>5g}MB failed: {err}",
                        flush=True,
                    )
                    status = 1
                    continue
                results.setdefault(key, []).append(r)
                status |= 1 if r["bad"] else 0
                print(_row_one(system, case, mb, rnd, r), flush=True)
    print(
        "summary: seconds from the restarted process's spawn to its first command "
        "returned (min, median, max) and to ready (median); CPU seconds of that process "
        "by then (median); ok: runs whose first command returned the group's value"
    )
    print(
        f"{'system':<19} {'state':>6} {'ok':>5} {'min':>7} {'median':>7} {'max':>7} "
        f"{'ready':>7} {'cpu':>7}"
    )
    for mb in sizes:
        for system, case in runs:
            key = (system, case, mb)
            good = [r for r in results.get(key, []) if not r["bad"]]
            total = len(results.get(key, [])) + len(failures.get(key, []))
            firsts = [next(iter(r["firsts"].values())) for r in good]
            first = [f["t_first"] - f["t_spawn"] for f in firsts]
            ready = [f["t_ready"] - f["t_spawn"] for f in firsts]
            cpu = [f["cpu"] for f in firsts]
            print(
                f"{_label(system, case):<19} {mb:>4g}MB {len(good):>3}/{total:<1} "
                f"{_summary(first)} {_median(ready)} {_median(cpu)}",
                flush=True,
            )
    return status


def _scenario_many(systems: list[str], sizes: list[float], args: argparse.Namespace) -> int:
    status = 0
    print(
        f"scenario many: 5 replicas, {args.at_once} SIGKILLed at once after the fill and restarted "
        f"together {args.down:g} s later (no command while they are down); target: each "
        f"serves a command within {args.target:g} s"
    )
    print(f"{'system':<19} {'state':>6}  first command after the restart, per restarted pid")
    for _ in range(args.rounds_many):
        for mb in sizes:
            for system in systems:
                head = f"{system:<19} {mb:>4g}MB "
                try:
                    r = _one_run(system, "many", "followers", mb, args)
                except RunFailed as err:
                    print(f"{head} failed: {err}", flush=True)
                    status = 1
                    continue
                firsts = r["firsts"]
                each = ", ".join(_row_many(i, f) for i, f in sorted(firsts.items()))
                served = [f["t_first"] - f["t_spawn"] for f in firsts.values() if "error" not in f]
                worst = max(served, default=math.inf)
                if len(served) < len(firsts):
                    met = "TARGET MISSED (not every one served)"
                else:
                    met = "target met" if worst < args.target else "TARGET MISSED"
                status |= 1 if r["bad"] or worst >= args.target else 0
                notes = "".join(f"; {b}" for b in r["bad"] if b != "FAILED")
                if system == "token-ring" and args.at_once > 2 and "FAILED" in r["bad"]:
                    notes += (
                        "; by the token ring's rule a majority restarted at once waits "
                        "for an operator (docs/token-ring.md)"
                    )
                ready = [f["t_ready"] - f["t_spawn"] for f in firsts.values() if "error" not in f]
                most = f"max {worst:.2f}s (ready {max(ready):.2f}s)" if served else "none served"
                print(f"{head} {each}; {most}, {met}{notes}", flush=True)
    return status


def _row_many(index: int, first: dict[str, Any]) -> str:
    if "error" in first:
        return f"pid {index + 1}: FAILED ({first['error']})"
    return (
        f"pid {index + 1}: {first['t_first'] - first['t_spawn']:.2f}s "
        f"(ready {first['t_ready'] - first['t_spawn']:.2f}s, value {first['value']})"
    )


def _command_line(args: argparse.Namespace) -> str:
    return (
        f"epto bench recovery --systems {args.systems} --scenarios {args.scenarios} "
        f"--state-mb {args.state_mb} --rounds {args.rounds} --rounds-many {args.rounds_many} "
        f"--at-once {args.at_once} "
        f"--pysyncobj-cases {args.pysyncobj_cases} --missed {args.missed} --down {args.down:g} "
        f"--target {args.target:g} --round-interval {args.round_interval:g} --clock {args.clock} "
        f"--timeout {args.timeout:g}"
    )


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError

    if args.quick:
        args.state_mb, args.rounds, args.rounds_many = "0.2", 1, 1
    systems = _split(args.systems)
    scenarios = _split(args.scenarios)
    cases = _split(args.pysyncobj_cases)
    for name, given, known in (
        ("--systems", systems, SYSTEMS),
        ("--scenarios", scenarios, SCENARIOS),
        ("--pysyncobj-cases", cases, CASES),
    ):
        unknown = sorted(set(given) - set(known))
        if unknown or not given:
            raise ConfigurationError(f"{name}: unknown {unknown}; choose from {', '.join(known)}")
    try:
        sizes = [float(s) for s in _split(args.state_mb)]
    except ValueError:
        raise ConfigurationError(f"--state-mb: numbers, got {args.state_mb!r}") from None
    if not sizes or min(sizes) <= 0 or args.rounds < 1 or args.rounds_many < 1:
        raise ConfigurationError("--state-mb > 0, --rounds >= 1, --rounds-many >= 1")
    if not 1 <= args.at_once <= 4:
        raise ConfigurationError("--at-once: 1 to 4 of the 5 replicas")
    if args.missed < 0 or args.down < 0 or args.timeout <= 0:
        raise ConfigurationError("--missed >= 0, --down >= 0, --timeout > 0")
    started = time.time()
    print("command: " + _command_line(args))
    print(
        f"OS processes on 127.0.0.1, {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; times from the restarted "
        "process's spawn; EpTO round "
        f"{args.round_interval * 1000:g} ms, {args.clock} clock"
    )
    status = 0
    if "one" in scenarios:
        status |= _scenario_one(systems, cases, sizes, args)
    if "many" in scenarios:
        status |= _scenario_many(systems, sizes, args)
    print(
        f"took {time.time() - started:.0f} s; load average now "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return status
