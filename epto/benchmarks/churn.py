"""EpTO under churn with a full view or Cyclon as peer sampling (EpTO paper, Figs. 8 and 9).

Runs ``epto simulate``'s experiment (PlanetLab latencies, rounds of 125 ticks
with 1% drift, global clock, 5% broadcast probability per process and round)
once per churn rate and peer sampler, prints one table row per run (holes,
hole rate, delivery delay percentiles, safety verdicts) and optionally plots
the delivery delay CDFs side by side. Runs go to ``--jobs`` worker processes.
"""

from __future__ import annotations

import argparse
import json
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--processes", type=int, default=500)
    p.add_argument("--rounds", type=int, default=30, help="broadcasting rounds (30)")
    p.add_argument(
        "--churn",
        default="0,0.002,0.005,0.01",
        help="comma-separated fractions of the processes replaced per round",
    )
    p.add_argument(
        "--pss", default="cyclon", help="comma-separated samplers: full, cyclon (cyclon)"
    )
    p.add_argument("--view-size", type=int, default=50)
    p.add_argument("--shuffle-length", type=int, default=8)
    p.add_argument("--clock", choices=("global", "logical"), default="global")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel (1)")
    p.add_argument("--plot", type=Path, default=None, help="write the delay CDFs (PNG)")
    p.add_argument("--json", type=Path, default=None, help="write every run's summary")
    p.add_argument(
        "--from",
        dest="inputs",
        type=Path,
        action="append",
        default=[],
        help="print and plot the runs saved by --json instead of running (repeatable)",
    )


def _quantiles(values: list[float]) -> list[float]:
    values = sorted(values)
    k = len(values)
    return [values[min(k - 1, (i * k) // 400)] for i in range(401)] if k else []


def _one(job: dict[str, Any]) -> dict[str, Any]:
    from epto.transports.simulation import (
        SimulationObserver,
        SimulationSpec,
        run_simulation,
    )

    class Members(SimulationObserver):
        """Delays of deliveries of events broadcast after the receiver joined:
        a newcomer also delivers events that were still being relayed when it
        joined, with delays up to TTL rounds that say nothing about EpTO's."""

        def __init__(self) -> None:
            self.joined: dict[int, float] = {}
            self.sent: dict[tuple[int, int], float] = {}
            self.delays: list[float] = []

        def on_join(self, pid: int, now: float) -> None:
            self.joined[pid] = now

        def on_broadcast(self, pid: int, event_id: tuple[int, int], now: float) -> None:
            self.sent[event_id] = now

        def on_delivery(self, pid: int, delivery: Any, now: float) -> None:
            sent = self.sent.get(delivery.event.id)
            if sent is not None and sent >= self.joined[pid]:
                self.delays.append(now - sent)

    members = Members()
    spec = SimulationSpec(**job)
    result = run_simulation(spec, observers=[members])
    summary: dict[str, Any] = result.summary()
    summary["hole_rate"] = result.holes / max(1, result.holes + result.deliveries)
    # A CDF needs the delays; 400 quantiles keep the file small.
    summary["delay_quantiles"] = _quantiles(list(result.delays))
    summary["member_delay_quantiles"] = _quantiles(members.delays)
    return summary


def _row(s: dict[str, Any]) -> str:
    p, d = s["parameters"], s["delay"]
    m = s.get("member_delay_quantiles") or [math.nan] * 401
    return (
        f"| {p['pss']} | {p['churn'] / s['processes']:.1%} ({p['churn']:g}/round) "
        f"| {s['processes_total']} | {p['fanout']} | {p['ttl']} | {s['events']} "
        f"| {s['holes']} at {s['processes_with_holes']} | {s['hole_rate']:.2e} "
        f"| {d['p50']:.0f} | {d['p95']:.0f} | {d['p99']:.0f} | {d['max']:.0f} "
        f"| {m[200]:.0f} | {m[380]:.0f} | {m[396]:.0f} | {m[400]:.0f} "
        f"| {s['network']['to_departed'] / max(1, s['network']['sent']):.1%} "
        f"| {s['order_violations']} / {s['integrity_violations']} |"
    )


HEADER = (
    "| PSS | churn | processes (total) | K | TTL | events | holes (at processes) | hole rate "
    "| delay p50 | p95 | p99 | max | after-join delay p50 | p95 | p99 | max "
    "| balls to departed | order / integrity violations |\n"
    "|" + " --- |" * 18
)


def run(args: argparse.Namespace) -> int:
    rates = [float(x) for x in args.churn.split(",") if x.strip()]
    samplers = [x.strip() for x in args.pss.split(",") if x.strip()]
    jobs = [
        {
            "processes": args.processes,
            "rounds": args.rounds,
            "clock": args.clock,
            "churn": rate * args.processes,
            "pss": pss,
            "view_size": args.view_size,
            "shuffle_length": args.shuffle_length,
            "seed": args.seed,
        }
        for pss in samplers
        for rate in rates
    ]
    print(HEADER, flush=True)
    summaries: list[dict[str, Any]] = []
    if args.inputs:
        for path in args.inputs:
            for summary in json.loads(path.read_text()):
                print(_row(summary), flush=True)
                summaries.append(summary)
    else:
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for summary in pool.map(_one, jobs):
                print(_row(summary), flush=True)
                summaries.append(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(summaries, indent=1) + "\n")
    if args.plot is not None:
        _plot(summaries, args.plot)
    bad = any(s["order_violations"] or s["integrity_violations"] for s in summaries)
    return 1 if bad else 0


def _plot(summaries: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for s in summaries:
        p = s["parameters"]
        label = f"{p['pss']}, churn {p['churn'] / s['processes']:.1%}"
        q = s["delay_quantiles"]
        if q:
            (line,) = ax.plot(q, [i / (len(q) - 1) for i in range(len(q))], label=label)
            m = s.get("member_delay_quantiles")
            if m and p["churn"]:
                ys = [i / (len(m) - 1) for i in range(len(m))]
                ax.plot(m, ys, color=line.get_color(), linestyle=":", linewidth=1.2)
    first = summaries[0]
    ax.set_title(
        f"EpTO delivery delay under churn: n={first['processes']}, "
        f"{first['parameters']['clock']} clock, 5% broadcast",
        fontsize=9,
    )
    ax.set_xlabel("delivery delay (ticks); dotted: events broadcast after the receiver joined")
    ax.set_ylabel("fraction of deliveries")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
