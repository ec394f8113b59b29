"""What the unstable-window budget costs with large payloads, in the
virtual-time network.

    .venv/bin/python scripts/token_ring_window_cost.py

The scenario of tests/tokenring/test_tokenring_window.py: five members, the
last crashes at 0.5 s and is excluded by a full view change about 1 s later,
while the four others offer 200 messages of 4 KiB every 10 ms from 1.2 s to
1.8 s (link delays 1-3 ms). For each budget: delivery latency at the four
survivors, the last delivery, the largest consensus frame (Promise, Accept,
Decided) and how many of them could not be encoded in a 1 MiB frame.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tokenring"))

from test_tokenring_window import CRASH, _crash_under_large_bursts

from epto.tokenring import TokenRingConfig


def main() -> int:
    budgets = (
        ("none", attrs.evolve(CRASH, max_unstable_bytes=1 << 40, max_unstable_messages=1 << 20)),
        ("512 KiB (default)", CRASH),
        ("128 KiB", attrs.evolve(CRASH, max_unstable_bytes=128 * 1024)),
    )
    offered = None
    for name, cfg in budgets:
        assert isinstance(cfg, TokenRingConfig)
        cluster, audit = _crash_under_large_bursts(cfg)
        offered = len(cluster.broadcasts)
        lat = sorted(cluster.latencies(range(4)))
        last = max(max(v.values()) for v in cluster.delivered_at.values() if v)
        p50 = statistics.median(lat) * 1000
        p99 = lat[int(0.99 * len(lat))] * 1000
        print(
            f"budget {name}: {len(lat)} of {4 * offered} deliveries, latency p50 {p50:.0f} ms, "
            f"p99 {p99:.0f} ms, last at {last:.2f} s; largest consensus frame encoded "
            f"{audit.largest} bytes, {len(audit.failed)} not encodable in 1 MiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
