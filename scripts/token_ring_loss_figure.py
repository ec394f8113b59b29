"""Both engines under loss on wide-area links: the figure of docs/token-ring.md.

    .venv/bin/python scripts/token_ring_loss_figure.py
    .venv/bin/python scripts/token_ring_loss_figure.py --seeds 0:8 --jobs 2

``epto simulate``'s setting (PlanetLab latencies, 5 processes, 0.2
broadcasts per process and round of 125 ticks, 60 broadcasting rounds, then
the engine's settle time), at loss 0, 1, 5, 10 and 20%, for the token ring
and for EpTO. For the token ring a send breaks its link with probability
``loss`` for one round trip of it, losing what is in flight both ways and
what is sent meanwhile (what TCP shows of loss); for EpTO each ball copy is
dropped with probability ``loss``. Each point pools the runs of every seed:
the fraction of (event, staying process) deliveries made against those
wanted, the share of runs that delivered every event, and the p50 / p99
delivery delay in ticks (milliseconds). Writes
docs/img/token-ring-loss.png and prints the table of the doc. Virtual time:
the figures depend on the seeds only.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from epto.transports.simulation import SimulationSpec, run_simulation

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
LOSSES = (0.0, 0.01, 0.05, 0.10, 0.20)
MODES = ("token-ring", "epto")
PROCESSES = 5
RATE = 0.2

Run = tuple[str, float, int, int, int, bool, list[float]]


def run(mode: str, loss: float, seed: int) -> Run:
    """(mode, loss, seed, deliveries made, deliveries wanted, every event
    delivered, delays) of one run."""
    spec = SimulationSpec(
        mode=mode,  # type: ignore[arg-type]
        processes=PROCESSES,
        broadcast_rate=RATE,
        seed=seed,
        loss=loss,
    )
    result = run_simulation(spec)
    # No churn: every process stays, and wants every event once.
    wanted = result.events * result.processes_at_end
    made = min(result.deliveries, wanted)
    return mode, loss, seed, made, wanted, made == wanted, list(result.delays)


def _run(args: tuple[str, float, int]) -> Run:
    return run(*args)


def quantile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:8", help="first:last (exclusive), default 0:8")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--loss",
        type=float,
        action="append",
        help="only this loss rate (repeatable; implies --no-plot), e.g. --loss 0.05",
    )
    parser.add_argument(
        "--mode", choices=MODES, action="append", help="only this engine (implies --no-plot)"
    )
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split(":"))
    seeds = range(first, last)
    losses = tuple(args.loss) if args.loss else LOSSES
    modes = tuple(args.mode) if args.mode else MODES
    partial = losses != LOSSES or modes != MODES
    todo = [(mode, loss, seed) for mode in modes for loss in losses for seed in seeds]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        runs = list(pool.map(_run, todo))
    rows: dict[tuple[str, float], tuple[float, int, float, float]] = {}
    print(f"{len(seeds)} seeds per point ({args.seeds}); delays in ticks (ms)")
    print("| loss | engine | delivered | runs delivering all | p50 | p99 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for loss in losses:
        for mode in modes:
            mine = [r for r in runs if r[0] == mode and r[1] == loss]
            made = sum(r[3] for r in mine)
            wanted = sum(r[4] for r in mine)
            delays = [d for r in mine for d in r[6]]
            full = sum(1 for r in mine if r[5])
            p50, p99 = quantile(delays, 0.5), quantile(delays, 0.99)
            rows[(mode, loss)] = (made / wanted if wanted else 1.0, full, p50, p99)
            print(
                f"| {loss * 100:.0f}% | {mode} | {made / wanted if wanted else 1.0:.4f} "
                f"| {full}/{len(mine)} | {p50:.0f} | {p99:.0f} |"
            )
    if args.no_plot or partial:
        return
    OUT.mkdir(parents=True, exist_ok=True)
    fig, (lat_ax, frac_ax) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [loss * 100 for loss in LOSSES]
    for mode, colour in (("token-ring", "tab:blue"), ("epto", "tab:orange")):
        lat_ax.plot(
            xs, [rows[(mode, x)][2] for x in LOSSES], marker="o", color=colour, label=f"{mode}: p50"
        )
        lat_ax.plot(
            xs,
            [rows[(mode, x)][3] for x in LOSSES],
            marker="^",
            ls="--",
            color=colour,
            label=f"{mode}: p99",
        )
        frac_ax.plot(xs, [rows[(mode, x)][0] for x in LOSSES], marker="o", color=colour, label=mode)
    lat_ax.set_yscale("log")
    lat_ax.set_xlabel("loss (% of sends: a link break for the token ring)")
    lat_ax.set_ylabel("delivery delay (ms)")
    lat_ax.grid(alpha=0.3)
    lat_ax.legend(fontsize=8)
    frac_ax.set_xlabel("loss (%)")
    frac_ax.set_ylabel("deliveries made / wanted, after the settle time")
    frac_ax.set_ylim(0, 1.05)
    frac_ax.grid(alpha=0.3)
    frac_ax.legend()
    fig.suptitle(
        f"{PROCESSES} processes on PlanetLab latencies, {RATE} broadcasts per process "
        f"and round, {len(seeds)} seeds"
    )
    fig.tight_layout()
    fig.savefig(OUT / "token-ring-loss.png", dpi=120)


if __name__ == "__main__":
    main()
