"""The ``epto`` command line.

Every sub-command lives in its own module ``epto.cli._<name>`` that exposes
``register(subparsers)``; it adds its parser and sets ``func`` to a callable
taking the parsed arguments and returning the exit status. Heavy imports
(Spark, trio, zmq) happen inside ``func`` so that ``epto --help`` stays fast.
A wrong option is reported in one line (``epto simulate: error: ... (see
'epto simulate --help')``), not after a usage message of twenty lines.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

# One line per sub-command module; order is the order of ``epto --help``.
_COMMANDS = (
    "demo",
    "params",
    "bench",
    "simulate",
    "keygen",
    "check",
    "analyze",
    "sweep",
    "node",
    "editor",
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line that points to ``--help``
    (sub-command parsers are of the same class), and which records in the
    parsed arguments which command parsed them (``command_prog``: a string,
    so that the arguments still pickle for a benchmark's worker processes)."""

    def error(self, message: str) -> NoReturn:
        _fail(self.prog, message)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        # A sub-command's parser returns before the parsers around it: the
        # innermost one records itself first and is kept.
        if getattr(parsed, "command_prog", None) is None:
            parsed.command_prog = self.prog
        return parsed, extra


def _fail(prog: str, message: str) -> NoReturn:
    """Exit with status 2 after one line: what ``prog`` says is wrong."""
    print(f"{prog}: error: {message} (see '{prog} --help')", file=sys.stderr)
    raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="epto",
        description="Total-order broadcast: simulate, run, check and analyse EpTO groups.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        module = importlib.import_module(f"epto.cli._{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if os.environ.get("EPTO_PURE_PYTHON"):
        # The Python build of the compiled parts (a comparison, a check).
        from epto.epidemic import _fold

        _fold.select("python")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Said by the sub-command's parser, which knows the options it lacks.
        _fail(args.command_prog, f"unrecognized arguments: {' '.join(extra)}")
    from epto import ConfigurationError

    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except ConfigurationError as exc:
        # A value out of range that the command did not catch itself (a
        # benchmark's group of one process, say): one line, like the parser's.
        print(f"{args.command_prog}: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
