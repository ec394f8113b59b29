"""``epto simulate``: a group in the virtual-time network (EpTO, a token
ring, or sequencing atoms over overlapping groups), checked.

Size: one sub-command (about 440 lines): its thirty-odd options, the run,
the text summary of each engine and the plot, read in the order a user
meets them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

from .._defaults import DEFAULT_C, DEFAULT_CLOCK
from ._args import positive_int


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="simulate an EpTO group (or a token ring) in virtual time and check what it delivered",
        description=(
            "Run an EpTO group in the seeded virtual-time network (EpTO paper, section 6: "
            "rounds of 125 ticks, 1%% drift, PlanetLab latencies), then check integrity, "
            "total order and agreement and report delivery delays. Time is in simulator "
            "ticks (the PlanetLab latencies are milliseconds). Exit status: 0 when the run "
            "passed; 1 when integrity or total order was violated (safety); 2 for invalid "
            "options; 3 when validity or liveness failed: the run stopped at the round limit "
            "before settling, or stalled (no progress in virtual time), or (token ring, or "
            "EpTO with --require-agreement) an event of a member that stayed was not "
            "delivered by every member that stayed. The JSON's 'failures' names the reasons."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "exit status:\n"
            "  0  passed\n"
            "  1  safety violated (integrity or total order)\n"
            "  2  invalid options\n"
            "  3  validity or liveness failed (undelivered events of staying members,\n"
            "     stopped at the round limit, stalled); see 'failures' in the JSON"
        ),
    )
    g = p.add_argument_group("group and workload")
    g.add_argument(
        "--processes", "-n", "--n", type=positive_int, default=100, help="N (as epto params --n)"
    )
    g.add_argument("--rounds", type=positive_int, default=60, help="broadcasting rounds")
    g.add_argument(
        "--broadcast-rate",
        type=float,
        default=0.05,
        help="probability that a process broadcasts in a round (default 0.05)",
    )
    g.add_argument(
        "--events",
        type=int,
        default=None,
        help="broadcast exactly this many events instead (random times and sources)",
    )
    g.add_argument("--payload-size", type=int, default=16, help="bytes per event (min 8)")
    g.add_argument("--seed", type=int, default=1)

    e = p.add_argument_group("protocol")
    e.add_argument(
        "--mode",
        choices=("epto", "token-ring", "atoms"),
        default="epto",
        help="ordering engine (token-ring: docs/token-ring.md; its timeouts are "
        "scaled to ticks as milliseconds; atoms: sequencing atoms for overlapping "
        "groups, docs/atoms.md, pairwise order)",
    )
    e.add_argument(
        "--groups",
        type=positive_int,
        default=None,
        help="atoms: Zipf-sized groups over the processes (default 8)",
    )
    e.add_argument(
        "--placement",
        choices=("latency", "members", "blind"),
        default="latency",
        help="atoms: sequencing machines placed for the latency model on any process "
        "(default), on members of the overlaps only, or latency-blind (docs/atoms.md)",
    )
    e.add_argument("--k", type=positive_int, default=None, help="token ring: resiliency k")
    e.add_argument(
        "--optimistic",
        choices=("optimal", "fast-seto", "seto", "none"),
        default=None,
        help="token ring: deliver optimistically too, with delays from this planner "
        "(docs/optimistic.md); reports how often the optimistic order was the final one",
    )
    e.add_argument(
        "--clock",
        choices=("logical", "global"),
        default=DEFAULT_CLOCK,
        help=f"EpTO's clock (default {DEFAULT_CLOCK}, as epto node and epto params)",
    )
    e.add_argument("--fanout", type=positive_int, default=None, help="default: epto params")
    e.add_argument("--ttl", type=positive_int, default=None, help="default: epto params")
    e.add_argument(
        "--c", type=float, default=DEFAULT_C, help="safety constant of the TTL (> 1, default 2)"
    )
    e.add_argument("--ordering", choices=("strict", "paper"), default="strict")
    e.add_argument("--tagged", action="store_true", help="tagged out-of-order delivery")
    e.add_argument(
        "--require-agreement",
        action="store_true",
        help="EpTO: fail (exit 3) on holes and validity violations too (EpTO's agreement "
        "is probabilistic, so by default they are only reported; a token ring always fails "
        "on them)",
    )

    n = p.add_argument_group("network")
    n.add_argument("--round-length", type=float, default=125.0, help="δ in ticks (125)")
    n.add_argument(
        "--drift",
        type=float,
        default=0.01,
        help="each process's round length is uniform in [δ(1-d), δ(1+d)] (0.01)",
    )
    n.add_argument(
        "--jitter", type=float, default=0.0, help="each round starts up to jitter*δ late"
    )
    n.add_argument(
        "--wire",
        action="store_true",
        help="run every process as a full endpoint, frames as bytes on the links "
        "(framing, signatures, splitting decided as by a real node; the token ring's and "
        "atoms' frames on simulated streams; EpTO over a full view only; for small runs)",
    )
    n.add_argument(
        "--latency",
        choices=("constant", "uniform", "planetlab", "transit-stub"),
        default="planetlab",
        help="latency model (transit-stub: a GT-ITM-like topology of 10,000 routers "
        "drawn from --seed, hosts in clusters of 8; default planetlab)",
    )
    n.add_argument(
        "--latency-max",
        type=float,
        default=100.0,
        help="constant: the latency; uniform: the largest (default 100)",
    )
    n.add_argument("--latency-min", type=float, default=0.0, help="uniform: the smallest")
    n.add_argument(
        "--planetlab-per-message",
        action="store_true",
        help="draw every message from the PlanetLab distribution instead of fixing "
        "a latency per link",
    )
    n.add_argument("--loss", type=float, default=0.0, help="message loss rate in [0, 1)")
    n.add_argument(
        "--break-duration",
        type=float,
        default=None,
        metavar="TICKS",
        help="token ring: how long a link broken by --loss stays down "
        "(default: one round trip of that link)",
    )
    churn = n.add_mutually_exclusive_group()
    churn.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="fraction of the processes replaced every round while broadcasting",
    )
    churn.add_argument(
        "--churn-count", type=float, default=None, help="processes replaced every round"
    )
    n.add_argument(
        "--partition",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="cut this fraction of the initial processes (drawn at random) off from the "
        "others for --partition-rounds (default 0: no partition)",
    )
    n.add_argument(
        "--partition-start",
        type=float,
        default=None,
        metavar="ROUND",
        help="when the partition starts, in rounds (default: a quarter of --rounds)",
    )
    n.add_argument(
        "--partition-rounds",
        type=float,
        default=None,
        help="how long the partition lasts, in rounds (default: half of --rounds)",
    )
    n.add_argument(
        "--quantum",
        type=float,
        default=1.0,
        help="scheduler time resolution in ticks; 0 for exact time (default 1)",
    )
    n.add_argument(
        "--max-drain-rounds",
        type=int,
        default=None,
        help="rounds allowed after the broadcasting ones for events to settle; a run "
        "that reaches it unsettled fails (exit 3)",
    )
    n.add_argument(
        "--max-items-per-instant",
        type=positive_int,
        default=None,
        help="stall bound: more queue items than this at one instant of virtual time "
        "stop the run as stalled (exit 3); default 1,000,000 or 1,000 per process, "
        "whichever is larger",
    )
    n.add_argument(
        "--run-to-quiescence",
        action="store_true",
        help="after every event is delivered everywhere, run on until no ball is in "
        "flight (the work figures then include the gossip tail)",
    )

    s = p.add_argument_group("peer sampling")
    s.add_argument(
        "--pss",
        choices=("full", "cyclon"),
        default="full",
        help="full: every process knows the membership; cyclon: partial views kept by "
        "Cyclon shuffles, newcomers join through a random live process (default full)",
    )
    s.add_argument("--view-size", type=positive_int, default=50, help="Cyclon view (50)")
    s.add_argument(
        "--shuffle-length", type=positive_int, default=8, help="Cyclon entries per shuffle (8)"
    )
    s.add_argument(
        "--shuffle-period",
        type=float,
        default=None,
        help="ticks between two shuffles of a process (default: the round length)",
    )
    s.add_argument(
        "--pss-seeds",
        type=positive_int,
        default=3,
        help="Cyclon: live processes a newcomer joins through (3)",
    )
    s.add_argument(
        "--pss-warmup",
        type=int,
        default=50,
        help="Cyclon: rounds of shuffling before the first broadcast (50)",
    )

    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", type=Path, help="write the summary as JSON")
    o.add_argument("--plot", metavar="FILE.png", type=Path, help="plot the delay CDF")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    o.add_argument(
        "--log-dir",
        metavar="DIR",
        type=Path,
        help="write one delivery log per process under DIR/<pid>/ and DIR/broadcasts.csv "
        "(1 tick = 1 ms; see docs/delivery-log.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError

    from ._files import path_problem

    # Before the run: a path that cannot work is said now, not after it.
    line = path_problem(
        "epto simulate", args, new_files=("--json", "--plot"), directories=("--log-dir",)
    )
    if line is not None:
        print(line, file=sys.stderr)
        return 2  # invalid options
    from epto.transports.simulation import (
        SimulationObserver,
        SimulationSpec,
        run_simulation,
    )

    churn = args.churn_count if args.churn_count is not None else args.churn * args.processes
    try:
        spec = SimulationSpec(
            processes=args.processes,
            rounds=args.rounds,
            broadcast_rate=args.broadcast_rate,
            events=args.events,
            clock=args.clock,
            fanout=args.fanout,
            ttl=args.ttl,
            c=args.c,
            round_interval=args.round_length,
            drift=args.drift,
            jitter=args.jitter,
            latency=args.latency,
            latency_low=args.latency_min,
            latency_high=args.latency_max,
            planetlab_per_link=not args.planetlab_per_message,
            loss=args.loss,
            break_duration=args.break_duration,
            churn=churn,
            ordering=args.ordering,
            tagged_delivery=args.tagged,
            seed=args.seed,
            payload_size=args.payload_size,
            quantum=args.quantum or None,
            max_drain_rounds=args.max_drain_rounds,
            pss=args.pss,
            view_size=args.view_size,
            shuffle_length=args.shuffle_length,
            shuffle_period=args.shuffle_period,
            pss_warmup=args.pss_warmup,
            pss_seeds=args.pss_seeds,
            wire=args.wire,
            stop_when_complete=not args.run_to_quiescence,
            mode=args.mode,
            groups=args.groups,
            atoms_placement=args.placement,
            k=args.k,
            optimistic=args.optimistic,
            partition=args.partition,
            partition_start=args.partition_start,
            partition_rounds=args.partition_rounds,
            require_agreement=args.require_agreement,
            max_items_per_instant=args.max_items_per_instant,
        )
        spec.validate()
        if spec.mode == "epto":
            spec.config(spec.latency_model())
        elif spec.mode == "token-ring":
            spec.tokenring_config(spec.latency_model())
    except ConfigurationError as exc:
        print(f"epto simulate: {exc}", file=sys.stderr)
        return 2

    from tqdm import tqdm

    bar = tqdm(
        total=args.rounds,
        unit="round",
        file=sys.stderr,
        disable=args.quiet or not sys.stderr.isatty(),
        leave=False,
    )

    def progress(done: float, expected: float) -> None:
        if expected != bar.total:
            bar.total = expected
        bar.update(done - bar.n)

    from epto.log import SimulationLogger

    logger = None if args.log_dir is None else SimulationLogger(args.log_dir, flush_every=256)
    cpu = time.process_time()
    try:
        # SimulationLogger has SimulationObserver's methods without subclassing it
        # (epto.log does not import the simulator), hence the cast.
        observers = [cast(SimulationObserver, logger)] if logger is not None else []
        result = run_simulation(spec, progress=progress, observers=observers)
    finally:
        bar.close()
        if logger is not None:
            logger.close()

    summary = result.summary()
    # What the run cost this process, printed only: the JSON summary is the
    # run's (the same seed gives the same JSON but its wall-clock time), and
    # peak RSS is the whole interpreter's.
    cost = (time.process_time() - cpu, _peak_rss_mb())
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if args.plot is not None:
        _plot(result.delays, args.plot, summary)
    _print_summary(summary, result.report.summary(), cost)
    failures = result.failures
    if "safety" in failures:
        return 1
    return 3 if failures else 0


def _print_summary(s: dict[str, Any], check_summary: str, cost: tuple[float, float | None]) -> None:
    p = s["parameters"]
    d = s["delay"]

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    ring = p.get("mode") == "token-ring"
    atoms = p.get("mode") == "atoms"
    if ring:
        engine = f"token ring, k {p['k']}"
    elif atoms:
        engine = (
            f"sequencing atoms, {p['groups']} groups, {p['atoms']} atoms on "
            f"{p['sequencing_nodes']} nodes, route mean {p['route_mean']:.1f} max {p['route_max']}"
        )
    else:
        engine = (
            f"fanout {p['fanout']}, TTL {p['ttl']}, {p['clock']} clock, {p['ordering']} ordering"
        )
    print(
        f"{s['processes']} processes ({s['processes_total']} over the run), {engine}, "
        f"latency {p['latency']}, loss {p['loss']:g}, churn {p['churn']:g}/round, seed {p['seed']}"
        + (f", partition {p['partition']:g}" if p.get("partition") else "")
    )
    if ring:
        print(
            f"view changes: {p['view_changes']} full, {p['iview_changes']} light; "
            f"{p['members_at_end']} members at the end ({p['core_at_end']} in the token list), "
            f"{p['excluded']} excluded"
        )
        if p.get("optimistic_planner") is not None:
            agreement = p["optimistic_agreement"]
            print(
                f"optimistic delivery ({p['optimistic_planner']} delays): "
                f"{p['optimistic_deliveries']} optimistic deliveries; "
                f"{p['final_confirmed']} of {p['final_deliveries']} final deliveries confirmed "
                "the optimistic order" + ("" if agreement is None else f" ({100 * agreement:.1f}%)")
            )
    if atoms:
        stretch = p.get("stretch_mean")
        print(
            f"{p.get('placement', 'blind')} placement; latency stretch over direct delivery, "
            "per receiver: "
            + (
                "-"
                if stretch is None
                else f"ratio of means {p['stretch_ratio_of_means_mean']:.2f} "
                f"(max {p['stretch_ratio_of_means_max']:.2f}), mean of ratios "
                f"{stretch:.2f} (max {p['stretch_max']:.2f})"
            )
            + "; order checked pairwise (docs/atoms.md)"
        )
    if p.get("pss") == "cyclon":
        net = s["network"]
        print(
            f"peer sampling: Cyclon, view {p['view_size']}, shuffle {p['shuffle_length']}, "
            f"{p['pss_warmup']} warm-up rounds; {net['peer_messages_sent']} shuffle messages"
        )
    print(
        f"events: {s['events']} broadcast, {s['events_delivered']} delivered; "
        f"deliveries: {s['deliveries']}"
        + (
            f" (+{s['out_of_order_deliveries']} out of order)"
            if s["out_of_order_deliveries"]
            else ""
        )
    )
    print(
        f"order violations: {s['order_violations']}, integrity violations: "
        f"{s['integrity_violations']}, holes: {s['holes']} "
        f"at {s['processes_with_holes']} processes"
    )
    print(
        f"validity: {s['validity_violations']} events of staying "
        f"{'members' if ring or atoms else 'processes'} not delivered by every one of them "
        f"({s['undelivered']} missing deliveries)"
    )
    print(
        f"delivery delay (ticks): p50 {fmt(d['p50'])}, p95 {fmt(d['p95'])}, "
        f"p99 {fmt(d['p99'])}, max {fmt(d['max'])}"
    )
    print(
        f"entries processed: {s['entries_processed']}, "
        f"{'messages' if ring or atoms else 'balls'} sent: {s['network']['sent']}, "
        f"virtual time {s['virtual_time']:.0f} ticks ({s['rounds_run']:.0f} rounds"
        f"{', stopped at the round limit' if s['settled'] == 'round-limit' else ''}), "
        f"wall {s['wall_seconds']:.1f} s"
    )
    cpu, peak = cost
    print(
        f"cost: CPU {cpu:.1f} s, peak RSS "
        + ("-" if peak is None else f"{peak:.0f} MB")
        + f" ({s['processes_total']} processes)"
    )
    if s["stalled_at"] is not None:
        print(
            f"STALLED at t = {s['stalled_at']!r}: no progress in virtual time "
            f"(more than {p['max_items_per_instant'] or 'the default bound of'} items at "
            "one instant; see --max-items-per-instant)"
        )
    if s["order_violations"] or s["integrity_violations"] or s["validity_violations"]:
        print(check_summary)
    print("verdict: " + ("ok" if s["ok"] else "FAILED: " + ", ".join(s["failures"])))


def _peak_rss_mb() -> float | None:
    """This process's peak resident set size in MB, None where unknown."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux counts kilobytes, macOS bytes.
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def _plot(delays: Any, path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = summary["parameters"]
    fig, ax = plt.subplots(figsize=(6, 4))
    engine = (
        f"token ring, k={p['k']}"
        if p.get("mode") == "token-ring"
        else f"{p['clock']} clock, K={p['fanout']}, TTL={p['ttl']}"
    )
    if delays:
        n = len(delays)
        ax.step(delays, [(i + 1) / n for i in range(n)], where="post")
    ax.set_title(f"Delivery delay: n={summary['processes']}, {engine}", fontsize=9)
    ax.set_xlabel("delivery delay (ticks)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
