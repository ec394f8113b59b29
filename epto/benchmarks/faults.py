"""Fault injection over real processes: kills, wipes, pauses, partitions; histories checked.

``epto bench faults`` starts ``--replicas`` worker processes, each one
:class:`~epto.services.trio_rsm.ReplicatedNode` of a replicated register
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

Modules: this one is the command (options, judging, the table, saving and
re-checking); :mod:`._fault_run` runs one run (cluster, clients, nemesis,
final reads); :mod:`._fault_proxy` the network, :mod:`._fault_worker` a
replica process, :mod:`._fault_machines` the state machines,
:mod:`._fault_verdicts` the definitions of the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._fault_verdicts import (
    FaultRecord,
    Op,
    divergence,
    longest_outage,
    lost_acknowledged,
    unavailability,
)

if TYPE_CHECKING:
    from ._fault_run import RunReport, RunSpec

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
    from ._fault_run import RunReport, RunSpec

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
    a, b = longest_outage(report.history, 0.0, report.load_end)
    print(
        f"  ops {len(report.history)} (ok {counts['ok']}, fail {counts['fail']}, "
        f"info {counts['info']}); ok after the last heal {report.ok_after_heal()}; "
        f"longest outage {b - a:.1f}s ({a:.1f}s to {b:.1f}s)"
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
        outages = [longest_outage(r.history, 0.0, r.load_end) for r in rs]
        worst = max(b - a for a, b in outages)
        lines.append(
            f"summary {engine}: runs {len(rs)}, ops {sum(counts.values())} (ok {counts['ok']}, "
            f"fail {counts['fail']}, info {counts['info']}), linearizable "
            f"{sum(r.linearizable is True for r in rs)}/{len(rs)} "
            f"(undecided {sum(r.linearizable is None for r in rs)}), lost acknowledged writes "
            f"{sum(len(r.lost) for r in rs)}, divergent runs "
            f"{sum(bool(r.diverged and r.diverged.divergent) for r in rs)}, runs with a replica "
            f"not ready at the end {sum(bool(r.diverged and r.diverged.stuck) for r in rs)}, "
            f"unexpected exits {sum(sum('exited by itself' in e for e in r.events) for r in rs)}; "
            f"longest outage {worst:.1f}s; unavailability after each fault: "
            f"{windows or 'no faults'}"
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

    from ._fault_run import RunSpec

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

    from ._fault_run import run_once

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
