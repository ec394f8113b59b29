"""``epto sweep CONFIGS.json``: independent seeded simulations on Spark."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "sweep",
        help="run a grid of simulations on Spark (local or a cluster)",
        description=(
            "Run every simulation of CONFIGS.json (a list of epto simulate parameters as "
            'SimulationSpec fields, or {"axes": {field: [values]}, "fixed": {field: value}} '
            "for a grid) as independent tasks on Apache Spark: local[2] by default, a "
            "cluster with --master (its workers need epto). Prints one line per run; exit "
            "status 1 if any run violated integrity or total order, 2 for bad input."
        ),
    )
    p.add_argument("configs", help="JSON file of configurations")
    p.add_argument("--master", help="Spark master URL (default: local[2] in this process)")
    p.add_argument("--out", help="write the results (a JSON list, in input order) here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError
    from epto.spark._sweep import load_configs, sweep
    from epto.transports.simulation import SimulationSpec

    try:
        configs = load_configs(Path(args.configs).read_text())
        for config in configs:
            SimulationSpec(**config).validate()  # refuse a bad grid before Spark starts
    except (OSError, ValueError, TypeError, ConfigurationError) as exc:
        print(f"epto sweep: {args.configs}: {exc}", file=sys.stderr)
        return 2
    start = time.monotonic()
    results = sweep(configs, master=args.master)
    wall = time.monotonic() - start
    unsafe = 0
    for i, (config, result) in enumerate(zip(configs, results, strict=True)):
        bad = result["order_violations"] + result["integrity_violations"]
        unsafe += bad > 0
        print(
            f"{i:4d} {json.dumps(config, sort_keys=True)}: {result['events_delivered']} of "
            f"{result['events']} events delivered, holes {result['holes']}, violations {bad}, "
            f"delay p50 {result['delay']['p50']}, {result['cpu_seconds']:.2f} s CPU"
        )
    cpu = sum(r["cpu_seconds"] for r in results)
    print(f"{len(results)} simulations, {cpu:.1f} s of CPU in {wall:.1f} s of wall time")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True))
    return 1 if unsafe else 0
