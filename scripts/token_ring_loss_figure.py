"""The token ring under link breaks: the figure of docs/token-ring.md.

    .venv/bin/python scripts/token_ring_loss_figure.py

Writes docs/img/token-ring-link-breaks.png and prints the numbers behind it:
for 5 and 10 members, delivery latency p50 and p99 and the fraction of
(event, member) deliveries made, against the link-break rate (the
probability that a send breaks its link for ``BREAK`` seconds, losing what
is in flight on it and what is sent while it is down). Virtual time: the
figures depend on the seeds and the simulated delays only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from epto.transports.simulation import TokenRingCluster

from epto.tokenring import TokenRingConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from token_ring_figures import DELAY, DURATION, poisson_workload

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
RATES = (0.0, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.10)
BREAK = 0.01  # seconds a broken link stays down (a reconnection)
SEEDS = range(3)
DRAIN = 5.0  # seconds after the last broadcast before counting


def measure(n: int, rate: float) -> tuple[float, float, float, int]:
    """p50 and p99 latency (ms), fraction delivered, messages sent again."""
    samples: list[float] = []
    made = wanted = resent = 0
    for seed in SEEDS:
        cluster = TokenRingCluster(
            n, TokenRingConfig(), seed=seed, delay=DELAY, loss=rate, break_duration=BREAK
        )
        poisson_workload(cluster, list(range(n)), seed)
        cluster.run_until(DURATION + DRAIN)
        assert cluster.check().ok
        samples += cluster.latencies()
        made += sum(len(seq) for seq in cluster.delivered.values())
        wanted += n * len(cluster.broadcasts)
        resent += sum(p.statistics().messages_resent for p in cluster.procs.values())
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1e3, cuts[98] * 1e3, made / wanted, resent


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    fig, (lat_ax, frac_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for n, colour in ((5, "tab:blue"), (10, "tab:orange")):
        rows = [(rate, *measure(n, rate)) for rate in RATES]
        print(f"{n} members: break rate, p50 ms, p99 ms, fraction delivered, sent again")
        for rate, p50, p99, frac, resent in rows:
            print(f"  {rate:5.2f} {p50:8.1f} {p99:8.1f} {frac:8.4f} {resent:7d}")
        xs = [r[0] * 100 for r in rows]
        lat_ax.plot(xs, [r[1] for r in rows], marker="o", color=colour, label=f"{n}: p50")
        lat_ax.plot(xs, [r[2] for r in rows], marker="^", ls="--", color=colour, label=f"{n}: p99")
        frac_ax.plot(xs, [r[3] for r in rows], marker="o", color=colour, label=f"{n} members")
    lat_ax.set_yscale("log")
    lat_ax.set_xlabel("link-break rate (% of sends)")
    lat_ax.set_ylabel("delivery latency (ms)")
    lat_ax.grid(alpha=0.3)
    lat_ax.legend(fontsize=8)
    frac_ax.set_xlabel("link-break rate (% of sends)")
    frac_ax.set_ylabel(f"fraction delivered {DRAIN:.0f} s after the last broadcast")
    frac_ax.set_ylim(0, 1.05)
    frac_ax.grid(alpha=0.3)
    frac_ax.legend()
    fig.suptitle(
        "Token ring under link breaks (10 msg/s Poisson, 1-5 ms links, "
        f"a break lasts {BREAK * 1e3:.0f} ms)"
    )
    fig.tight_layout()
    fig.savefig(OUT / "token-ring-link-breaks.png", dpi=120)


if __name__ == "__main__":
    main()
