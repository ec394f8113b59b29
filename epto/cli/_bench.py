"""``epto bench TOPIC``: benchmarks that print figures."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

# One line per benchmark module in epto/benchmarks/.
_TOPICS: tuple[str, ...] = (
    "core",
    "cyclon",
    "churn",
    "wire",
    "spark",
    "udp_scale",
    "replication",
    "optimistic",
    "rsm",
    "rsm_transfer",
    "recovery",
    "faults",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="benchmarks that print throughput and latency figures",
        description="Run a benchmark and print its figures.",
    )
    topics = p.add_subparsers(dest="topic", metavar="TOPIC", required=True)
    for name in _TOPICS:
        module = importlib.import_module(f"epto.benchmarks.{name}")
        doc = (module.__doc__ or name).strip().splitlines()[0]
        tp = topics.add_parser(name, help=doc, description=doc)
        module.add_arguments(tp)
        tp.set_defaults(func=module.run)
