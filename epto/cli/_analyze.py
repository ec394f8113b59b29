"""``epto analyze LOGDIR``: the delivery-log analysis on Spark."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "analyze",
        help="verify and measure delivery logs on Spark (local or a cluster)",
        description=(
            "Verify total order, integrity and agreement of a directory of delivery logs and "
            "measure delivery delays on Apache Spark: local[2] bound to 127.0.0.1 by default, "
            "a cluster with --master. Exit status 0 when safety holds, 1 when it is violated."
        ),
    )
    p.add_argument("logdir", help="directory holding one log directory per node")
    p.add_argument("--master", help="Spark master URL (default: local[2] in this process)")
    p.add_argument("--out", help="directory for summary.json and analysis.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.logdir):
        print(f"epto analyze: {args.logdir} is not a directory", file=sys.stderr)
        return 2
    from epto.log import list_nodes

    if not list_nodes(args.logdir):
        # Nothing to judge is not a verdict (as epto check), and Spark need not start.
        print(
            f"epto analyze: no delivery logs in {args.logdir} (one sub-directory per node)",
            file=sys.stderr,
        )
        return 2
    from epto.spark._analyze import analyze, main_text

    result = analyze(args.logdir, master=args.master, out=args.out)
    print(json.dumps(result, sort_keys=True) if args.json else main_text(result))
    return 0 if result["ok"] else 1
