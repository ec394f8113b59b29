"""``epto analyze LOGDIR``: the delivery-log analysis on Spark."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "analyze",
        help="verify and measure delivery logs on Spark (local or a cluster)",
        description=(
            "Verify total order, integrity and agreement of a directory of delivery logs and "
            "measure delivery delays on Apache Spark: local[2] bound to 127.0.0.1 by default, "
            "a cluster with --master. Exit status 0 when safety holds, 1 when it is violated, "
            "2 when the logs cannot be read (no such directory, no node's log in it, data "
            "loss, damaged records, logs the executors cannot see). Data loss is found as "
            "epto check finds it (a log that does not start at index 0 or ends before the "
            "end its manifest recorded as durable, before Spark starts; a missing segment in "
            "the middle, while Spark reads) and said in the same line."
        ),
    )
    p.add_argument("logdir", help="directory holding one log directory per node")
    p.add_argument("--master", help="Spark master URL (default: local[2] in this process)")
    p.add_argument("--out", help="directory for summary.json and analysis.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


CANNOT_READ = 2
"""Exit status when the logs cannot be read (1 is "safety violated")."""
LOSS_KINDS = frozenset({"LogGapError", "LogTailLostError", "DataLossError"})
"""The errors that mean data loss, whichever reader raised them."""


def run(args: argparse.Namespace) -> int:
    from ._files import path_problem

    if not os.path.isdir(args.logdir):
        print(f"epto analyze: {args.logdir} is not a directory", file=sys.stderr)
        return CANNOT_READ
    line = path_problem("epto analyze", args, directories=("--out",))  # before Spark
    if line is not None:
        print(line, file=sys.stderr)
        return CANNOT_READ  # 1 says that safety is violated
    from epto.log import list_nodes

    if not list_nodes(args.logdir):
        # Nothing to judge is not a verdict (as epto check), and Spark need not start.
        print(
            f"epto analyze: no delivery logs in {args.logdir} (one sub-directory per node)",
            file=sys.stderr,
        )
        return CANNOT_READ
    from pyspark.errors import PySparkException

    from epto import EptoError
    from epto.spark._analyze import analyze, main_text

    from ._check import loss_text

    try:
        result = analyze(args.logdir, master=args.master, out=args.out)
    except (EptoError, OSError, PySparkException) as exc:
        lost = loss_message(exc)
        if lost is not None:
            # The same line as epto check's.
            print(f"epto analyze: {loss_text(lost)}", file=sys.stderr)
        else:
            print(f"epto analyze: cannot read {args.logdir}: {reason(exc)}", file=sys.stderr)
        return CANNOT_READ
    if not result["nodes"]:
        # Nothing to judge is not a verdict: a wrong path must not read "ok".
        print(
            f"epto analyze: no delivery logs in {args.logdir} (one sub-directory per node)",
            file=sys.stderr,
        )
        return CANNOT_READ
    print(json.dumps(result, sort_keys=True) if args.json else main_text(result))
    return 0 if result["ok"] else 1


def loss_message(exc: BaseException) -> str | None:
    """What is lost, when ``exc`` is a data loss (raised here, by the JVM
    reader, or inside a Python worker, where Spark wraps it in its own
    error); else None."""
    if type(exc).__name__ in LOSS_KINDS:
        return re.sub(r"^epto\.spark\.jvm\.\w+: ", "", str(exc))
    kind, _, message = reason(exc).partition(": ")
    return message if kind in LOSS_KINDS else None


def reason(exc: BaseException) -> str:
    """The epto error inside a Spark error (Spark wraps the Python worker's
    traceback in its own message), else the message's first line."""
    text = str(exc)
    found = re.findall(r"epto\.[\w.]*?(\w+Error): (.+)", text)
    if found:
        kind, message = found[-1]
        return f"{kind}: {message.strip()}"[:500]
    return (text.strip().splitlines() or [type(exc).__name__])[0][:500]
