"""Run many random fault schedules of the token-ring tests and count violations.

    .venv/bin/python scripts/token_ring_schedules.py --seeds 0:200
    .venv/bin/python scripts/token_ring_schedules.py --seeds 1000:1100 --k 1
    .venv/bin/python scripts/token_ring_schedules.py --seeds 2000:2050 --members 10
    .venv/bin/python scripts/token_ring_schedules.py --seeds 0:200 --window-bytes 120

Each seed is one ``random_run`` of tests/tokenring/tokenring_scenarios.py
(three of: crash of the token holder, crash of any member, a flapping member,
a partition healed later, random link breaks, a join) in the virtual-time
network. Checked among the members that stay in the view: integrity and total
order (``epto.check.check``), identical sequences (joiners: a suffix), and
validity: every message of a staying bootstrap member was delivered by every
staying bootstrap member.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tokenring"))

from tokenring_scenarios import agreement_violations, random_run, staying_report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0:200", help="START:END (default 0:200)")
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--k", type=int, default=None)
    parser.add_argument(
        "--window-bytes",
        type=int,
        default=None,
        help="TokenRingConfig.max_unstable_bytes (default: the config's)",
    )
    args = parser.parse_args()
    start, end = (int(x) for x in args.seeds.split(":"))
    problems = 0
    wall = time.perf_counter()
    for seed in range(start, end):
        cluster = random_run(seed, n=args.members, k=args.k, window_bytes=args.window_bytes)
        found: list[str] = []
        report = staying_report(cluster)
        if not report.ok:
            found.append(report.summary())
        found += agreement_violations(cluster)
        staying = [p for p in cluster.staying_members() if p < 100]
        if not staying:
            found.append("nobody stayed")
        sent = [e for e in cluster.broadcasts if e[0] in staying]
        for p in staying:
            missing = set(sent) - set(cluster.delivered[p])
            if missing:
                found.append(f"process {p} missed {len(missing)} messages of staying sources")
        if found:
            problems += 1
            print(f"seed {seed}: " + "; ".join(found))
    runs = end - start
    print(
        f"{runs} schedules, {args.members} members, k={args.k or 'majority'}"
        f"{'' if args.window_bytes is None else f', window {args.window_bytes} bytes'}: "
        f"{problems} with a violation ({time.perf_counter() - wall:.0f} s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
