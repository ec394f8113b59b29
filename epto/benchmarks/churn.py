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


def _one(job: dict[str, Any]) -> dict[str, Any]:
    # mypy does not follow the package-dir mapping of epto.transports.
    from epto.transports.virtual import (  # type: ignore[import-not-found]
        SimulationSpec,
        run_simulation,
    )

    spec = SimulationSpec(**job)
    result = run_simulation(spec)
    summary: dict[str, Any] = result.summary()
    summary["hole_rate"] = result.holes / max(1, result.holes + result.deliveries)
    # A CDF needs the delays; 400 quantiles keep the file small.
    delays = result.delays
    k = len(delays)
    quantiles = [delays[min(k - 1, (i * k) // 400)] for i in range(401)] if k else []
    summary["delay_quantiles"] = quantiles
    return summary


def _row(s: dict[str, Any]) -> str:
    p, d = s["parameters"], s["delay"]
    return (
        f"| {p['pss']} | {p['churn'] / s['processes']:.1%} ({p['churn']:g}/round) "
        f"| {s['processes_total']} | {p['fanout']} | {p['ttl']} | {s['events']} "
        f"| {s['holes']} at {s['processes_with_holes']} | {s['hole_rate']:.2e} "
        f"| {d['p50']:.0f} | {d['p95']:.0f} | {d['p99']:.0f} | {d['max']:.0f} "
        f"| {s['order_violations']} / {s['integrity_violations']} |"
    )


HEADER = (
    "| PSS | churn | processes (total) | K | TTL | events | holes (at processes) | hole rate "
    "| delay p50 | p95 | p99 | max | order / integrity violations |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
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
    summaries = []
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
        q = s["delay_quantiles"]
        if not q:
            continue
        p = s["parameters"]
        label = f"{p['pss']}, churn {p['churn'] / s['processes']:.1%}"
        ax.plot(q, [i / (len(q) - 1) for i in range(len(q))], label=label)
    first = summaries[0]
    ax.set_title(
        f"EpTO delivery delay under churn: n={first['processes']}, "
        f"{first['parameters']['clock']} clock, 5% broadcast",
        fontsize=9,
    )
    ax.set_xlabel("delivery delay (ticks)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
