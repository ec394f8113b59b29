"""The evaluation of seed 003 (sequencing atoms) on generated memberships.

    python scripts/atoms_evaluation.py                 # 100 runs, about 2 minutes
    python scripts/atoms_evaluation.py --runs 10 --sweep-runs 3 --out /tmp/atoms

Conditions (docs/_atoms-evaluation.md): 128 nodes; 8, 16, 32 and 64 groups whose
sizes follow a truncated Zipf(1) law on 2..128 (P(s) proportional to 1/s),
members drawn uniformly at random without replacement; groups added in id order
with :meth:`epto.atoms.SequencingGraph.build`. Each run maps the 128 nodes onto
128 distinct nodes of the PlanetLab sample (``epto/data/planetlab-226.u16.gz``,
one-way latencies, loaded by :class:`epto.transports.simulation.PlanetLabLatency`;
pairs the sample lacks get its fixed fill-in).

Latency stretch: every member of every group sends one message to its group.
Through the sequencers it travels sender -> ingress host -> the host of each
next atom of the route whose host differs from the previous one -> receiver
(propagation only; co-located atoms cost nothing); directly it travels
sender -> receiver. A destination's stretch is the mean of through / direct
over the messages it receives; the figures are the mean and the maximum over
destinations, and the CDF over destinations of all runs.

The occupancy sweep: 32 groups, every node in every group with probability p
(empty groups are left out).

Prints a table and writes PNG plots to ``--out`` (default docs/atoms-figures).
"""

from __future__ import annotations

import argparse
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
import itertools

import matplotlib.pyplot as plt
from epto.transports.simulation import PlanetLabLatency

from epto.atoms import SequencingGraph, zipf_memberships

NODES = 128
PLANETLAB_NODES = 226
GROUP_COUNTS = (8, 16, 32, 64)
OCCUPANCY = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 0.9, 0.97, 1.0)
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


def bernoulli_groups(count: int, p: float, rng: random.Random) -> dict[int, frozenset[int]]:
    drawn = {g: frozenset(n for n in range(NODES) if rng.random() < p) for g in range(count)}
    return {g: members for g, members in drawn.items() if members}


def describe(graph: SequencingGraph) -> Result:
    groups = graph.groups
    pairs = sum(1 for a in groups for b in groups if a < b and len(groups[a] & groups[b]) >= 2)
    routes = [len(graph.route(g)) for g in groups]
    stamps = [len(graph.stamping(g)) for g in groups]
    return {
        "pairs": pairs,
        "atoms": len(graph.atoms),
        "nodes": len({a.host for a in graph.atoms.values()}),
        "route_mean": statistics.mean(routes) if routes else 0.0,
        "route_max": max(routes, default=0),
        "stamp_mean": statistics.mean(stamps) if stamps else 0.0,
        "stamp_max": max(stamps, default=0),
    }


def host_path(graph: SequencingGraph, group: int) -> list[int]:
    """Ingress host, then each next distinct host along the route."""
    hops = [graph.ingress(group)]
    for aid in graph.route(group):
        host = graph.atoms[aid].host
        if host != hops[-1]:
            hops.append(host)
    return hops


def stretch(graph: SequencingGraph, latency: np.ndarray) -> np.ndarray:
    """Per-destination mean stretch (nan for a node that receives nothing)."""
    total = np.zeros(NODES)
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
        ratio = np.where(off, through / np.where(off, direct, 1.0), 0.0)
        total[m] += ratio.sum(axis=0)
        count[m] += len(m) - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def zipf_run(task: tuple[int, int, int]) -> Result:
    seed, count, run = task
    rng = random.Random(f"atoms-zipf:{seed}:{count}:{run}")
    groups = zipf_memberships(NODES, count, rng)
    started = time.perf_counter()
    graph = SequencingGraph()
    rebuilds = sum(graph.add_group(g, groups[g]).rebuilt for g in sorted(groups))
    built = time.perf_counter() - started
    problems = graph.check()
    if problems:
        raise AssertionError(f"run {task}: {problems[:3]}")
    mapping = rng.sample(range(PLANETLAB_NODES), NODES)
    latency = planetlab()[np.ix_(mapping, mapping)]
    per_dest = stretch(graph, latency)
    per_dest = per_dest[~np.isnan(per_dest)]
    result = describe(graph)
    result.update(
        groups=count,
        rebuilds=rebuilds,
        build_s=built,
        stretch=per_dest.tolist(),
        stretch_mean=float(per_dest.mean()),
        stretch_max=float(per_dest.max()),
    )
    return result


def occupancy_run(task: tuple[int, float, int]) -> Result:
    seed, p, run = task
    rng = random.Random(f"atoms-occupancy:{seed}:{p}:{run}")
    graph = SequencingGraph.build(bernoulli_groups(32, p, rng))
    result = describe(graph)
    result["p"] = p
    return result


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q))


def summarise(results: list[Result], counts: Sequence[int]) -> list[Result]:
    rows = []
    for k in counts:
        mine = [r for r in results if r["groups"] == k]
        row: Result = {"groups": k}
        for key in ("pairs", "atoms", "nodes", "route_mean", "stamp_mean", "stretch_mean"):
            values = [r[key] for r in mine]
            row[key] = statistics.mean(values)
            row[key + "_p10"] = pct(values, 10)
            row[key + "_p90"] = pct(values, 90)
        for key in ("route_max", "stamp_max", "stretch_max"):
            row[key] = statistics.mean(r[key] for r in mine)
            row[key + "_top"] = max(r[key] for r in mine)
        row["rebuilds"] = sum(r["rebuilds"] for r in mine) / len(mine)
        row["build_s"] = statistics.mean(r["build_s"] for r in mine)
        rows.append(row)
    return rows


def plot_stretch(results: list[Result], counts: Sequence[int], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in counts:
        values = np.sort(np.concatenate([r["stretch"] for r in results if r["groups"] == k]))
        ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=f"{k} groups")
    ax.set_xlabel("latency stretch (mean over a destination's messages)")
    ax.set_ylabel("fraction of destinations")
    ax.set_title("Stretch through the sequencing atoms, 128 nodes, PlanetLab")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "stretch-cdf.png", dpi=120)
    plt.close(fig)


def plot_counts(rows: list[Result], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ks = [r["groups"] for r in rows]
    for key, label in (("atoms", "atoms"), ("nodes", "sequencing nodes"), ("pairs", "pairs")):
        mid = [r[key] for r in rows]
        err = [
            [m - r[key + "_p10"] for m, r in zip(mid, rows, strict=True)],
            [r[key + "_p90"] - m for m, r in zip(mid, rows, strict=True)],
        ]
        ax.errorbar(ks, mid, yerr=err, marker="o", capsize=3, label=label)
    reference = {8: 14.4, 16: 57.2, 32: 226, 64: 890}
    ax.plot(list(reference), list(reference.values()), "kx", label="notes: atoms (reference)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("groups")
    ax.set_ylabel("count (mean, p10-p90 bars)")
    ax.set_title("Atoms and sequencing nodes, 128 nodes, Zipf group sizes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "atoms-vs-groups.png", dpi=120)
    plt.close(fig)


def plot_occupancy(rows: list[Result], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ps = [r["p"] for r in rows]
    for key, label in (("atoms", "atoms"), ("nodes", "sequencing nodes")):
        ax.plot(ps, [r[key] for r in rows], marker="o", label=label)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("membership probability p")
    ax.set_ylabel("mean count")
    ax.set_title("Occupancy: 128 nodes, 32 groups")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "occupancy.png", dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per group count")
    parser.add_argument("--seed", type=int, default=1, help="base seed")
    parser.add_argument("--out", type=Path, default=OUT, help="directory for the PNGs")
    parser.add_argument("--groups", type=int, nargs="+", default=list(GROUP_COUNTS))
    parser.add_argument("--sweep-runs", type=int, default=20, help="runs per p (0: no sweep)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tasks = [(args.seed, k, run) for k in args.groups for run in range(args.runs)]
    # Largest first, so that the slow runs do not finish last.
    tasks.sort(key=lambda t: -t[1])
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(zipf_run, tasks))
        sweep_tasks = [(args.seed, p, run) for p in OCCUPANCY for run in range(args.sweep_runs)]
        sweep = list(pool.map(occupancy_run, sweep_tasks))
    rows = summarise(results, args.groups)
    print(f"{args.runs} runs per group count, 128 nodes, Zipf(1) sizes on 2..128, seed {args.seed}")
    print(
        "groups | pairs | atoms (p10-p90) | seq. nodes | stamping/group mean, max |"
        " route mean, max | rebuilds/run | stretch mean (p10-p90) | stretch max (worst)"
    )
    for r in rows:
        print(
            f"{r['groups']:6} | {r['pairs']:5.1f} | {r['atoms']:6.1f} "
            f"({r['atoms_p10']:.0f}-{r['atoms_p90']:.0f}) | {r['nodes']:5.1f} | "
            f"{r['stamp_mean']:5.1f}, {r['stamp_max']:5.1f} | "
            f"{r['route_mean']:6.1f}, {r['route_max']:6.1f} | {r['rebuilds']:5.1f} | "
            f"{r['stretch_mean']:.2f} ({r['stretch_mean_p10']:.2f}-{r['stretch_mean_p90']:.2f})"
            f" | {r['stretch_max']:.2f} ({r['stretch_max_top']:.2f})"
        )
    plot_stretch(results, args.groups, args.out)
    plot_counts(rows, args.out)
    if sweep:
        occupancy = []
        for p in OCCUPANCY:
            mine = [r for r in sweep if r["p"] == p]
            occupancy.append(
                {
                    "p": p,
                    "atoms": statistics.mean(r["atoms"] for r in mine),
                    "nodes": statistics.mean(r["nodes"] for r in mine),
                    "route_mean": statistics.mean(r["route_mean"] for r in mine),
                }
            )
        print(f"\noccupancy, 32 groups, {args.sweep_runs} runs per p")
        print("p | atoms | seq. nodes | route mean")
        for r in occupancy:
            print(f"{r['p']:.2f} | {r['atoms']:6.1f} | {r['nodes']:5.2f} | {r['route_mean']:6.1f}")
        plot_occupancy(occupancy, args.out)
    print(f"\nwrote {args.out}; {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
