"""The evaluation of seed 003 (sequencing atoms) on generated memberships.

    python scripts/atoms_evaluation.py                # 30 runs, about 15 minutes on 2 cores
    python scripts/atoms_evaluation.py --runs 5 --sweep-runs 2 --out /tmp/atoms

Conditions (docs/atoms.md, "Evaluation"): 128 nodes; 8, 16, 32 and 64 groups
whose sizes follow a truncated Zipf(1) law on 2..128 (P(s) proportional to
1/s), members drawn uniformly at random without replacement. Two topologies:

* ``planetlab``: each run maps the 128 nodes onto 128 distinct nodes of the
  PlanetLab sample (``epto/data/planetlab-226.u16.gz``, one-way latencies,
  loaded by :class:`epto.transports.simulation.PlanetLabLatency`; pairs the
  sample lacks get its fixed fill-in);
* ``transit-stub``: each run draws a topology of 10,000 routers in the
  manner of GT-ITM, hosts in clusters of 8
  (:class:`epto.transports.simulation.TransitStubLatency`).

Each run builds three graphs of the same groups: placed for latency
(``SequencingGraph.build(groups, latency)``, machines on any node), placed
for latency on members only (``member_hosts=True``), and latency-blind
(``SequencingGraph.build(groups)``, groups added one by one); each is checked
with ``check()``.

Latency stretch: every member of every group sends one message to its group.
Through the sequencers it travels sender -> ingress host -> the host of each
next atom of the route whose host differs from the previous one -> receiver
(propagation only; co-located atoms cost nothing); directly it travels
sender -> receiver. Per destination, the **ratio of means** (its total
latency through the sequencers over its total direct latency: the paper's
statistic, the headline) and the **mean of ratios** (the mean of through /
direct over its messages); the figures are the mean and the maximum over
destinations, and the CDF over destinations of all runs.

The occupancy sweep: 32 groups, every node in every group with probability p
(empty groups left out), PlanetLab.

Prints the tables and writes PNG plots to ``--out`` (default docs/atoms-figures).
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from epto.transports.simulation import PlanetLabLatency, TransitStubLatency

from epto.atoms import SequencingGraph, zipf_memberships

NODES = 128
PLANETLAB_NODES = 226
GROUP_COUNTS = (8, 16, 32, 64)
TOPOLOGIES = ("planetlab", "transit-stub")
PLACEMENTS = ("latency", "members", "blind")
OCCUPANCY = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 0.9, 0.97, 1.0)
PAPER = {8: "never above 2.5", 64: "at most about 5"}
"""Seed 003, Figure 2 (128 subscribers): the stretch over destinations."""
OUT = Path(__file__).resolve().parents[1] / "docs" / "atoms-figures"

Result = dict[str, Any]


@lru_cache(maxsize=1)
def planetlab() -> np.ndarray:
    """The 226 x 226 one-way latency matrix (ms), diagonal 0."""
    model = PlanetLabLatency(per_link=True)
    rng = random.Random(0)  # unused by the per-link model
    n = PLANETLAB_NODES
    full = np.array([[model.sample(i, j, rng) for j in range(n)] for i in range(n)])
    np.fill_diagonal(full, 0.0)
    return full


def latencies(topology: str, rng: random.Random) -> np.ndarray:
    """The run's 128 x 128 one-way latencies (ms), ``[src, dst]``."""
    if topology == "planetlab":
        mapping = rng.sample(range(PLANETLAB_NODES), NODES)
        return planetlab()[np.ix_(mapping, mapping)]
    return np.array(TransitStubLatency(NODES, seed=rng.randrange(2**31)).matrix())


def bernoulli_groups(count: int, p: float, rng: random.Random) -> dict[int, frozenset[int]]:
    drawn = {g: frozenset(n for n in range(NODES) if rng.random() < p) for g in range(count)}
    return {g: members for g, members in drawn.items() if members}


def host_path(graph: SequencingGraph, group: int) -> list[int]:
    """Ingress host, then each next distinct host along the route."""
    hops = [graph.ingress(group)]
    for aid in graph.route(group):
        host = graph.atoms[aid].host
        if host != hops[-1]:
            hops.append(host)
    return hops


def describe(graph: SequencingGraph) -> Result:
    groups = graph.groups
    pairs = sum(1 for a in groups for b in groups if a < b and len(groups[a] & groups[b]) >= 2)
    routes = [len(graph.route(g)) for g in groups]
    crossed = [len(host_path(graph, g)) - 1 for g in groups if graph.route(g)]
    stamps = [len(graph.stamping(g)) for g in groups]
    return {
        "pairs": pairs,
        "atoms": len(graph.atoms),
        "nodes": len({a.host for a in graph.atoms.values()}),
        "route_mean": statistics.mean(routes) if routes else 0.0,
        "route_max": max(routes, default=0),
        "crossed_mean": statistics.mean(crossed) if crossed else 0.0,
        "stamp_mean": statistics.mean(stamps) if stamps else 0.0,
        "stamp_max": max(stamps, default=0),
    }


def stretch(graph: SequencingGraph, latency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per destination (nodes that receive something): the ratio of means and
    the mean of ratios."""
    through_sum = np.zeros(NODES)
    direct_sum = np.zeros(NODES)
    ratio_sum = np.zeros(NODES)
    count = np.zeros(NODES)
    for g, members in graph.groups.items():
        if len(members) < 2:
            continue
        m = np.array(sorted(members))
        hops = host_path(graph, g)
        inner = sum(latency[u, v] for u, v in itertools.pairwise(hops))
        through = latency[m, hops[0]][:, None] + inner + latency[hops[-1], m][None, :]
        direct = latency[np.ix_(m, m)]
        off = ~np.eye(len(m), dtype=bool)
        through_sum[m] += np.where(off, through, 0.0).sum(axis=0)
        direct_sum[m] += np.where(off, direct, 0.0).sum(axis=0)
        ratio_sum[m] += np.where(off, through / np.where(off, direct, 1.0), 0.0).sum(axis=0)
        count[m] += len(m) - 1
    seen = count > 0
    return through_sum[seen] / direct_sum[seen], ratio_sum[seen] / count[seen]


def build(groups: dict[int, frozenset[int]], placement: str, latency: np.ndarray) -> Result:
    started = time.perf_counter()
    if placement == "blind":
        graph = SequencingGraph()
        rebuilds = sum(graph.add_group(g, groups[g]).rebuilt for g in sorted(groups))
    else:
        graph = SequencingGraph.build(groups, latency.tolist(), member_hosts=placement == "members")
        rebuilds = 1
    built = time.perf_counter() - started
    problems = graph.check()
    if problems:
        raise AssertionError(f"{placement}: {problems[:3]}")
    of_means, of_ratios = stretch(graph, latency)
    result = describe(graph)
    result.update(
        rebuilds=rebuilds,
        build_s=built,
        stretch=of_means.tolist(),
        rom_mean=float(of_means.mean()),
        rom_max=float(of_means.max()),
        mor_mean=float(of_ratios.mean()),
        mor_max=float(of_ratios.max()),
    )
    return result


def zipf_run(task: tuple[int, str, int, int]) -> Result:
    seed, topology, count, run = task
    rng = random.Random(f"atoms-zipf:{seed}:{count}:{run}")
    groups = zipf_memberships(NODES, count, rng)
    latency = latencies(topology, rng)
    result: Result = {"groups": count, "topology": topology}
    for placement in PLACEMENTS:
        result[placement] = build(groups, placement, latency)
    return result


def occupancy_run(task: tuple[int, float, int]) -> Result:
    seed, p, run = task
    rng = random.Random(f"atoms-occupancy:{seed}:{p}:{run}")
    groups = bernoulli_groups(32, p, rng)
    latency = latencies("planetlab", rng)
    blind = describe(SequencingGraph.build(groups))
    placed = describe(SequencingGraph.build(groups, latency.tolist()))
    return {"p": p, "atoms": blind["atoms"], "blind": blind["nodes"], "machines": placed["nodes"]}


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q))


def summarise(results: list[Result], topology: str, counts: Sequence[int]) -> list[Result]:
    rows = []
    for k in counts:
        mine = [r for r in results if r["groups"] == k and r["topology"] == topology]
        row: Result = {"groups": k}
        for placement in PLACEMENTS:
            runs = [r[placement] for r in mine]
            part: Result = {}
            for key in ("pairs", "atoms", "nodes", "route_mean", "crossed_mean", "stamp_mean"):
                values = [r[key] for r in runs]
                part[key] = statistics.mean(values)
                part[key + "_p10"] = pct(values, 10)
                part[key + "_p90"] = pct(values, 90)
            for key in ("rom_mean", "mor_mean"):
                values = [r[key] for r in runs]
                part[key] = statistics.mean(values)
                part[key + "_p10"] = pct(values, 10)
                part[key + "_p90"] = pct(values, 90)
            for key in ("route_max", "stamp_max", "rom_max", "mor_max"):
                part[key] = statistics.mean(r[key] for r in runs)
                part[key + "_top"] = max(r[key] for r in runs)
            part["rebuilds"] = statistics.mean(r["rebuilds"] for r in runs)
            part["build_s"] = statistics.mean(r["build_s"] for r in runs)
            row[placement] = part
        rows.append(row)
    return rows


def print_tables(rows: list[Result], topology: str) -> None:
    print(f"\n{topology}: placed for latency (machines on any node)")
    print(
        "groups | atoms (p10-p90) | machines | machines crossed per route | route atoms |"
        " stretch, ratio of means: mean (p10-p90), max (worst) |"
        " mean of ratios: mean, max | paper | build s"
    )
    for row in rows:
        r = row["latency"]
        print(
            f"{row['groups']} | {r['atoms']:.1f} ({r['atoms_p10']:.0f}-{r['atoms_p90']:.0f}) | "
            f"{r['nodes']:.1f} | {r['crossed_mean']:.1f} | {r['route_mean']:.1f} | "
            f"{r['rom_mean']:.2f} ({r['rom_mean_p10']:.2f}-{r['rom_mean_p90']:.2f}), "
            f"{r['rom_max']:.2f} ({r['rom_max_top']:.2f}) | "
            f"{r['mor_mean']:.2f}, {r['mor_max']:.2f} | {PAPER.get(row['groups'], '-')} | "
            f"{r['build_s']:.2f}"
        )
    print(f"\n{topology}: what each placement buys (mean over runs)")
    print(
        "groups | latency-blind: machines, crossed, ratio of means (mean of ratios) |"
        " for latency, members only: same | for latency, any node: same"
    )
    for row in rows:
        cells = [
            f"{row[p]['nodes']:.1f}, {row[p]['crossed_mean']:.1f}, "
            f"{row[p]['rom_mean']:.2f} ({row[p]['mor_mean']:.2f})"
            for p in ("blind", "members", "latency")
        ]
        print(f"{row['groups']} | " + " | ".join(cells))


def plot_stretch(results: list[Result], counts: Sequence[int], out: Path) -> None:
    fig, axes = plt.subplots(1, len(TOPOLOGIES), figsize=(11, 4), sharey=True)
    for ax, topology in zip(axes, TOPOLOGIES, strict=True):
        for k in counts:
            values = np.sort(
                np.concatenate(
                    [
                        r["latency"]["stretch"]
                        for r in results
                        if r["groups"] == k and r["topology"] == topology
                    ]
                )
            )
            ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=f"{k} groups")
        ax.set_xlabel("latency stretch (ratio of means per destination)")
        ax.set_title(f"{topology}, 128 nodes")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_ylabel("fraction of destinations")
    fig.tight_layout()
    fig.savefig(out / "stretch-cdf.png", dpi=120)
    plt.close(fig)


def plot_counts(rows: list[Result], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ks = [r["groups"] for r in rows]
    for placement, key, label in (
        ("latency", "atoms", "atoms"),
        ("latency", "nodes", "sequencing machines (placed for latency)"),
        ("blind", "nodes", "sequencing nodes (latency-blind)"),
        ("latency", "pairs", "double-overlap pairs"),
    ):
        mid = [r[placement][key] for r in rows]
        err = [
            [m - r[placement][key + "_p10"] for m, r in zip(mid, rows, strict=True)],
            [r[placement][key + "_p90"] - m for m, r in zip(mid, rows, strict=True)],
        ]
        ax.errorbar(ks, mid, yerr=err, marker="o", capsize=3, label=label)
    reference = {8: 14.4, 16: 57.2, 32: 226, 64: 890}
    ax.plot(list(reference), list(reference.values()), "kx", label="notes: atoms (reference)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("groups")
    ax.set_ylabel("count (mean, p10-p90 bars)")
    ax.set_title("Atoms and sequencing machines, 128 nodes, Zipf group sizes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "atoms-vs-groups.png", dpi=120)
    plt.close(fig)


def plot_occupancy(rows: list[Result], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ps = [r["p"] for r in rows]
    for key, label in (
        ("atoms", "atoms"),
        ("machines", "sequencing machines (placed for latency)"),
        ("blind", "sequencing nodes (latency-blind)"),
    ):
        ax.plot(ps, [r[key] for r in rows], marker="o", label=label)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("membership probability p")
    ax.set_ylabel("mean count")
    ax.set_title("Occupancy: 128 nodes, 32 groups")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "occupancy.png", dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per group count and topology")
    parser.add_argument("--seed", type=int, default=1, help="base seed")
    parser.add_argument("--out", type=Path, default=OUT, help="directory for the PNGs")
    parser.add_argument("--groups", type=int, nargs="+", default=list(GROUP_COUNTS))
    parser.add_argument("--sweep-runs", type=int, default=10, help="runs per p (0: no sweep)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tasks = [
        (args.seed, topology, k, run)
        for topology in TOPOLOGIES
        for k in args.groups
        for run in range(args.runs)
    ]
    # Largest first, so that the slow runs do not finish last.
    tasks.sort(key=lambda t: -t[2])
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(zipf_run, tasks))
        sweep_tasks = [(args.seed, p, run) for p in OCCUPANCY for run in range(args.sweep_runs)]
        sweep = list(pool.map(occupancy_run, sweep_tasks))
    print(
        f"{args.runs} runs per group count and topology, 128 nodes, Zipf(1) sizes on 2..128, "
        f"seed {args.seed}"
    )
    every_row = {}
    for topology in TOPOLOGIES:
        rows = summarise(results, topology, args.groups)
        every_row[topology] = rows
        print_tables(rows, topology)
    plot_stretch(results, args.groups, args.out)
    plot_counts(every_row["planetlab"], args.out)
    if sweep:
        occupancy = []
        for p in OCCUPANCY:
            mine = [r for r in sweep if r["p"] == p]
            occupancy.append(
                {
                    key: statistics.mean(r[key] for r in mine)
                    for key in ("atoms", "blind", "machines")
                }
                | {"p": p}
            )
        print(f"\noccupancy, 32 groups, PlanetLab, {args.sweep_runs} runs per p")
        print(
            "p | atoms | sequencing nodes, latency-blind | sequencing machines, placed for latency"
        )
        for r in occupancy:
            print(f"{r['p']:.2f} | {r['atoms']:.1f} | {r['blind']:.2f} | {r['machines']:.2f}")
        plot_occupancy(occupancy, args.out)
    print(f"\nwrote {args.out}; {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
