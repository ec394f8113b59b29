"""Checking a directory of delivery logs in this process, with :func:`epto.check.check`.

For logs that fit in memory; ``epto analyze`` does the same on Spark.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from .._delivery_check import check
from .._event import EventId
from ._broadcasts import read_broadcasts
from ._reader import LogGapError, extent_loss, iter_raw, list_nodes, node_directory
from ._segment import FLAG_HAS_BROADCAST, FLAG_OUT_OF_ORDER
from ._summary import (
    HISTOGRAM_BINS,
    histogram_edges,
    holes_section,
    integrity_section,
    nearest_rank,
    order_section,
    summary,
    validity_section,
)


def data_loss(root: str | os.PathLike[str]) -> LogGapError | None:
    """The first data loss that the extents of ``root``'s logs show (see
    :func:`~epto.log._reader.extent_loss`), or None; reads each node's last
    segment only. ``epto check`` finds the same (and gaps in the middle) while
    reading every record; ``epto analyze`` asks this before Spark reads, and
    Spark's reader finds the gaps in the middle."""
    for node in list_nodes(root):
        loss = extent_loss(node_directory(root, node))
        if loss is not None:
            return loss
    return None


def check_logs(root: str | os.PathLike[str]) -> tuple[dict[str, Any], list[tuple[float, int]]]:
    """The summary of ``root``'s logs and the delay histogram ``[(left edge ms, count)]``.

    Total order is judged on in-order deliveries (out-of-order ones are outside
    the order by definition); integrity and holes on all deliveries. Raises
    :class:`LogGapError` on data loss, first the loss the extents show (as
    ``epto analyze`` does, so both say the same), then any other while reading.
    """
    loss = data_loss(root)
    if loss is not None:
        raise loss
    manifest = read_broadcasts(root)
    everything: dict[int, list[EventId]] = {}
    in_order: dict[int, list[EventId]] = {}
    delays: list[float] = []
    out_of_order = 0
    for node in list_nodes(root):
        seq_all = everything[node] = []
        seq_in = in_order[node] = []
        for _, source, seq, _, delivered, broadcast, flags, _, _ in iter_raw(
            node_directory(root, node)
        ):
            eid = (source, seq)
            seq_all.append(eid)
            if flags & FLAG_OUT_OF_ORDER:
                out_of_order += 1
            else:
                seq_in.append(eid)
            sent = broadcast if flags & FLAG_HAS_BROADCAST else None
            if sent is None and manifest is not None:
                sent = manifest.get(eid)
            if sent is not None:
                delays.append((delivered - sent) / 1000.0)
    report = check(everything, broadcast=None if manifest is None else manifest.keys())
    order = report if not out_of_order else check(in_order)
    kinds = Counter((v.kind, v.process, v.event) for v in report.integrity_violations)
    duplicates = sum(c for (k, _, _), c in kinds.items() if k == "duplicate")
    never = None if manifest is None else sum(1 for k, _, _ in kinds if k == "never-broadcast")
    s = summary(
        root=str(root),
        nodes=report.processes,
        deliveries=report.deliveries,
        events=report.events,
        out_of_order=out_of_order,
        order=order_section(order.order_violations),
        integrity=integrity_section(
            ((k, n, e, c) for (k, n, e), c in kinds.items()),
            duplicates=duplicates,
            never_broadcast=never,
        ),
        holes=holes_section(report.holes, report.missing_sample),
        delay_ms=None,
        engine="python",
        validity=validity_section(
            None if manifest is None else manifest.keys(),
            (e for seq in everything.values() for e in seq),
        ),
    )
    histogram: list[tuple[float, int]] = []
    if delays:
        delays.sort()
        n = len(delays)
        s["delay_ms"] = {
            "count": n,
            "mean": sum(delays) / n,
            "min": delays[0],
            "p50": nearest_rank(delays, 0.5),
            "p90": nearest_rank(delays, 0.9),
            "p99": nearest_rank(delays, 0.99),
            "max": delays[-1],
        }
        lo, width = histogram_edges(delays[0], delays[-1])
        counts = Counter(min(int((d - lo) / width), HISTOGRAM_BINS - 1) for d in delays)
        histogram = [(lo + b * width, counts[b]) for b in sorted(counts)]
    return s, histogram
