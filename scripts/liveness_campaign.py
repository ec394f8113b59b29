"""Liveness campaign: seeded random fault schedules of both engines, with
deliveries counted against broadcasts among the members that stay.

    nice -n 10 .venv/bin/python scripts/liveness_campaign.py --token-ring 5000 --epto 2000 \\
        --jobs 2 --out liveness.json --csv liveness.csv
    .venv/bin/python scripts/liveness_campaign.py --token-ring 40 --epto 20   # a quick look
    .venv/bin/python scripts/liveness_campaign.py --token-ring 1 --first 2598 --show

A *schedule* is a value drawn from its seed (``draw_ring(seed)``,
``draw_epto(seed)``): group size, latency, link loss, configuration, a
workload and the faults, then a settle time. It runs in virtual time
(``epto.transports.simulation``), bounded: the faults and broadcasts end at
``until``, loss stops there, and the run goes on for at most ``settle``
seconds of virtual time (token ring) or ``settle_rounds`` rounds (EpTO),
ending as soon as every staying member delivered every broadcast of a
staying source. A schedule that exceeds ``--wall-cap`` seconds of wall time
is skipped and counted, never waited for.

Token ring: 3 to 9 members (half of the draws), 10 to 14, or 15 to 30; the
default timeouts, or all of them scaled by 0.3 or 0.5 in one draw of three
(the simulator's harness fits them to the group where the code has that
rule); a window of one message, a small window, or the
default; optimistic delivery in one draw of six; link breaks from 0 to 20%;
crashes (of any member or of the token holder), a member cut off and
returned, a partition healed later, scripted link breaks, a join.

EpTO: 3 to 9 members or 10 to 30, ``Config.for_group``; the logical or the
global clock (resolution 10^6, 10^3 or 1 tick per second), bursts of up to
2,000 broadcasts at once at one member; uniform or PlanetLab latencies;
datagram loss from 0 to 30%; crashes, a partition healed later, joins.

Counted per schedule, among the *staying* members (alive at the end; for
the token ring in the view, not joining, and bootstrap members; for EpTO,
present from the start): ``expected`` = staying members times broadcasts of
staying sources, ``delivered`` = how many of those each delivered. A
schedule *delivers everything* when the two are equal. Safety over every
process that ever ran, with ``epto.check.check`` against the broadcasts
(final deliveries; a token ring's optimistic and revoked ones are not in
the order): order and integrity violations, which must be 0. A token-ring
schedule where no majority of the latest view stays alive is counted apart
(``no-quorum``: only safety is promised there).

The module imports the engines by their public names only, so that the
same file runs against older trees (``--before`` is just a label).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from functools import partial
from types import FrameType
from typing import Any

from epto.transports.simulation import (
    Cluster,
    PlanetLabLatency,
    TokenRingCluster,
    UniformLatency,
)

from epto.check import check
from epto.tokenring import TokenRingConfig

try:  # the EpTO engine's own package, where the tree has one
    from epto.epidemic import Config  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - older trees
    from epto import Config  # type: ignore[attr-defined,no-redef,unused-ignore]

Spec = dict[str, Any]
Record = dict[str, Any]

RING_BANDS = ("3-9", "10-14", "15-30")
EPTO_BANDS = ("3-9", "10-30")


def band(engine: str, n: int) -> str:
    if n <= 9:
        return "3-9"
    if engine == "epto":
        return "10-30"
    return "10-14" if n <= 14 else "15-30"


# -- drawing ---------------------------------------------------------------


def draw_ring(seed: int) -> Spec:
    """The token-ring schedule of ``seed``."""
    rng = random.Random(f"liveness/ring/{seed}")
    size = rng.random()
    n = (
        rng.randint(3, 9)
        if size < 0.5
        else rng.randint(10, 14)
        if size < 0.7
        else rng.randint(15, 30)
    )
    high = rng.choice([0.002, 0.01, 0.03])
    kind = rng.random()
    window = 1 if kind < 0.25 else rng.choice([8, 16, 64]) if kind < 0.45 else None
    loss = rng.choice([0.0, 0.0, rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.2)])
    until = rng.uniform(2.0, 5.0)
    # What the group can order: a window of one sequences one message a
    # rotation, so offer that kind of rate.
    rotation = n * high
    rate = min(20.0, 0.5 / rotation) if window == 1 else rng.choice([10.0, 40.0, 150.0])
    faults: list[list[Any]] = []
    for kind_ in rng.sample(
        ["crash", "crash-holder", "cut", "partition", "breaks", "join"], k=rng.randint(0, 3)
    ):
        if kind_ == "crash":
            faults.append(["crash", round(rng.uniform(0.3, until), 4), rng.randrange(n)])
        elif kind_ == "crash-holder":
            faults.append(["crash-holder", round(rng.uniform(0.3, until), 4)])
        elif kind_ == "cut":
            start = rng.uniform(0.3, until)
            faults.append(
                ["cut", round(start, 4), rng.randrange(n), round(start + rng.uniform(0.2, 3.0), 4)]
            )
        elif kind_ == "partition":
            members = list(range(n))
            rng.shuffle(members)
            cut = rng.randrange(1, n)
            start = rng.uniform(0.3, until)
            end = min(start + rng.uniform(0.2, 6.0), until + 3.0)
            faults.append(["partition", round(start, 4), round(end, 4), sorted(members[:cut])])
        elif kind_ == "breaks":
            for _ in range(rng.randrange(3, 15)):
                a, b = rng.sample(range(n), 2)
                faults.append(
                    [
                        "break",
                        round(rng.uniform(0.1, until), 4),
                        a,
                        b,
                        round(rng.uniform(0.01, 0.5), 4),
                    ]
                )
        else:
            contacts = rng.sample(range(n), k=min(n, 2))
            faults.append(["join", round(rng.uniform(0.3, until), 4), 100 + seed % 7, contacts])
    optimistic = rng.choice(["none", "optimal"]) if rng.random() < 1 / 6 else None
    # One draw of three scales every timeout down (their ratios kept): a
    # token timeout of 0.3 s may be shorter than one rotation.
    timeouts = rng.choice([0.3, 0.5]) if rng.random() < 1 / 3 else 1.0
    return {
        "engine": "token-ring",
        "seed": seed,
        "n": n,
        "delay": [0.0005, high],
        "loss": round(loss, 4),
        "break_duration": round(rng.uniform(0.001, 0.05), 4),
        "window": window,
        "optimistic": optimistic,
        "timeouts": timeouts,
        "rate": round(rate, 3),
        "until": round(until, 3),
        "faults": faults,
        "settle": round(20.0 + 0.5 * n, 1),
    }


def draw_epto(seed: int) -> Spec:
    """The EpTO schedule of ``seed``."""
    rng = random.Random(f"liveness/epto/{seed}")
    n = rng.randint(3, 9) if rng.random() < 0.5 else rng.randint(10, 30)
    clock = rng.choice(["logical", "global"])
    resolution = rng.choice([1_000_000.0, 1000.0, 1.0]) if clock == "global" else None
    latency = rng.choice(["uniform-5", "uniform-50", "uniform-200", "planetlab"])
    loss = rng.choice([0.0, 0.0, rng.uniform(0.0, 0.1), rng.uniform(0.0, 0.3)])
    until = rng.uniform(1.0, 4.0)
    faults: list[list[Any]] = []
    for kind in rng.sample(["crash", "partition", "join", "burst"], k=rng.randint(0, 3)):
        if kind == "crash":
            for _ in range(rng.randint(1, max(1, n // 4))):
                faults.append(["crash", round(rng.uniform(0.1, until), 4), rng.randrange(n)])
        elif kind == "partition":
            members = list(range(n))
            rng.shuffle(members)
            start = rng.uniform(0.1, until)
            # Half of the cuts shorter than a few rounds, half up to 4 s: an
            # event broadcast on one side is relayed ttl rounds only.
            length = rng.uniform(0.1, 0.5) if rng.random() < 0.5 else rng.uniform(0.5, 4.0)
            side = sorted(members[: rng.randrange(1, n)])
            faults.append(["partition", round(start, 4), round(start + length, 4), side])
        elif kind == "join":
            for _ in range(rng.randint(1, 3)):
                faults.append(["join", round(rng.uniform(0.1, until), 4)])
        else:
            faults.append(
                [
                    "burst",
                    round(rng.uniform(0.1, until), 4),
                    rng.randrange(n),
                    rng.choice([100, 500, 2000]),
                ]
            )
    return {
        "engine": "epto",
        "seed": seed,
        "n": n,
        "clock": clock,
        "resolution": resolution,
        "latency": latency,
        "loss": round(loss, 4),
        "rate": rng.choice([5.0, 20.0, 100.0]),
        "until": round(until, 3),
        "faults": faults,
        "settle_rounds": 200,
    }


# -- running ---------------------------------------------------------------


def _workload(cluster: Cluster, spec: Spec, senders: int) -> None:
    rng = random.Random(f"liveness/load/{spec['engine']}/{spec['seed']}")
    t, count = 0.05, 0
    while t < spec["until"]:
        cluster.broadcast_at(t, rng.randrange(senders), b"m%d" % count)
        count += 1
        t += rng.expovariate(spec["rate"])


def _safety(cluster: Cluster) -> tuple[int, int]:
    """Order and integrity violations over every process that ever ran."""
    report = check(cluster.recorder.sequences, broadcast=cluster.broadcasts)
    return len(report.order_violations), len(report.integrity_violations)


def _count(cluster: Cluster, receivers: list[int], sources: set[int]) -> tuple[int, int]:
    """(expected, delivered): broadcasts of ``sources`` at every receiver."""
    sent = {eid for eid, (src, _) in cluster.broadcasts.items() if src in sources}
    got = sum(len(sent.intersection(cluster.recorder.sequences.get(p, ()))) for p in receivers)
    return len(sent) * len(receivers), got


TIMEOUTS = (
    "heartbeat_interval",
    "suspect_timeout",
    "token_timeout",
    "change_timeout",
    "fetch_timeout",
)
"""The token-ring timeouts a schedule's ``timeouts`` factor scales."""


def _ring_config(spec: Spec) -> TokenRingConfig:
    cfg = TokenRingConfig()
    fields: dict[str, Any] = {}
    if spec["window"] is not None:
        fields["max_unstable_messages"] = spec["window"]
        if spec["window"] > 1:
            fields["log_retention"] = max(spec["window"], 8)
    if spec.get("timeouts", 1.0) != 1.0:
        for name in TIMEOUTS:
            fields[name] = getattr(cfg, name) * spec["timeouts"]
    if spec["optimistic"] is not None:
        from epto.optimistic import OptimisticConfig

        fields["optimistic"] = OptimisticConfig(planner=spec["optimistic"])
    if fields:
        import attrs

        cfg = attrs.evolve(cfg, **fields)
    return cfg


def run_ring(spec: Spec, step: float = 0.25) -> Record:
    """Run one token-ring schedule; its record (see the module docstring)."""
    n = spec["n"]
    cluster = TokenRingCluster(
        n,
        _ring_config(spec),
        seed=spec["seed"],
        delay=(spec["delay"][0], spec["delay"][1]),
        loss=spec["loss"],
        break_duration=spec["break_duration"],
    )
    _workload(cluster, spec, n)
    until = spec["until"]
    for fault in spec["faults"]:
        kind, at = fault[0], fault[1]
        if kind == "crash":
            cluster.at(at, partial(cluster.crash, fault[2]))
        elif kind == "crash-holder":

            def crash_holder() -> None:
                for p, proc in cluster.procs.items():
                    if proc.holds_token() and p not in cluster.crashed:
                        cluster.crash(p)
                        return
                if cluster.now < until:
                    cluster.at(cluster.now + 0.0005, crash_holder)  # in flight: retry

            cluster.at(at, crash_holder)
        elif kind == "cut":
            cluster.at(at, partial(cluster.disconnect, fault[2]))
            if fault[3] is not None:
                cluster.at(fault[3], partial(cluster.reconnect, fault[2]))
        elif kind == "partition":
            end = fault[2] if fault[2] is not None else 1e9
            cluster.partition(
                [fault[3], [p for p in range(n) if p not in fault[3]]], start=at, end=end
            )
        elif kind == "break":
            cluster.at(at, partial(cluster.break_link, fault[2], fault[3], fault[4]))
        elif kind == "join":
            cluster.at(at, partial(cluster.join, fault[2], fault[3]))
        else:
            raise ValueError(f"unknown fault {kind!r}")

    def calm() -> None:
        cluster.loss = 0.0

    cluster.at(until, calm)
    cluster.run_until(until)
    deadline = until + spec["settle"]

    def staying() -> tuple[list[int], bool]:
        latest = max((proc.config for proc in cluster.procs.values()), key=lambda c: c.instance)
        alive = [p for p in cluster.staying_members() if p in latest.members]
        return [p for p in alive if p < 100], 2 * len(alive) > len(latest.members)

    while True:
        members, quorum = staying()
        expected, delivered = _count(cluster, members, set(members))
        if (members and expected == delivered) or cluster.now >= deadline:
            break
        cluster.run_until(min(deadline, cluster.now + step))
    order, integrity = _safety(cluster)
    return _record(
        spec,
        members=len(members),
        broadcasts=len(cluster.broadcasts),
        expected=expected,
        delivered=delivered,
        quorum=quorum and bool(members),
        settled_at=cluster.now - until,
        order=order,
        integrity=integrity,
        revoked=sum(len(v) for v in cluster.recorder.revoked.values())
        if hasattr(cluster.recorder, "revoked")
        else 0,
    )


def _epto_latency(kind: str) -> Any:
    if kind == "planetlab":
        return PlanetLabLatency(scale=0.001)  # the sample is in milliseconds
    high = int(kind.split("-")[1]) / 1000
    return UniformLatency(0.0005, high)


def _crash(cluster: Cluster, pid: int) -> None:
    if pid in cluster.processes:
        cluster.remove_process(pid)


def run_epto(spec: Spec) -> Record:
    """Run one EpTO schedule; its record (see the module docstring)."""
    n = spec["n"]
    fields: dict[str, Any] = {}
    if spec["resolution"] is not None:
        fields["clock_resolution"] = spec["resolution"]
    config = Config.for_group(n, clock=spec["clock"], loss=spec["loss"], **fields)
    cluster = Cluster(
        n,
        seed=spec["seed"],
        config=config,
        latency=_epto_latency(spec["latency"]),
        loss=spec["loss"],
    )
    _workload(cluster, spec, n)
    for fault in spec["faults"]:
        kind, at = fault[0], fault[1]
        if kind == "crash":
            cluster.call_at(at, partial(_crash, cluster, fault[2]))
        elif kind == "partition":
            end = fault[2] if fault[2] is not None else 1e9
            cluster.partition([fault[3]], start=at, end=end)
        elif kind == "join":
            cluster.call_at(at, cluster.add_process)
        elif kind == "burst":
            for i in range(fault[3]):
                cluster.broadcast_at(at, fault[2], b"b%d" % i)
        else:
            raise ValueError(f"unknown fault {kind!r}")

    def calm() -> None:
        cluster.loss = 0.0

    until = spec["until"]
    cluster.call_at(until, calm)
    cluster.run_until(until)
    limit = cluster.now + spec["settle_rounds"] * config.round_interval
    while True:
        members = [p for p in cluster.processes if p < n]
        expected, delivered = _count(cluster, members, set(members))
        if (expected == delivered and cluster.quiescent()) or cluster.now >= limit:
            break
        cluster.run_rounds(1)
    order, integrity = _safety(cluster)
    refused = 0
    for proc in cluster.processes.values():
        stats = proc.statistics()
        refused += sum(getattr(stats, "rejected", {}).values())
    return _record(
        spec,
        members=len(members),
        broadcasts=len(cluster.broadcasts),
        expected=expected,
        delivered=delivered,
        quorum=bool(members),
        settled_at=cluster.now - until,
        order=order,
        integrity=integrity,
        refused=refused,
        ttl=config.ttl,
        cut_rounds=round(
            max(
                ((f[2] if f[2] is not None else cluster.now) - f[1])
                for f in spec["faults"]
                if f[0] == "partition"
            )
            if any(f[0] == "partition" for f in spec["faults"])
            else 0.0 / config.round_interval,
            1,
        ),
    )


def _record(spec: Spec, **figures: Any) -> Record:
    everything = figures["expected"] == figures["delivered"] and figures["members"] > 0
    status = "ok" if everything else "missing" if figures["quorum"] else "no-quorum"
    return {
        "engine": spec["engine"],
        "seed": spec["seed"],
        "n": spec["n"],
        "band": band(spec["engine"], spec["n"]),
        "status": status,
        "everything": everything,
        "spec": spec,
        **figures,
    }


class WallCap(Exception):
    """A schedule ran past its wall-time cap."""


# An alarm that lands in code that cannot pass an exception on (a garbage
# collector callback, a ``__del__``) has its WallCap reported to
# ``sys.unraisablehook`` and lost: so the alarm fires again shortly after,
# until one lands in the schedule's own code, and the lost ones are dropped.
# Often: with a gc callback installed (hypothesis installs one), a schedule
# that allocates much runs a good share of its time inside it.
_REARM = 0.005


def _alarm(signum: int, frame: FrameType | None) -> None:
    signal.setitimer(signal.ITIMER_REAL, _REARM)
    raise WallCap


def _drop_lost_alarms(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, WallCap):
            previous(unraisable)

    return hook


def run_one(task: tuple[str, int, float, Spec | None]) -> Record:
    """One schedule (drawn from its seed unless ``spec`` is given), under a
    wall-time cap: a schedule past it is recorded as ``skipped``."""
    engine, seed, cap, spec = task
    if spec is None:
        spec = draw_ring(seed) if engine == "token-ring" else draw_epto(seed)
    start = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, _alarm)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _drop_lost_alarms(previous_hook)
    signal.setitimer(signal.ITIMER_REAL, cap)
    try:
        record = run_ring(spec) if engine == "token-ring" else run_epto(spec)
    except WallCap:
        record = _skipped(spec, "skipped")
    except Exception as exc:  # a crash of the engine is a finding, not a stop
        record = _skipped(spec, "error")
        record["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = previous_hook
    record["wall"] = round(time.perf_counter() - start, 3)
    return record


def _skipped(spec: Spec, status: str) -> Record:
    return {
        "engine": spec["engine"],
        "seed": spec["seed"],
        "n": spec["n"],
        "band": band(spec["engine"], spec["n"]),
        "status": status,
        "everything": False,
        "spec": spec,
    }


# -- summary ---------------------------------------------------------------


def summarize(records: list[Record]) -> list[dict[str, Any]]:
    """One row per engine and size band, and one per engine (band "all")."""
    rows = []
    for engine, bands in (("token-ring", RING_BANDS), ("epto", EPTO_BANDS)):
        mine = [r for r in records if r["engine"] == engine]
        if not mine:
            continue
        for name in (*bands, "all"):
            group = [r for r in mine if name in ("all", r["band"])]
            if not group:
                continue
            ran = [r for r in group if r["status"] in ("ok", "missing", "no-quorum")]
            live = [r for r in ran if r["status"] != "no-quorum"]
            ok = sum(1 for r in live if r["everything"])
            expected = sum(r["expected"] for r in live)
            delivered = sum(r["delivered"] for r in live)
            rows.append(
                {
                    "engine": engine,
                    "band": name,
                    "schedules": len(group),
                    "skipped": sum(1 for r in group if r["status"] == "skipped"),
                    "errors": sum(1 for r in group if r["status"] == "error"),
                    "no_quorum": len(ran) - len(live),
                    "everything": ok,
                    "share": round(ok / len(live), 4) if live else None,
                    "expected": expected,
                    "delivered": delivered,
                    "delivered_share": round(delivered / expected, 4) if expected else None,
                    "order_violations": sum(r["order"] for r in ran),
                    "integrity_violations": sum(r["integrity"] for r in ran),
                    "wall": round(sum(r.get("wall", 0.0) for r in group), 1),
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The summary rows as a fixed-width table."""
    lines = [
        "engine      band   sched  skip err noq  everything         delivered / expected"
        "             order integ"
    ]
    for r in rows:
        share = "-" if r["share"] is None else f"{100 * r['share']:.1f}%"
        dshare = "-" if r["delivered_share"] is None else f"{100 * r['delivered_share']:.2f}%"
        counts = f"{r['schedules']:>5} {r['skipped']:>5} {r['errors']:>3} {r['no_quorum']:>3}"
        lines.append(
            f"{r['engine']:<11} {r['band']:<6} {counts}  {r['everything']:>5} {share:>7}"
            f"  {r['delivered']:>10} / {r['expected']:<10} {dshare:>8}"
            f"  {r['order_violations']:>5} {r['integrity_violations']:>5}"
        )
    return "\n".join(lines)


def describe(record: Record) -> str:
    """One line: a schedule that did not deliver everything, and its draw."""
    spec = record["spec"]
    kinds = sorted({f[0] for f in spec["faults"]})
    if spec["engine"] == "token-ring":
        draw = (
            f"window={spec['window']} timeouts x{spec.get('timeouts', 1.0)}"
            f" optimistic={spec['optimistic']} delay<={spec['delay'][1]}"
        )
    else:
        draw = f"clock={spec['clock']} resolution={spec['resolution']} latency={spec['latency']}"
    got = f" {record['delivered']}/{record['expected']}" if "expected" in record else ""
    return (
        f"{record['engine']} seed {record['seed']} n={record['n']} {record['status']}{got}"
        f" loss={spec['loss']} {draw} faults={','.join(kinds) or '-'}"
        + (f" ({record['error']})" if "error" in record else "")
    )


# -- command ---------------------------------------------------------------


def tasks(args: argparse.Namespace) -> Iterator[tuple[str, int, float, Spec | None]]:
    # Interleaved, so that a partial run samples both engines and every size.
    ring = range(args.first, args.first + args.token_ring)
    epto = range(args.first, args.first + args.epto)
    for i in range(max(len(ring), len(epto))):
        if i < len(ring):
            yield ("token-ring", ring[i], args.wall_cap, None)
        if i < len(epto):
            yield ("epto", epto[i], args.wall_cap, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--token-ring", type=int, default=5000, help="token-ring schedules")
    parser.add_argument("--epto", type=int, default=2000, help="EpTO schedules")
    parser.add_argument("--first", type=int, default=0, help="first seed of each engine")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--wall-cap", type=float, default=120.0, help="seconds per schedule")
    parser.add_argument("--out", help="JSON summary and records")
    parser.add_argument("--csv", help="CSV, one row per schedule")
    parser.add_argument("--label", default="", help="a name for the tree run (e.g. before)")
    parser.add_argument("--show", action="store_true", help="print every schedule's record")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="wall seconds after which no new schedule starts (the rest is counted as not run)",
    )
    parser.add_argument(
        "--combine",
        nargs="+",
        metavar="JSON",
        help="sum earlier --out files instead of running (their seeds below the sizes given)",
    )
    args = parser.parse_args(argv)
    records: list[Record] = []
    wall = time.perf_counter()
    if args.combine:
        todo = []
        for name in args.combine:
            with open(name) as f:
                records += json.load(f)["records"]
        # --token-ring and --epto keep the seeds of a run of that size.
        wanted = {"token-ring": args.token_ring, "epto": args.epto}
        records = [r for r in records if args.first <= r["seed"] < args.first + wanted[r["engine"]]]
    else:
        todo = list(tasks(args))

    def done(record: Record) -> None:
        records.append(record)
        if args.show or record["status"] in ("error",):
            print(json.dumps(record, default=str), flush=True)
        if len(records) % 20 == 0 or len(records) == len(todo):
            spent = time.perf_counter() - wall
            ok = sum(1 for r in records if r["everything"])
            eta = spent / len(records) * (len(todo) - len(records))
            print(
                f"[{len(records)}/{len(todo)}] {ok} deliver everything, "
                f"{sum(1 for r in records if r['status'] == 'skipped')} skipped; "
                f"{spent:.0f} s, about {eta:.0f} s to go",
                flush=True,
            )

    def over_budget() -> bool:
        return args.budget is not None and time.perf_counter() - wall > args.budget

    if args.jobs <= 1 or not todo:
        for task in todo:
            if over_budget():
                break
            done(run_one(task))
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            pending: set[Future[Record]] = set()
            queue = iter(todo)
            for task in queue:
                if over_budget():
                    break
                pending.add(pool.submit(run_one, task))
                if len(pending) >= 4 * args.jobs:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        done(future.result())
            for future in pending:
                done(future.result())
    if len(records) < len(todo):
        print(f"budget spent: {len(records)} of {len(todo)} schedules run", flush=True)
    records.sort(key=lambda r: (r["engine"], r["seed"]))
    rows = summarize(records)
    print(table(rows))
    failing = [describe(r) for r in records if not r["everything"]]
    print(f"{len(failing)} schedules do not deliver everything:")
    for line in failing:
        print("  " + line)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "label": args.label,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load": os.getloadavg(),
                    "jobs": args.jobs,
                    "planned": {"token-ring": args.token_ring, "epto": args.epto},
                    "wall": round(time.perf_counter() - wall, 1),
                    "summary": rows,
                    "records": records,
                },
                f,
                default=str,
            )
    if args.csv:
        columns = [
            "engine", "seed", "n", "band", "status", "members", "broadcasts", "expected",
            "delivered", "order", "integrity", "settled_at", "wall",
        ]  # fmt: skip
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(records)
    violations = sum(
        r["order_violations"] + r["integrity_violations"] for r in rows if r["band"] == "all"
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
