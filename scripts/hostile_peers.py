"""Long seeded hostile-peer runs for both engines (docs/security.md, rows 7 and 17).

    .venv/bin/python scripts/hostile_peers.py [--seeds 100:110] [--steps 20000]

Each seed runs the scenario of tests/tokenring/test_tokenring_hostile.py
(a 3-member token ring, one hostile message from an outsider every 0.5 ms)
and of tests/test_hostile_epto.py (5 EpTO processes, one hostile ball every
tenth of a round), with ``--steps`` hostile messages, and prints how many
runs broke a promise: for the token ring, one sequence at every member,
every honest broadcast delivered, no configuration change; for EpTO, order
and integrity of the members' events and no event delivered twice, with the
holes the attack cost.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tokenring"))

from test_hostile_epto import hostile_run as epto_run
from test_tokenring_hostile import MEMBERS
from test_tokenring_hostile import hostile_run as ring_run

from epto.check import check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="100:110", help="START:END")
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    start, end = (int(x) for x in args.seeds.split(":"))
    failed = 0

    wall, sent, broken = time.perf_counter(), 0, 0
    for seed in range(start, end):
        cluster, n = ring_run(seed, args.steps)
        sent += n
        ok = (
            all(cluster.delivered[p] == cluster.delivered[0] for p in MEMBERS)
            and len(cluster.delivered[0]) == len(cluster.broadcasts)
            and all(cluster.procs[p].config.members == MEMBERS for p in MEMBERS)
        )
        broken += not ok
    print(
        f"token ring: {sent} hostile messages over {end - start} seeds, "
        f"{broken} runs broke a promise ({time.perf_counter() - wall:.0f} s)"
    )
    failed += broken

    wall, sent, broken, holes, deliveries = time.perf_counter(), 0, 0, 0, 0
    for seed in range(start, end):
        cluster, n = epto_run(seed, args.steps)
        sent += n
        honest = set(cluster.broadcasts)
        sequences = cluster.recorder.sequences
        members = check({p: [e for e in s if e in honest] for p, s in sequences.items()})
        ok = not members.order_violations and not check(sequences).integrity_violations
        broken += not ok
        holes += sum(len(honest - set(s)) for s in sequences.values())
        deliveries += len(honest) * len(sequences)
    print(
        f"epto: {sent} hostile balls over {end - start} seeds, {broken} runs broke order or "
        f"integrity, {holes} holes in {deliveries} honest deliveries "
        f"({time.perf_counter() - wall:.0f} s)"
    )
    failed += broken
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
