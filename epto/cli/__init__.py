"""The ``epto`` command line.

Every sub-command lives in its own module ``epto.cli._<name>`` that exposes
``register(subparsers)``; it adds its parser and sets ``func`` to a callable
taking the parsed arguments and returning the exit status. Heavy imports
(Spark, trio, zmq) happen inside ``func`` so that ``epto --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# One line per sub-command module; order is the order of ``epto --help``.
_COMMANDS = (
    "demo",
    "params",
    "bench",
    "simulate",
    "keygen",
    "check",
    "analyze",
    "node",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epto",
        description="Total-order broadcast: simulate, run, check and analyse EpTO groups.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        module = importlib.import_module(f"epto.cli._{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
