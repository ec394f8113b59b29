"""``epto params``: fanout and TTL for a group."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from .._defaults import DEFAULT_C, DEFAULT_CLOCK


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "params",
        help="fanout and TTL from the EpTO paper's lemmas",
        description="Fanout K and TTL for a group of N processes (EpTO paper, Lemmas 3-7).",
    )
    p.add_argument("--n", type=int, required=True, help="number of processes")
    p.add_argument(
        "--c", type=float, default=DEFAULT_C, help=f"safety constant, > 1 (default {DEFAULT_C:g})"
    )
    p.add_argument(
        "--clock",
        choices=("logical", "global"),
        default=DEFAULT_CLOCK,
        help=f"EpTO's clock (default {DEFAULT_CLOCK}, as epto node and epto.Config)",
    )
    p.add_argument("--churn", type=float, default=0.0, help="processes replaced per round")
    p.add_argument("--loss", type=float, default=0.0, help="message loss rate in [0, 1)")
    p.add_argument("--drift", type=float, default=1.0, help="ratio of longest to shortest round")
    p.add_argument(
        "--bounded-latency",
        action="store_true",
        help="latency is below the round length (Lemma 6: one more round)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError
    from epto.params import derive_parameters

    try:
        p = derive_parameters(
            args.n,
            c=args.c,
            clock=args.clock,
            churn=args.churn,
            loss=args.loss,
            drift=args.drift,
            bounded_latency=args.bounded_latency,
        )
    except ConfigurationError as exc:
        print(f"epto params: {exc}", file=sys.stderr)
        return 2
    if args.json:
        data = p.as_dict()
        if math.isinf(p.fanout_uncapped):
            data["fanout_uncapped"] = None
        print(json.dumps(data, sort_keys=True))
    else:
        capped = " (capped at n-1)" if p.fanout < p.fanout_uncapped else ""
        print(f"n={p.n} c={p.c:g} clock={p.clock}: fanout {p.fanout}{capped}, TTL {p.ttl}")
    return 0
