"""Reproduce the evaluation of the EpTO paper (section 6) in the virtual-time network.

"EpTO: an epidemic total order algorithm for large-scale distributed systems"
(Matos, Mercier, Felber, Oliveira, Pereira). Every run: round δ = 125 ticks,
1% drift, PlanetLab latencies (per link), full-view peer sampling, seed 1.

    python scripts/evaluation.py --rerun         # every experiment, then the plots
    python scripts/evaluation.py                 # only what is not in the results yet
    python scripts/evaluation.py --only fig8     # one experiment (results merged)
    python scripts/evaluation.py --plots-only    # redraw from the saved results
    python scripts/evaluation.py --rerun --spark 'local[2]'   # the runs as Spark tasks
    python scripts/evaluation.py --rerun --spark spark://HOST:7077  # on a cluster
    python scripts/evaluation.py --rerun --standalone 2   # on a standalone cluster of
                                                          # 2 one-core workers started here

Results go to docs/evaluation/results.json (one entry per configuration), plots
to docs/img/evaluation-*.png (Fig. 9, churn with Cyclon, through ``epto bench
churn`` with its runs in docs/data/evaluation-cyclon-*.json), and a markdown
table of every configuration is printed. The 10,000-process configurations
dominate the run time; ``--max-n`` leaves them out.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "evaluation" / "results.json"
IMAGES = ROOT / "docs" / "img"


def experiments(max_n: int) -> dict[str, list[dict[str, Any]]]:
    """Experiment name -> configurations (SimulationSpec fields plus a label)."""
    base = {"seed": 1, "drift": 0.01, "latency": "planetlab", "round_interval": 125.0}
    fig6 = [
        # The reliable-gossip baseline is measured in the TTL 15 run: the
        # first receipt of every event at every other process.
        dict(
            base,
            label="TTL 15 (theory)",
            processes=100,
            rounds=30,
            broadcast_rate=0.05,
            clock="global",
            ttl=15,
            baseline=True,
        ),
        dict(
            base,
            label="TTL 5",
            processes=100,
            rounds=30,
            broadcast_rate=0.05,
            clock="global",
            ttl=5,
        ),
        # Where TTL 5 leaves holes: the same run with the published ordering
        # conditions, and with a latency drawn per message instead of per link.
        dict(
            base,
            label="TTL 5, paper ordering",
            processes=100,
            rounds=30,
            broadcast_rate=0.05,
            clock="global",
            ttl=5,
            ordering="paper",
        ),
        dict(
            base,
            label="TTL 5, latency per message",
            processes=100,
            rounds=30,
            broadcast_rate=0.05,
            clock="global",
            ttl=5,
            planetlab_per_link=False,
        ),
        dict(
            base,
            label="TTL 5, tagged delivery",
            processes=100,
            rounds=30,
            broadcast_rate=0.05,
            clock="global",
            ttl=5,
            tagged_delivery=True,
        ),
    ]
    fig7a = [
        dict(
            base,
            label=f"{clock} {rate:.0%}",
            processes=100,
            rounds=30,
            broadcast_rate=rate,
            clock=clock,
        )
        for clock in ("global", "logical")
        for rate in (0.01, 0.02, 0.05, 0.10)
    ]
    sizes = [n for n in (100, 300, 1000, 3000, 10_000) if n <= max_n]
    fig7b = [
        dict(base, label=f"{clock} n={n}", processes=n, rounds=10, events=25, clock=clock)
        for clock in ("global", "logical")
        for n in sizes
    ]
    fig8 = [
        dict(
            base,
            label=f"churn {frac:.0%}",
            processes=200,
            rounds=20,
            broadcast_rate=0.05,
            clock="global",
            churn=200 * frac,
        )
        for frac in (0.0, 0.01, 0.05, 0.10)
    ]
    fig10 = [
        dict(
            base,
            label=f"loss {loss:.0%}",
            processes=200,
            rounds=20,
            broadcast_rate=0.05,
            clock="global",
            loss=loss,
        )
        for loss in (0.0, 0.01, 0.05, 0.10)
    ]
    paper_mode = [
        dict(
            base,
            label=f"{ordering} TTL {ttl or 'derived'} {rate:.0%}",
            processes=100,
            rounds=15,
            broadcast_rate=rate,
            clock="logical",
            ordering=ordering,
            ttl=ttl,
        )
        for rate in (0.25,)
        for ttl in (None, 8)
        for ordering in ("paper", "strict")
    ]
    return {
        "fig6": fig6,
        "fig7a": fig7a,
        "fig7b": fig7b,
        "fig8": fig8,
        "fig10": fig10,
        "paper_mode": paper_mode,
    }


@contextmanager
def first_receipts(broadcast_times: dict[Any, float], delays: list[float]) -> Iterator[None]:
    """Record, for every process and event, the delay of its first receipt
    (a reliable, unordered gossip delivers there), excluding the source."""
    from epto.epidemic import Process

    original = Process.receive
    seen: dict[int, set[Any]] = {}

    def receive(self: Process, sender: int, ball: Any, now: float) -> None:
        mine = seen.setdefault(self.pid, set())
        fresh = set(ball) - mine
        if fresh:
            mine |= fresh
            for eid in fresh:
                if eid[0] != self.pid:
                    delays.append(now - broadcast_times[eid])
        original(self, sender, ball, now)

    Process.receive = receive  # type: ignore[method-assign]
    try:
        yield
    finally:
        Process.receive = original  # type: ignore[method-assign]


def run_one(cfg: dict[str, Any]) -> dict[str, Any]:
    from epto.transports.simulation import SimulationObserver, SimulationSpec, run_simulation

    fields = {k: v for k, v in cfg.items() if k not in ("label", "baseline")}
    spec = SimulationSpec(**fields)
    broadcast_times: dict[Any, float] = {}
    baseline: list[float] = []

    class Broadcasts(SimulationObserver):
        def on_broadcast(self, pid: int, event_id: Any, now: float) -> None:
            broadcast_times[event_id] = now

    cpu = time.process_time()
    if cfg.get("baseline"):
        with first_receipts(broadcast_times, baseline):
            result = run_simulation(spec, observers=[Broadcasts()])
    else:
        result = run_simulation(spec, observers=[Broadcasts()])
    cpu = time.process_time() - cpu
    summary = result.summary()
    out = {
        "label": cfg["label"],
        "spec": fields,
        "fanout": result.config.fanout,
        "ttl": result.config.ttl,
        "events": result.events,
        "events_delivered": result.events_delivered,
        "holes": result.holes,
        "processes_with_holes": result.processes_with_holes,
        "order_violations": result.order_violations,
        "integrity_violations": result.integrity_violations,
        "out_of_order": result.out_of_order_deliveries,
        "quiescent": result.settled in ("complete", "quiescent"),
        "delay": summary["delay"],
        "entries_processed": result.entries_processed,
        "wall_seconds": result.wall_seconds,
        "cpu_seconds": cpu,
        "copies_per_cpu_second": result.entries_processed / cpu if cpu else None,
        "cdf": _cdf(list(result.delays)),
    }
    if baseline:
        baseline.sort()
        out["baseline_delay"] = {
            "p50": _pct(baseline, 50),
            "p95": _pct(baseline, 95),
            "max": baseline[-1],
            "mean": sum(baseline) / len(baseline),
        }
        out["baseline_cdf"] = _cdf(baseline)
    return out


def import_summary(key: str, file: Path) -> dict[str, Any]:
    """A result from the JSON summary of ``epto simulate`` run with the
    parameters of configuration ``key`` (the simulation is deterministic, so
    the same parameters give the same run); no CDF, percentiles only."""
    exp, _, label = key.partition("/")
    cfg = next(c for c in experiments(10**9)[exp] if c["label"] == label)
    summary = json.loads(file.read_text())
    params = summary["parameters"]
    fields = {k: v for k, v in cfg.items() if k not in ("label", "baseline")}
    for k, v in fields.items():
        if (k != "ttl" or v is not None) and params.get(k) != v:
            raise SystemExit(f"{file}: {k} is {params.get(k)!r}, configuration {key} has {v!r}")
    return {
        "label": label,
        "spec": fields,
        "fanout": params["fanout"],
        "ttl": params["ttl"],
        "events": summary["events"],
        "events_delivered": summary["events_delivered"],
        "holes": summary["holes"],
        "processes_with_holes": summary["processes_with_holes"],
        "order_violations": summary["order_violations"],
        "integrity_violations": summary["integrity_violations"],
        "out_of_order": summary["out_of_order_deliveries"],
        "quiescent": summary.get("settled", "complete") in ("complete", "quiescent"),
        "delay": summary["delay"],
        "entries_processed": summary["entries_processed"],
        "wall_seconds": summary["wall_seconds"],
        "cpu_seconds": None,
        "copies_per_cpu_second": None,
        "cdf": [],
        "imported_from": "epto simulate --json",
    }


def _pct(values: list[float], q: float) -> float:
    return values[max(0, math.ceil(q / 100 * len(values)) - 1)]


def _cdf(sorted_values: list[float], points: int = 200) -> list[tuple[float, float]]:
    """A compact CDF: (delay, fraction of deliveries at or below it)."""
    if not sorted_values:
        return []
    n = len(sorted_values)
    idx = sorted({min(n - 1, round(i * (n - 1) / (points - 1))) for i in range(points)})
    return [(sorted_values[i], (i + 1) / n) for i in idx]


def plot(results: dict[str, dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMAGES.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def cdf_axes(ax: Any, entries: list[tuple[str, list[Any]]], title: str) -> None:
        for label, cdf in entries:
            if cdf:
                xs, ys = zip(*cdf, strict=True)
                ax.step(xs, ys, where="post", label=label)
        ax.set_xlabel("delivery delay (ticks; round = 125)")
        ax.set_ylabel("fraction of deliveries")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

    def save(fig: Any, name: str) -> None:
        path = IMAGES / f"evaluation-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    def of(exp: str) -> list[dict[str, Any]]:
        return [results[key] for key in ordered(results) if key.startswith(exp + "/")]

    if of("fig6"):
        fig, ax = plt.subplots(figsize=(6, 4))
        entries = []
        for r in of("fig6"):
            if "baseline_cdf" in r:
                entries.append(("reliable gossip (first receipt)", r["baseline_cdf"]))
        # The paper-ordering and tagged runs deliver in order what TTL 5 does.
        entries += [
            (f"EpTO global clock, {r['label']}", r["cdf"])
            for r in of("fig6")
            if "paper" not in r["label"] and "tagged" not in r["label"]
        ]
        cdf_axes(ax, entries, "Fig. 6: 100 processes, 5% broadcast rate")
        save(fig, "fig6")
    if of("fig7a"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, clock in zip(axes, ("global", "logical"), strict=True):
            rs = [r for r in of("fig7a") if r["spec"]["clock"] == clock]
            rs.sort(key=lambda r: r["spec"]["broadcast_rate"])
            cdf_axes(
                ax,
                [(f"{r['spec']['broadcast_rate']:.0%} (TTL {r['ttl']})", r["cdf"]) for r in rs],
                f"Fig. 7a: {clock} clock, 100 processes",
            )
        save(fig, "fig7a")
    if of("fig7b"):
        fig, ax = plt.subplots(figsize=(6, 4))
        for clock, marker in (("global", "o"), ("logical", "s")):
            rs = sorted(
                (r for r in of("fig7b") if r["spec"]["clock"] == clock),
                key=lambda r: r["spec"]["processes"],
            )
            if not rs:
                continue
            ns = [r["spec"]["processes"] for r in rs]
            ax.plot(ns, [r["delay"]["p50"] for r in rs], marker=marker, label=f"{clock}: median")
            ax.plot(
                ns,
                [r["delay"]["p95"] for r in rs],
                marker=marker,
                linestyle="--",
                label=f"{clock}: 95th percentile",
            )
        ax.set_xscale("log")
        ax.set_xlabel("processes")
        ax.set_ylabel("delivery delay (ticks)")
        ax.set_title("Fig. 7b: delay against group size (25 events)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "fig7b")
    for exp, title in (
        ("fig8", "Fig. 8: churn, 200 processes, global clock, 5%"),
        ("fig10", "Fig. 10: message loss, 200 processes, global clock, 5%"),
    ):
        if of(exp):
            fig, ax = plt.subplots(figsize=(6, 4))
            cdf_axes(
                ax,
                [(f"{r['label']} (K {r['fanout']}, TTL {r['ttl']})", r["cdf"]) for r in of(exp)],
                title,
            )
            save(fig, exp)
    return written


def ordered(results: dict[str, dict[str, Any]]) -> list[str]:
    """Result keys in the order the experiments define them."""
    known = [f"{exp}/{cfg['label']}" for exp, cfgs in experiments(10**9).items() for cfg in cfgs]
    return [k for k in known if k in results] + sorted(set(results) - set(known))


def table(results: dict[str, dict[str, Any]]) -> str:
    head = (
        "| experiment | configuration | n | K | TTL | events | p50 | p95 | max | holes "
        "(processes) | order violations | CPU s |"
    )
    lines = [head, "|" + "---|" * 12]
    for key in ordered(results):
        r = results[key]
        d = r["delay"]
        lines.append(
            f"| {key.split('/')[0]} | {r['label']} | {r['spec']['processes']} | {r['fanout']} "
            f"| {r['ttl']} | {r['events']} | {d['p50']:.0f} | {d['p95']:.0f} | {d['max']:.0f} "
            f"| {r['holes']} ({r['processes_with_holes']}) | {r['order_violations']} "
            f"| {'-' if r['cpu_seconds'] is None else format(r['cpu_seconds'], '.1f')} |"
        )
        if "baseline_delay" in r:
            b = r["baseline_delay"]
            lines.append(
                f"| {key.split('/')[0]} | reliable gossip (first receipt) | "
                f"{r['spec']['processes']} | {r['fanout']} | - | {r['events']} | {b['p50']:.0f} "
                f"| {b['p95']:.0f} | {b['max']:.0f} | - | - | - |"
            )
    return "\n".join(lines)


FIG9_DATA = ROOT / "docs" / "data"
FIG9_PLOT = ROOT / "docs" / "img" / "evaluation-cyclon.png"


def fig9(*, rerun: bool) -> None:
    """Fig. 9 (500 processes, churn, Cyclon beside the full view), through
    ``epto bench churn``; docs/evaluation-cyclon.md has the details. Saved
    runs are re-plotted unless ``rerun`` or they are missing."""
    from epto.cli import main as epto

    cyclon = FIG9_DATA / "evaluation-cyclon-cyclon.json"
    full = FIG9_DATA / "evaluation-cyclon-full.json"
    common = ["bench", "churn", "-n", "500", "--rounds", "30"]
    if rerun or not cyclon.exists():
        print("== fig9/cyclon", file=sys.stderr, flush=True)
        epto(
            [
                *common,
                "--churn",
                "0,0.002,0.005,0.01,0.05,0.1",
                "--pss",
                "cyclon",
                "--jobs",
                "2",
                "--json",
                str(cyclon),
            ]
        )
    if rerun or not full.exists():
        print("== fig9/full", file=sys.stderr, flush=True)
        epto([*common, "--churn", "0,0.01", "--pss", "full", "--json", str(full)])
    epto(["bench", "churn", "--from", str(cyclon), "--from", str(full), "--plot", str(FIG9_PLOT)])
    print(f"wrote {FIG9_PLOT.relative_to(ROOT)}", file=sys.stderr)


def run_on_spark(
    chosen: dict[str, list[dict[str, Any]]],
    results: dict[str, dict[str, Any]],
    args: Any,
    spark: Any = None,
) -> None:
    """Every configuration still to run, as one Spark task each (the largest
    first, so that they do not all end up behind one another on one core)."""
    from epto.spark import sweep

    todo = [
        (f"{exp}/{cfg['label']}", cfg)
        for exp, configs in chosen.items()
        for cfg in configs
        if args.rerun or f"{exp}/{cfg['label']}" not in results
    ]
    todo.sort(key=lambda item: -item[1]["processes"] * item[1].get("rounds", 1))
    start = time.monotonic()
    done = sweep(
        [cfg for _, cfg in todo],
        runner=run_one,
        master=args.spark,
        spark=spark,
        slices=len(todo) or 1,
    )
    wall = time.monotonic() - start
    for (key, _), r in zip(todo, done, strict=True):
        results[key] = r
    cpu = sum(r["cpu_seconds"] for r in done)
    print(
        f"{len(done)} configurations on Spark ({args.spark}): {cpu:.0f} s of CPU in {wall:.0f} s",
        file=sys.stderr,
    )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated experiments (fig6,fig7a,fig7b,...)")
    parser.add_argument("--max-n", type=int, default=10_000, help="largest group size")
    parser.add_argument("--plots-only", action="store_true", help="redraw from saved results")
    parser.add_argument(
        "--rerun", action="store_true", help="run configurations already in the results too"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="results file (JSON)")
    parser.add_argument(
        "--spark",
        metavar="MASTER",
        help="run the configurations as Spark tasks (epto.spark.sweep): 'local[N]' or a "
        "cluster's URL (its workers need epto); results and plots as without it",
    )
    parser.add_argument(
        "--standalone",
        type=int,
        metavar="WORKERS",
        help="start a Spark standalone cluster on 127.0.0.1 (a master and WORKERS one-core "
        "workers, epto.spark.standalone_cluster), run the configurations on it as with "
        "--spark, and stop it",
    )
    parser.add_argument(
        "--import-summary",
        action="append",
        default=[],
        metavar="KEY=FILE",
        help="take the result of configuration KEY (e.g. 'fig7b/global n=10000') from "
        "FILE, written by 'epto simulate --json' with the same parameters (checked)",
    )
    args = parser.parse_args(argv)

    results: dict[str, dict[str, Any]] = {}
    if args.results.exists():
        results = json.loads(args.results.read_text())
    if not args.plots_only:
        chosen = experiments(args.max_n)
        if args.only:
            wanted = set(args.only.split(","))
            chosen = {k: v for k, v in chosen.items() if k in wanted}
        if args.standalone:
            import tempfile

            from epto.spark import session, standalone_cluster

            with (
                tempfile.TemporaryDirectory(prefix="epto-standalone-") as work,
                standalone_cluster(work, workers=args.standalone, memory="2g") as master,
            ):
                args.spark = master
                spark = session(master, app_name="epto-evaluation")
                try:
                    run_on_spark(chosen, results, args, spark)
                finally:
                    # Before the daemons go: executors lost mid-application log errors.
                    spark.stop()
            chosen = {}
        elif args.spark:
            run_on_spark(chosen, results, args)
            chosen = {}
        for exp, configs in chosen.items():
            for cfg in configs:
                key = f"{exp}/{cfg['label']}"
                if key in results and not args.rerun:
                    continue
                print(f"== {key}", file=sys.stderr, flush=True)
                r = run_one(cfg)
                results[key] = r
                print(
                    f"   {r['events']} events, holes {r['holes']}, order violations "
                    f"{r['order_violations']}, p50 {r['delay']['p50']}, "
                    f"{r['cpu_seconds']:.1f} s CPU, {r['wall_seconds']:.1f} s wall, "
                    f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB",
                    file=sys.stderr,
                    flush=True,
                )
                args.results.parent.mkdir(parents=True, exist_ok=True)
                args.results.write_text(json.dumps(results, indent=1, sort_keys=True))
    if not args.only or "fig9" in args.only.split(","):
        fig9(rerun=args.rerun and not args.plots_only)
    for item in args.import_summary:
        key, _, file = item.rpartition("=")
        results[key] = import_summary(key, Path(file))
        args.results.write_text(json.dumps(results, indent=1, sort_keys=True))
    for path in plot(results):
        print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
