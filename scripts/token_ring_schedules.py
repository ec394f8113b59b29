"""Run many random fault schedules of the token ring and count violations.

    .venv/bin/python scripts/token_ring_schedules.py --adversarial --seeds 0:10000 --jobs 2
    .venv/bin/python scripts/token_ring_schedules.py --seeds 0:200
    .venv/bin/python scripts/token_ring_schedules.py --seeds 1000:1100 --k 1
    .venv/bin/python scripts/token_ring_schedules.py --seeds 2000:2050 --members 10
    .venv/bin/python scripts/token_ring_schedules.py --seeds 0:200 --window-bytes 120

``--adversarial`` runs ``adversarial_run`` of tests/tokenring/tokenring_scenarios.py:
every parameter drawn from the seed (3 to 9 members; link-break rates from 0
to 20%; the smallest log_retention in one run of three; the token holder cut
off while it holds unsequenced messages and returned before exclude_timeout,
a second configuration change, holder crashes, crashes, a flapping member,
partitions, scripted link breaks, joins). Checked by ``campaign_violations``:
order and integrity at every process that ever ran; agreement and validity
(every message of a member that stays in the view delivered by every such
member) among the members that stay, while a majority of the view does.

Without it, each seed is one ``random_run`` (three of: crash of the token
holder, crash of any member, a flapping member, a partition healed later,
random link breaks, a join) with the same checks among the members that stay.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tokenring"))

from tokenring_scenarios import (
    adversarial_run,
    agreement_violations,
    campaign_violations,
    random_run,
    staying_report,
)


def _adversarial(seeds: range) -> tuple[int, list[str]]:
    lines = []
    for seed in seeds:
        cluster, params = adversarial_run(seed)
        found = campaign_violations(cluster)
        if found:
            lines.append(f"seed {seed} {params}: " + "; ".join(found))
    return len(seeds), lines


def _classic(seeds: range, members: int, k: int | None, window: int | None) -> list[str]:
    lines = []
    for seed in seeds:
        cluster = random_run(seed, n=members, k=k, window_bytes=window)
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
            lines.append(f"seed {seed}: " + "; ".join(found))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0:200", help="START:END (default 0:200)")
    parser.add_argument("--adversarial", action="store_true", help="the drawn schedules")
    parser.add_argument("--jobs", type=int, default=1, help="processes (--adversarial)")
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
    wall = time.perf_counter()
    if args.adversarial:
        chunks = [range(s, min(s + 50, end)) for s in range(start, end, 50)]
        lines = []
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for _, found in pool.map(_adversarial, chunks):
                for line in found:
                    print(line, flush=True)
                lines += found
        what = "adversarial schedules"
    else:
        lines = _classic(range(start, end), args.members, args.k, args.window_bytes)
        for line in lines:
            print(line)
        what = (
            f"schedules, {args.members} members, k={args.k or 'majority'}"
            f"{'' if args.window_bytes is None else f', window {args.window_bytes} bytes'}"
        )
    print(
        f"{end - start} {what}: {len(lines)} with a violation ({time.perf_counter() - wall:.0f} s)"
    )
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
