"""The shape of an analysis summary, shared by ``epto check`` and ``epto analyze``.

Both tools produce the same JSON object; only ``delay_ms`` percentiles may
differ slightly (Spark computes them with ``percentile_approx``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._delivery_check import OrderViolation
from .._event import EventId

HISTOGRAM_BINS = 50
EXAMPLES = 100


def order_section(violations: Sequence[OrderViolation], **stats: int) -> dict[str, Any]:
    return {
        "ok": not violations,
        "violations": [
            {
                "cycle": [list(e) for e in v.cycle],
                "witnesses": list(v.witnesses),
                "text": v.describe(),
            }
            for v in violations[:EXAMPLES]
        ],
        "violation_count": len(violations),
        **stats,
    }


def integrity_section(
    found: Iterable[tuple[str, int, EventId, int]], *, duplicates: int, never_broadcast: int | None
) -> dict[str, Any]:
    """``found``: ``(kind, node, event, count)`` per offending (node, event)."""
    examples = sorted(found)[:EXAMPLES]
    return {
        "ok": duplicates == 0 and not never_broadcast,
        "duplicates": duplicates,
        "never_broadcast": never_broadcast,
        "violations": [
            {"kind": k, "node": n, "event": list(e), "count": c} for k, n, e, c in examples
        ],
    }


def holes_section(
    holes: Mapping[int, int], missing: Mapping[int, Sequence[EventId]]
) -> dict[str, Any]:
    return {
        "total": sum(holes.values()),
        "processes_with_holes": sum(1 for h in holes.values() if h),
        "per_node": {str(n): holes[n] for n in sorted(holes)},
        "missing_sample": {str(n): [list(e) for e in missing[n]] for n in sorted(missing)},
    }


def validity_section(
    broadcast: Iterable[EventId] | None, delivered: Iterable[EventId]
) -> dict[str, Any] | None:
    """Events of the broadcast manifest that no node delivered (``None``
    without a manifest). Holes count only events delivered somewhere, so
    these would otherwise go unreported. Who stayed in the group is not in the
    logs, so they are reported, not judged: an event whose source crashed at
    once may rightly be delivered by nobody."""
    if broadcast is None:
        return None
    seen = set(delivered)
    missing = sorted(e for e in broadcast if e not in seen)
    return {
        "undelivered_events": len(missing),
        "undelivered_sample": [list(e) for e in missing[:EXAMPLES]],
    }


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def histogram_edges(lo: float, hi: float) -> tuple[float, float]:
    """``(lo, width)`` of :data:`HISTOGRAM_BINS` equal bins covering [lo, hi]."""
    width = (hi - lo) / HISTOGRAM_BINS
    return lo, width if width > 0 else 1.0


def summary(
    *,
    root: str,
    nodes: int,
    deliveries: int,
    events: int,
    out_of_order: int,
    order: dict[str, Any],
    integrity: dict[str, Any],
    holes: dict[str, Any],
    delay_ms: dict[str, Any] | None,
    engine: str,
    validity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "logdir": root,
        "engine": engine,
        "ok": bool(order["ok"] and integrity["ok"]),
        "nodes": nodes,
        "deliveries": deliveries,
        "events": events,
        "out_of_order_deliveries": out_of_order,
        "order": order,
        "integrity": integrity,
        "holes": holes,
        "validity": validity,
        "delay_ms": delay_ms,
    }


def verdict_text(s: Mapping[str, Any]) -> str:
    never = s["integrity"]["never_broadcast"]
    lines = [
        f"{s['nodes']} nodes, {s['deliveries']} deliveries of {s['events']} events "
        f"({s['out_of_order_deliveries']} out of order)",
        f"total order: {'ok' if s['order']['ok'] else 'VIOLATED'} "
        f"({s['order']['violation_count']} cycles)",
        f"integrity: {'ok' if s['integrity']['ok'] else 'VIOLATED'} "
        f"({s['integrity']['duplicates']} duplicates, never broadcast: "
        f"{'unknown' if never is None else never})",
        f"holes: {s['holes']['total']} at {s['holes']['processes_with_holes']} processes",
    ]
    validity = s.get("validity")
    if validity is not None:
        sample = ", ".join(f"({a}, {b})" for a, b in validity["undelivered_sample"][:10])
        lines.append(
            f"broadcast but delivered by no node: {validity['undelivered_events']} events"
            + (
                f" ({sample}{' ...' if validity['undelivered_events'] > 10 else ''})"
                if sample
                else ""
            )
        )
    lines += [f"  order: {v['text']}" for v in s["order"]["violations"][:10]]
    lines += [
        f"  integrity: {v['kind']} ({v['event'][0]}, {v['event'][1]}) at node {v['node']}"
        + (f" x{v['count']}" if v["count"] > 1 else "")
        for v in s["integrity"]["violations"][:10]
    ]
    d = s["delay_ms"]
    if d:
        lines.append(
            f"delivery delay (ms): p50 {d['p50']:.3f}, p90 {d['p90']:.3f}, "
            f"p99 {d['p99']:.3f}, max {d['max']:.3f} over {d['count']} deliveries"
        )
    else:
        lines.append("delivery delay: no broadcast times in the logs")
    return "\n".join(lines)


def write_outputs(
    s: dict[str, Any],
    out: str | os.PathLike[str],
    *,
    histogram: Sequence[tuple[float, int]] = (),
    plot: bool = True,
) -> list[Path]:
    """``summary.json`` and, when matplotlib is installed, ``analysis.png``."""
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    written = [base / "summary.json"]
    written[0].write_text(json.dumps(s, indent=2, sort_keys=True) + "\n")
    if plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return written
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        if histogram:
            width = histogram[1][0] - histogram[0][0] if len(histogram) > 1 else 1.0
            left.bar(
                [x for x, _ in histogram], [c for _, c in histogram], width=width, align="edge"
            )
            left.set_xlabel("delivery delay (ms)")
            left.set_ylabel("deliveries")
        else:
            left.text(0.5, 0.5, "no broadcast times", ha="center", va="center")
        left.set_title("Delivery delay")
        holes = s["holes"]["per_node"]
        nodes = sorted(int(n) for n in holes)
        right.bar(range(len(nodes)), [holes[str(n)] for n in nodes], width=1.0)
        right.set_xlabel("node (sorted by id)")
        right.set_ylabel("holes")
        right.set_title(f"Holes per process (total {s['holes']['total']})")
        verdict = "ok" if s["ok"] else "VIOLATED"
        fig.suptitle(f"{s['logdir']}: safety {verdict}, {s['deliveries']} deliveries")
        fig.tight_layout()
        png = base / "analysis.png"
        fig.savefig(png, dpi=100)
        plt.close(fig)
        written.append(png)
    return written
