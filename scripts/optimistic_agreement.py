"""How often the optimistic order is the final order (seed 001's optimistic
delivery in the token ring), as a function of latency jitter and send rate, in
the virtual-time network; the final order's safety checked in every run.

    python scripts/optimistic_agreement.py            # the default sweep, about 2 min
    python scripts/optimistic_agreement.py --quick    # a smaller sweep, about 15 s
    python scripts/optimistic_agreement.py --out /tmp/agree

Topologies:

* ``triangle``: seed 001's worked example, one-way latencies 5, 7 and 9 ms.
* ``planetlab10``: 10 nodes drawn (seeded) from the PlanetLab sample of
  :class:`PlanetLabLatency` (one-way 8 to 463 ms, mean 155 ms), the matrix
  symmetrised (mean of the two directions: the members estimate one-way
  latencies as half a round trip, so an asymmetric path would be
  mispredicted even without jitter). The token ring's timeouts are scaled by
  10 (``TokenRingConfig().scaled(10)``): with the defaults (suspect after
  0.3 s, for round trips up to 0.9 s) the ring changes views again and again
  and final latencies reach 15 s. Optimistic delivery keeps its defaults
  (probes every 0.5 s).

Each run: a :class:`TokenRingCluster` with ``LinkLatency(matrix, jitter)``
(every message takes its link's base latency plus a uniform draw in
``[-jitter, +jitter]``, never below 0); Poisson broadcasts at the total rate,
each from a member drawn at random, from ``TRAFFIC_START`` (0.5 s on the
triangle, 1 s on planetlab10) until ``window`` s after ``MEASURE_START``
(1.5 s, 3 s) and at least ``least`` broadcasts after it; then the run goes
on until every member delivered everything finally. Only the broadcasts from
``MEASURE_START`` on are counted: the warm-up carries traffic so that the
plan in force is the one made from the traffic's own send rates (with a
quiet warm-up, the switch from the quiet group's plan to it mispredicts what
is in flight, up to 12% of a 3 s burst on planetlab10: a warm-up artefact).

Agreement is ``confirmed / (confirmed + reordered)`` over the final
deliveries, at every member, of the counted broadcasts (``reordered`` read
from each ``FINAL`` :class:`epto.Delivery`; the same rule as
``OptimisticStatistics``, which counts from time 0): the share of final
deliveries that confirmed the oldest pending optimistic delivery. Every run
is checked: :func:`epto.check.check` finds no order or integrity violation,
every member delivered every broadcast finally, and every member's final
sequence is the same. Delivery latencies (delivery time minus broadcast
time, mean over members and counted messages, the sender's own deliveries
included) are reported for the jitter-0 cells, with the plans made per run.

Prints markdown tables; writes ``agreement.png`` and ``agreement.json`` to
``--out`` (default docs/optimistic-figures).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import attrs
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from epto.transports.simulation import (
    LinkLatency,
    PlanetLabLatency,
    SimulationObserver,
    TokenRingCluster,
)

from epto import Delivery, DeliveryTag, EventId, ProcessId
from epto.check import check
from epto.optimistic import OptimisticConfig
from epto.tokenring import TokenRingConfig

OUT = Path(__file__).resolve().parents[1] / "docs" / "optimistic-figures"
DRAIN = 5.0
"""Virtual seconds after the last broadcast for the final deliveries."""

TRIANGLE = [[0.0, 0.005, 0.007], [0.005, 0.0, 0.009], [0.007, 0.009, 0.0]]
"""Seed 001's worked example: ``W[r][s]`` one-way latencies in seconds."""

MS = 0.001


def planetlab(n: int, seed: int) -> list[list[float]]:
    """``n`` distinct PlanetLab nodes drawn with ``seed``; symmetric, in seconds."""
    model = PlanetLabLatency(scale=MS)
    nodes = random.Random(f"planetlab-{seed}").sample(range(226), n)
    rng = random.Random(0)  # unused by the per-link model
    return [
        [
            0.0 if r == s else round((model.sample(a, b, rng) + model.sample(b, a, rng)) / 2, 4)
            for s, b in enumerate(nodes)
        ]
        for r, a in enumerate(nodes)
    ]


def topologies() -> dict[str, list[list[float]]]:
    return {"triangle": TRIANGLE, "planetlab10": planetlab(10, 1)}


RING_SCALE = {"triangle": 1.0, "planetlab10": 10.0}
"""Factor on the token ring's timeouts per topology (not on the optimistic ones)."""
TRAFFIC_START = {"triangle": 0.5, "planetlab10": 1.0}
"""Virtual second of the first broadcast (probes start at 0; the first plan
comes at about 0.5 s on the triangle, 1.3 s on planetlab10)."""
MEASURE_START = {"triangle": 1.5, "planetlab10": 3.0}
"""Only messages broadcast from here on are counted: by then the plan made
from the traffic's own send rates is in place (the switch from the plan of a
quiet group to it mispredicts what is in flight; see the docs)."""


SWEEPS: dict[str, dict[str, Any]] = {
    "default": {
        "jitter": {
            "triangle": [0.0, 0.25, 0.5, 1.0, 2.0, 4.0],
            "planetlab10": [0.0, 1.0, 2.0, 5.0, 10.0, 20.0],
        },
        "rates": {
            "triangle": [10.0, 50.0, 200.0, 1000.0],
            "planetlab10": [10.0, 50.0, 200.0, 500.0],
        },
        "planners": ["optimal", "fast-seto", "none"],
        "seeds": 3,
        "window": 0.5,
        "least": 150,
    },
    "quick": {
        "jitter": {"triangle": [0.0, 1.0, 4.0], "planetlab10": [0.0, 5.0, 20.0]},
        "rates": {"triangle": [10.0, 200.0, 1000.0], "planetlab10": [10.0, 200.0]},
        "planners": ["optimal", "none"],
        "seeds": 1,
        "window": 0.3,
        "least": 100,
    },
}
"""Per sweep: jitter values (ms) and total send rates (messages/s) per
topology, planners, runs per cell (seeds ``--seed`` onward), and the counted
traffic: ``window`` s from the measurement's start, at least ``least``
messages."""


class Measured(SimulationObserver):
    """Agreement and latencies over the messages broadcast from ``since`` on."""

    def __init__(self, since: float) -> None:
        self.since = since
        self.sent: dict[EventId, float] = {}
        self.confirmed = 0
        self.reordered = 0
        self.optimistic_latency: list[float] = []
        self.final_latency: list[float] = []

    def on_broadcast(self, pid: ProcessId, event_id: EventId, now: float) -> None:
        if now >= self.since:
            self.sent[event_id] = now

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        sent = self.sent.get(delivery.event.id)
        if sent is None:
            return
        if delivery.tag is DeliveryTag.OPTIMISTIC:
            self.optimistic_latency.append(now - sent)
        elif delivery.tag is DeliveryTag.FINAL:
            self.final_latency.append(now - sent)
            if delivery.reordered:
                self.reordered += 1
            else:
                self.confirmed += 1


def run(
    topology: str,
    matrix: list[list[float]],
    jitter_ms: float,
    rate: float,
    planner: str,
    window: float,
    least: int,
    seed: int,
) -> dict[str, Any]:
    """One run: Poisson traffic at ``rate`` from ``TRAFFIC_START``; counted, the
    messages broadcast in ``window`` s from ``MEASURE_START`` (at least
    ``least`` of them). Its counters, latencies and safety verdict."""
    n = len(matrix)
    config = attrs.evolve(
        TokenRingConfig().scaled(RING_SCALE[topology]),
        optimistic=OptimisticConfig(planner=planner),  # type: ignore[arg-type]
    )
    cluster = TokenRingCluster(
        n, config, seed=seed, delay=LinkLatency(matrix, jitter=jitter_ms * MS)
    )
    measured = Measured(MEASURE_START[topology])
    cluster.add_observer(measured)
    rng = random.Random(f"traffic-{seed}-{n}-{rate}")
    t, i, counted = TRAFFIC_START[topology], 0, 0
    while t < MEASURE_START[topology] + window or counted < least:
        t += rng.expovariate(rate)
        cluster.broadcast_at(t, rng.randrange(n), b"m%d" % i)
        i += 1
        counted += t >= MEASURE_START[topology]
    messages = i
    end = t + DRAIN
    cluster.run_until(end)
    while any(len(seq) < messages for seq in cluster.delivered.values()) and end < t + 60:
        end += DRAIN
        cluster.run_until(end)

    report = check(cluster.delivered, broadcast=cluster.broadcasts)
    finals = {tuple(seq) for seq in cluster.delivered.values()}
    stats = [proc.statistics() for proc in cluster.procs.values()]
    opt = [s.optimistic for s in stats if s.optimistic is not None]
    assert len(opt) == len(stats)
    return {
        "broadcasts": len(cluster.broadcasts),
        "counted": len(measured.sent),
        "confirmed": measured.confirmed,
        "reordered": measured.reordered,
        "all_confirmed": sum(o.confirmed for o in opt),
        "all_reordered": sum(o.reordered for o in opt),
        "unannounced": sum(o.unannounced for o in opt),
        "plans": max(o.plans for o in opt),
        "view_changes": max(s.light_changes + s.full_changes for s in stats),
        "order_violations": len(report.order_violations),
        "integrity_violations": len(report.integrity_violations),
        "same_final_sequence": len(finals) == 1,
        "complete": all(len(seq) == messages for seq in cluster.delivered.values()),
        "delivered_min": min(len(seq) for seq in cluster.delivered.values()),
        "final_latency": statistics.fmean(measured.final_latency),
        "optimistic_latency": statistics.fmean(measured.optimistic_latency)
        if measured.optimistic_latency
        else None,
        "delays_ms": [[round(d / MS, 2) for _, d in o.delays] for o in opt],
    }


def agreement(runs: list[dict[str, Any]]) -> float:
    confirmed: int = sum(r["confirmed"] for r in runs)
    reordered: int = sum(r["reordered"] for r in runs)
    return confirmed / (confirmed + reordered)


def sweep(name: str, seed: int) -> dict[str, Any]:
    cfg = SWEEPS[name]
    cells: list[dict[str, Any]] = []
    for topo, matrix in topologies().items():
        for planner in cfg["planners"]:
            for jitter in cfg["jitter"][topo]:
                for rate in cfg["rates"][topo]:
                    runs = [
                        run(
                            topo,
                            matrix,
                            jitter,
                            rate,
                            planner,
                            cfg["window"],
                            cfg["least"],
                            seed + k,
                        )
                        for k in range(cfg["seeds"])
                    ]
                    for later in runs[1:]:  # the plan of the first run is enough
                        del later["delays_ms"]
                    cells.append(
                        {
                            "topology": topo,
                            "planner": planner,
                            "jitter_ms": jitter,
                            "rate": rate,
                            "agreement": agreement(runs),
                            "runs": runs,
                        }
                    )
    return {"sweep": name, "seed": seed, "config": cfg, "cells": cells}


def safety(result: dict[str, Any]) -> tuple[list[str], str]:
    runs = [r for cell in result["cells"] for r in cell["runs"]]
    problems = [
        f"{c['topology']} {c['planner']} jitter {c['jitter_ms']} ms rate {c['rate']}: {r}"
        for c in result["cells"]
        for r in c["runs"]
        if r["order_violations"]
        or r["integrity_violations"]
        or not r["same_final_sequence"]
        or not r["complete"]
    ]
    order = sum(r["order_violations"] for r in runs)
    integrity = sum(r["integrity_violations"] for r in runs)
    broadcasts = sum(r["broadcasts"] for r in runs)
    delivered = sum(r["delivered_min"] for r in runs)
    counted = sum(r["counted"] for r in runs)
    changes = sum(r["view_changes"] > 0 for r in runs)
    line = (
        f"{order} order violations and {integrity} integrity violations in {len(runs)} runs "
        f"(final deliveries of {delivered} of {broadcasts} broadcasts at every member; "
        f"{sum(r['same_final_sequence'] for r in runs)} of {len(runs)} runs with one "
        f"final sequence at all members; {changes} runs with a view change). "
        f"Agreement counted over the {counted} broadcasts after the warm-up."
    )
    return problems, line


def tables(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines: list[str] = []
    for topo in topologies():
        for planner in cfg["planners"]:
            cells = [
                c for c in result["cells"] if c["topology"] == topo and c["planner"] == planner
            ]
            lines += [
                f"#### {topo}, planner `{planner}`: agreement (confirmed / final deliveries)",
                "",
                "| jitter ± ms | " + " | ".join(f"{r:g} msg/s" for r in cfg["rates"][topo]) + " |",
                "| --- |" + " --- |" * len(cfg["rates"][topo]),
            ]
            for jitter in cfg["jitter"][topo]:
                row = [
                    f"{100 * c['agreement']:.1f}%"
                    for rate in cfg["rates"][topo]
                    for c in cells
                    if c["jitter_ms"] == jitter and c["rate"] == rate
                ]
                lines.append(f"| {jitter:g} | " + " | ".join(row) + " |")
            lines.append("")
    lines += [
        "#### Mean delivery latency at jitter 0 (ms, broadcast to delivery, over members)",
        "",
        "| topology | planner | rate msg/s | optimistic | final | agreement | plans per run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in result["cells"]:
        if c["jitter_ms"] != 0:
            continue
        opt = [r["optimistic_latency"] for r in c["runs"] if r["optimistic_latency"] is not None]
        fin = [r["final_latency"] for r in c["runs"]]
        lines.append(
            f"| {c['topology']} | {c['planner']} | {c['rate']:g} | "
            f"{statistics.fmean(opt) / MS:.1f} | {statistics.fmean(fin) / MS:.1f} | "
            f"{100 * c['agreement']:.1f}% | "
            f"{statistics.fmean(r['plans'] for r in c['runs']):.1f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    cfg = result["config"]
    topos = list(topologies())
    planners = cfg["planners"]
    fig, axes = plt.subplots(
        len(topos), len(planners), figsize=(5 * len(planners), 3.6 * len(topos)), squeeze=False
    )
    for i, topo in enumerate(topos):
        for j, planner in enumerate(planners):
            ax = axes[i][j]
            for rate in cfg["rates"][topo]:
                cells = [
                    c
                    for c in result["cells"]
                    if c["topology"] == topo and c["planner"] == planner and c["rate"] == rate
                ]
                ax.plot(
                    [c["jitter_ms"] for c in cells],
                    [100 * c["agreement"] for c in cells],
                    marker="o",
                    label=f"{rate:g} msg/s",
                )
            ax.set_title(f"{topo}, planner {planner}")
            ax.set_xlabel("jitter ± ms (uniform per message)")
            ax.set_ylabel("optimistic order = final (%)")
            ax.set_ylim(0, 102)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dump(result: dict[str, Any]) -> str:
    """The raw numbers as JSON, one cell (with its runs) per line."""
    head = {k: v for k, v in result.items() if k != "cells"}
    cells = ",\n".join(json.dumps(cell, separators=(",", ":")) for cell in result["cells"])
    return json.dumps(head, indent=1)[:-2] + ',\n "cells": [\n' + cells + "\n ]\n}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller sweep")
    parser.add_argument("--seed", type=int, default=1, help="first seed of each cell's runs")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNG and JSON go")
    args = parser.parse_args()
    name = "quick" if args.quick else "default"
    started = time.perf_counter()
    result = sweep(name, args.seed)
    elapsed = time.perf_counter() - started
    result["topologies"] = topologies()
    problems, line = safety(result)
    print(f"### Agreement of the optimistic order with the final order ({name} sweep)\n")
    print(tables(result))
    print()
    print(line)
    print(f"({elapsed:.0f} s)")
    args.out.mkdir(parents=True, exist_ok=True)
    plot(result, args.out / "agreement.png")
    (args.out / "agreement.json").write_text(dump(result))
    if problems:
        raise SystemExit("safety violated:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
