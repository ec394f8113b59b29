"""Regenerate the token-ring figures of docs/token-ring.md.

    .venv/bin/python scripts/token_ring_figures.py

Writes docs/img/token-ring-latency-vs-k.png and docs/img/token-ring-flapping.png
and prints the numbers behind them. Virtual time: the figures depend on the
seeds and the simulated delays only, not on the machine.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from epto.transports.simulation import TokenRingCluster

from epto.tokenring import TokenRingConfig

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
DELAY = (0.001, 0.005)  # one-way link delay, uniform, seconds
RATE = 10.0  # messages per second, Poisson (as in the seed paper's Fig. 4)
DURATION = 20.0


def poisson_workload(cluster: TokenRingCluster, senders: list[int], seed: int) -> None:
    rng = random.Random(seed)
    t = 0.2
    i = 0
    while t < DURATION:
        s = rng.choice(senders)
        cluster.broadcast_at(t, s, b"x" * 1024)
        i += 1
        t += rng.expovariate(RATE)


def latency_vs_k(n: int, seeds: range) -> list[tuple[int, float, float]]:
    rows = []
    for k in range(1, n + 1):
        samples: list[float] = []
        for seed in seeds:
            cluster = TokenRingCluster(n, TokenRingConfig(k=k), seed=seed, delay=DELAY)
            poisson_workload(cluster, list(range(n)), seed)
            cluster.run_until(DURATION + 2.0)
            samples += cluster.latencies()
        rows.append(
            (k, statistics.mean(samples) * 1e3, statistics.quantiles(samples, n=20)[18] * 1e3)
        )
    return rows


def flapping_run(flap: bool, seed: int) -> tuple[list[tuple[float, float]], int, int]:
    n = 5
    cluster = TokenRingCluster(n, TokenRingConfig(), seed=seed, delay=DELAY)
    poisson_workload(cluster, [0, 1, 2, 3], seed)
    if flap:
        t = 2.0
        while t < DURATION:
            cluster.at(t, lambda: cluster.disconnect(4))
            cluster.at(t + 1.5, lambda: cluster.reconnect(4))
            t += 3.0
    cluster.run_until(DURATION + 2.0)
    points = []
    for p in (0, 1, 2, 3):
        for eid, at in cluster.delivered_at[p].items():
            points.append((cluster.broadcast_times[eid], at - cluster.broadcast_times[eid]))
    stats = cluster.procs[0].statistics()
    return sorted(points), stats.light_changes, stats.full_changes


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in (5, 10):
        rows = latency_vs_k(n, range(3))
        print(f"n={n}: k, mean latency ms, p95 ms")
        for k, mean, p95 in rows:
            print(f"  {k:2d} {mean:7.2f} {p95:7.2f}")
        ax.plot([r[0] for r in rows], [r[1] for r in rows], marker="o", label=f"{n} members")
    ax.set_xlabel("k (core members holding a message before delivery)")
    ax.set_ylabel("mean delivery latency (ms)")
    ax.set_title(
        "Token ring: delivery latency against k\n(10 msg/s Poisson, 1-5 ms links, hold 5 ms)"
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "token-ring-latency-vs-k.png", dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4))
    for flap, colour in ((False, "tab:blue"), (True, "tab:red")):
        points, light, full = flapping_run(flap, seed=1)
        lat = [d for _, d in points]
        label = "member 4 flapping" if flap else "no flapping"
        median = statistics.median(lat) * 1e3
        p99 = statistics.quantiles(lat, n=100)[98] * 1e3
        print(
            f"{label}: deliveries at members 0-3 {len(lat)}, median {median:.2f} ms, "
            f"p99 {p99:.2f} ms, max {max(lat) * 1e3:.2f} ms, "
            f"light changes {light}, full view changes {full}"
        )
        ax.scatter(
            [t for t, _ in points],
            [d * 1e3 for d in lat],
            s=4,
            color=colour,
            label=label,
            alpha=0.6,
        )
    t = 2.0
    while t < DURATION:
        ax.axvspan(t, t + 1.5, color="grey", alpha=0.15)
        t += 3.0
    ax.set_yscale("log")
    ax.set_xlabel("broadcast time (s); grey: member 4 disconnected")
    ax.set_ylabel("delivery latency at members 0-3 (ms)")
    ax.set_title("Flapping member: moved to the external set and back, no full view change")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "token-ring-flapping.png", dpi=120)


if __name__ == "__main__":
    main()
