"""Argument types that refuse a value in the one line of the parser's error
(``argument --rounds: must be a positive integer, got 0``)."""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def peer_addresses(specs: list[str], flag: str, command: str) -> dict[int, str]:
    """``ID=HOST:PORT`` options (``--peer``, ``--contact``, ...) as a mapping;
    a malformed one stops ``command`` with one line."""
    out: dict[int, str] = {}
    for spec in specs:
        pid, sep, address = spec.partition("=")
        if not sep or not pid.isdigit():
            raise SystemExit(f"{command}: {flag} wants ID=HOST:PORT, got {spec!r}")
        out[int(pid)] = address
    return out
