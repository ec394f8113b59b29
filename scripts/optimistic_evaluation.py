"""The evaluation of seed 001 (optimistic delivery, §5 of the paper) re-run
with the planners of :mod:`epto.optimistic`.

    python scripts/optimistic_evaluation.py                  # 20 topologies, about 30 s
    python scripts/optimistic_evaluation.py --topologies 5 --out /tmp/opt

Topologies (a BRITE-like router model, as in notes-seed-001 §1.6): N nodes
placed uniformly at random on a square plane of side ``size``; incremental
growth, each new node linked to ``m = 2`` existing nodes drawn with Waxman
probability ``alpha * exp(-d / (beta * L))`` (alpha 0.15, beta 0.2, L the
plane's diagonal); the one-way latency ``W[r][s]`` is the shortest-path
Euclidean length (symmetric, a metric). SETO is its steady state
(:func:`epto.optimistic.seto_steady_state`), the adaptive rule converged.

Experiments:

* §5.1: 30 nodes, plane side 1000..5000, ``--topologies`` per size; rates
  equal, uniform U(0, 100), and normal N(300, sd 300) clipped at 0; SETO with a
  random sequencer (as the paper), with the best one, and averaged over all.
* §5.2: 30 nodes, plane 1000, rates N(300, sd) clipped at 0, sd 0..100% of
  the mean; min / mean / max excess over the topologies.
* §5.3: 10 nodes, plane 1000, rates U(0, 100); SETO with the sequencer at each
  position (1 = the node with the smallest summed latency to the others,
  10 = the largest), the same topologies and rates for every position.

"Excess" is ``OAL / OAL_optimum - 1`` per topology (OAL: the rate-weighted
overall average latency, the paper's eq. 3), averaged over topologies. Prints
markdown tables and writes PNG plots to ``--out`` (default docs/optimistic-figures).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from epto.optimistic import fast_seto, optimal, seto_steady_state

OUT = Path(__file__).resolve().parents[1] / "docs" / "optimistic-figures"
SIZES = (1000, 2000, 3000, 4000, 5000)
SWEEP = tuple(range(0, 101, 10))
NODES = 30
POSITION_NODES = 10
WAXMAN_ALPHA = 0.15
WAXMAN_BETA = 0.2
LINKS = 2
PAPER = {"fast": "16% to 33%", "seto": "66% to 114%"}

Rates = list[float] | None
RateModel = Callable[[random.Random, int], Rates]


def waxman(n: int, size: float, rng: random.Random) -> list[list[float]]:
    """Shortest-path Euclidean latencies of a BRITE-like Waxman topology."""
    points = [(rng.uniform(0, size), rng.uniform(0, size)) for _ in range(n)]
    diagonal = math.sqrt(2) * size

    def dist(u: int, v: int) -> float:
        return math.dist(points[u], points[v])

    w = [[0.0 if r == s else math.inf for s in range(n)] for r in range(n)]
    for new in range(1, n):
        candidates = list(range(new))
        for _ in range(min(LINKS, new)):
            weights = [
                WAXMAN_ALPHA * math.exp(-dist(new, v) / (WAXMAN_BETA * diagonal))
                for v in candidates
            ]
            v = rng.choices(candidates, weights)[0]
            candidates.remove(v)
            w[new][v] = w[v][new] = dist(new, v)
    for k in range(n):  # Floyd-Warshall
        wk = w[k]
        for r in range(n):
            via = w[r][k]
            if via == math.inf:
                continue
            wr = w[r]
            for s in range(n):
                if via + wk[s] < wr[s]:
                    wr[s] = via + wk[s]
    return w


def equal_rates(rng: random.Random, n: int) -> Rates:
    return None


def uniform_rates(rng: random.Random, n: int) -> Rates:
    return [rng.uniform(0, 100) for _ in range(n)]


def normal_rates(sd_percent: float) -> RateModel:
    def draw(rng: random.Random, n: int) -> Rates:
        return [max(0.0, rng.gauss(300, 3 * sd_percent)) for _ in range(n)]

    return draw


def evaluate(w: list[list[float]], rates: Rates, rng: random.Random) -> dict[str, float]:
    """Excess of Fast SETO and SETO over the optimum on one topology."""
    best = optimal(w, rates).average
    seto = [seto_steady_state(w, s, rates).average for s in range(len(w))]
    return {
        "optimal": best,
        "fast": fast_seto(w, rates).average / best - 1,
        "seto_random": seto[rng.randrange(len(w))] / best - 1,
        "seto_best": min(seto) / best - 1,
        "seto_mean": statistics.fmean(seto) / best - 1,
    }


def pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


def plane_sizes(topologies: int, seed: int) -> dict[str, dict[int, list[dict[str, float]]]]:
    models: dict[str, RateModel] = {
        "equal": equal_rates,
        "U(0,100)": uniform_rates,
        "N(300,sd 100%)": normal_rates(100),
    }
    out: dict[str, dict[int, list[dict[str, float]]]] = {name: {} for name in models}
    for size in SIZES:
        for t in range(topologies):
            rng = random.Random(f"{seed}-plane-{size}-{t}")
            w = waxman(NODES, size, rng)
            for name, model in models.items():
                out[name].setdefault(size, []).append(evaluate(w, model(rng, NODES), rng))
    return out


def rate_sweep(topologies: int, seed: int) -> dict[int, list[dict[str, float]]]:
    out: dict[int, list[dict[str, float]]] = {}
    for t in range(topologies):
        rng = random.Random(f"{seed}-sweep-{t}")
        w = waxman(NODES, 1000, rng)
        for sd in SWEEP:
            out.setdefault(sd, []).append(evaluate(w, normal_rates(sd)(rng, NODES), rng))
    return out


def positions(topologies: int, seed: int) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {"optimal": [], "fast": [], "seto": []}
    for t in range(topologies):
        rng = random.Random(f"{seed}-position-{t}")
        w = waxman(POSITION_NODES, 1000, rng)
        rates = uniform_rates(rng, POSITION_NODES)
        ranked = sorted(range(POSITION_NODES), key=lambda i: (math.fsum(w[i]), i))
        out["optimal"].append([optimal(w, rates).average] * POSITION_NODES)
        out["fast"].append([fast_seto(w, rates).average] * POSITION_NODES)
        out["seto"].append([seto_steady_state(w, s, rates).average for s in ranked])
    return out


def column(rows: Sequence[dict[str, float]], key: str) -> list[float]:
    return [row[key] for row in rows]


def report(
    planes: dict[str, dict[int, list[dict[str, float]]]],
    sweep: dict[int, list[dict[str, float]]],
    place: dict[str, list[list[float]]],
    topologies: int,
) -> str:
    lines = [
        f"### §5.1: excess over the optimum by plane size ({NODES} nodes, "
        f"{topologies} topologies per size)",
        "",
        "| rates | plane | Fast SETO | SETO (random seq.) | SETO (best seq.) "
        "| SETO (mean over seq.) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, by_size in planes.items():
        for size, rows in by_size.items():
            keys = ("fast", "seto_random", "seto_best", "seto_mean")
            cells = [pct(statistics.fmean(column(rows, key))) for key in keys]
            lines.append(f"| {name} | {size} | " + " | ".join(cells) + " |")
    lines += ["", "Ranges over plane sizes (mean per size):", ""]
    lines += ["| rates | Fast SETO | SETO (random seq.) | paper Fast SETO | paper SETO |"]
    lines += ["| --- | --- | --- | --- | --- |"]
    for name, by_size in planes.items():
        spans = []
        for key in ("fast", "seto_random"):
            means = [statistics.fmean(column(rows, key)) for rows in by_size.values()]
            spans.append(f"{pct(min(means))} to {pct(max(means))}")
        lines.append(f"| {name} | {spans[0]} | {spans[1]} | {PAPER['fast']} | {PAPER['seto']} |")
    lines += [
        "",
        f"### §5.2: rates N(300, sd), {NODES} nodes, {topologies} topologies: "
        "excess min / mean / max",
        "",
        "| sd (% of mean) | Fast SETO | SETO (random seq.) |",
        "| --- | --- | --- |",
    ]
    for sd, rows in sweep.items():
        cells = []
        for key in ("fast", "seto_random"):
            values = column(rows, key)
            cells.append(
                f"{pct(min(values))} / {pct(statistics.fmean(values))} / {pct(max(values))}"
            )
        lines.append(f"| {sd} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"### §5.3: sequencer position, {POSITION_NODES} nodes, rates U(0,100), plane 1000, "
        f"{topologies} topologies: mean OAL",
        "",
        "| position (1 = most central) | optimum | Fast SETO | SETO |",
        "| --- | --- | --- | --- |",
    ]
    for k in range(POSITION_NODES):
        means = [statistics.fmean(row[k] for row in place[key]) for key in place]
        lines.append(f"| {k + 1} | " + " | ".join(f"{c:.0f}" for c in means) + " |")
    return "\n".join(lines) + "\n"


def plot(
    planes: dict[str, dict[int, list[dict[str, float]]]],
    sweep: dict[int, list[dict[str, float]]],
    place: dict[str, list[list[float]]],
    out: Path,
) -> list[Path]:
    paths = []
    fig, axes = plt.subplots(1, len(planes), figsize=(13, 4), sharey=True)
    for ax, (name, by_size) in zip(axes, planes.items(), strict=True):
        for key, label in (
            ("fast", "Fast SETO"),
            ("seto_random", "SETO, random sequencer"),
            ("seto_best", "SETO, best sequencer"),
        ):
            ax.plot(
                list(by_size),
                [100 * statistics.fmean(column(rows, key)) for rows in by_size.values()],
                marker="o",
                label=label,
            )
        ax.set_title(f"rates {name}")
        ax.set_xlabel("plane side")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("excess over the optimum (%)")
    axes[0].legend()
    fig.suptitle(f"Excess OAL over the LP optimum, {NODES}-node Waxman topologies (§5.1)")
    fig.tight_layout()
    paths.append(out / "plane-size.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    sds = list(sweep)
    for key, label in (("fast", "Fast SETO"), ("seto_random", "SETO, random sequencer")):
        mean = [100 * statistics.fmean(column(sweep[sd], key)) for sd in sds]
        low = [100 * min(column(sweep[sd], key)) for sd in sds]
        high = [100 * max(column(sweep[sd], key)) for sd in sds]
        line = ax.plot(sds, mean, marker="o", label=f"{label} (mean; band min-max)")
        ax.fill_between(sds, low, high, alpha=0.15, color=line[0].get_color())
    ax.set_xlabel("rate standard deviation (% of the mean 300 msg/s)")
    ax.set_ylabel("excess over the optimum (%)")
    ax.set_title(f"Rate heterogeneity (§5.2), {NODES} nodes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "rate-sweep.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = list(range(1, POSITION_NODES + 1))
    for key, label in (("optimal", "optimum"), ("fast", "Fast SETO"), ("seto", "SETO")):
        ax.plot(
            xs,
            [statistics.fmean(row[k] for row in place[key]) for k in range(POSITION_NODES)],
            marker="o",
            label=label,
        )
    ax.set_xlabel("sequencer position (1 = smallest summed latency)")
    ax.set_ylabel("overall average latency (plane units)")
    ax.set_title(f"Sequencer position (§5.3), {POSITION_NODES} nodes, rates U(0,100)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "sequencer-position.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topologies", type=int, default=20, help="topologies per setting")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random draw")
    parser.add_argument("--out", type=Path, default=OUT, help="directory for the PNG plots")
    args = parser.parse_args(argv)
    if args.topologies < 1:
        parser.error("--topologies must be at least 1")
    started = time.perf_counter()
    planes = plane_sizes(args.topologies, args.seed)
    sweep = rate_sweep(args.topologies, args.seed)
    place = positions(args.topologies, args.seed)
    text = report(planes, sweep, place, args.topologies)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = plot(planes, sweep, place, args.out)
    print(text)
    for path in paths:
        print(f"wrote {path}")
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
