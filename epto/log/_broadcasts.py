"""The broadcast manifest: which events were really broadcast, and when.

A log directory may hold ``broadcasts.csv`` beside the node directories, with
the header ``source,seq,broadcast_at`` and one line per broadcast event
(``broadcast_at`` in microseconds, or empty when unknown). When it exists, the
checkers report delivered events missing from it as never broadcast, and use
its times for delivery delays of records that carry none.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from pathlib import Path

from .._event import EventId

MANIFEST = "broadcasts.csv"


def write_broadcasts(
    root: str | os.PathLike[str], rows: Iterable[tuple[int, int, int | None]]
) -> Path:
    """Write ``(source, seq, broadcast_at)`` rows to ``root/broadcasts.csv``
    (through a temporary file and a rename, so readers see all or nothing)."""
    path = Path(root) / MANIFEST
    tmp = path.with_suffix(".csv.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(("source", "seq", "broadcast_at"))
        for source, seq, at in rows:
            out.writerow((source, seq, "" if at is None else at))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_broadcasts(root: str | os.PathLike[str]) -> dict[EventId, int | None] | None:
    """The manifest as ``{(source, seq): broadcast_at}``, or ``None`` without one."""
    path = Path(root) / MANIFEST
    if not path.exists():
        return None
    out: dict[EventId, int | None] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            at = row["broadcast_at"]
            out[(int(row["source"]), int(row["seq"]))] = int(at) if at else None
    return out
