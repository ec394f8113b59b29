"""``epto check LOGDIR``: total order, integrity and holes of delivery logs, in Python."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check",
        help="verify delivery logs in this process (small logs; see 'analyze' for Spark)",
        description=(
            "Verify total order, integrity and agreement of a directory of delivery logs "
            "(one sub-directory per node) with epto.check, in memory. With the manifest "
            "broadcasts.csv, also report the broadcast events no node delivered (holes "
            "count only events delivered somewhere; who stayed in the group is not in the "
            "logs, so these are reported, not judged). Exit status 0 when safety holds, 1 "
            "when it is violated, 2 when there are no logs to check or they cannot be read: "
            "no such directory, no node's log in it, damaged, or data loss "
            "(a missing segment, or a log that ends before the end its manifest recorded "
            "as durable)."
        ),
    )
    p.add_argument("logdir", help="directory holding one log directory per node")
    p.add_argument("--out", help="directory for summary.json and analysis.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


DATA_LOSS_SUFFIX = " (set failOnDataLoss=false to skip)"
"""What the Spark reader adds to a data loss; an option of reads, not of the checks."""


def loss_text(message: str) -> str:
    """The line of ``epto check`` and ``epto analyze`` for a data loss:
    ``data loss: PATH: what is missing`` (a lost tail's message already says
    ``data loss``)."""
    message = message.removesuffix(DATA_LOSS_SUFFIX)
    return message if "data loss" in message else f"data loss: {message}"


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from epto.log import LogCorruptError, LogGapError, check_logs
    from epto.log._summary import verdict_text, write_outputs

    from ._files import path_problem

    if not Path(args.logdir).is_dir():
        print(f"epto check: no such directory: {args.logdir}", file=sys.stderr)
        return 2
    line = path_problem("epto check", args, directories=("--out",))
    if line is not None:
        print(line, file=sys.stderr)
        return 2  # 1 says that safety is violated
    try:
        result, histogram = check_logs(args.logdir)
    except LogGapError as exc:
        print(f"epto check: {loss_text(str(exc))}", file=sys.stderr)
        return 2
    except (LogCorruptError, OSError) as exc:
        print(f"epto check: {exc}", file=sys.stderr)
        return 2
    if not result["nodes"]:
        # Nothing to judge is not a verdict: a wrong path must not read "ok".
        print(
            f"epto check: no delivery logs in {args.logdir} (one sub-directory per node)",
            file=sys.stderr,
        )
        return 2
    if args.out:
        write_outputs(result, args.out, histogram=histogram)
    print(json.dumps(result, sort_keys=True) if args.json else verdict_text(result))
    return 0 if result["ok"] else 1
