"""Figures for sequencing-atom groups that change at run time (docs/atoms.md,
"Groups that change at run time"): the seeded runs of
``tests/atoms/test_changes.py`` (12 nodes, 5 Zipf groups, 160 publications
over 1000 time units on FIFO links of 1-50 units), many seeds, with changes
only and with a sequencing machine crashed and replaced; every run passes the
test's verdict (pairwise order, nothing stuck, every message delivered to
every live member unless its path crossed the crashed node, no live node
suspected)::

    python scripts/atoms_changes_figures.py --seeds 200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "atoms"))

import test_changes as harness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    for crash, detector in ((False, False), (True, False), (True, True)):
        runs = messages = deliveries = touched = lost = dropped = epochs = 0
        for seed in range(args.seeds):
            changes = seed % 3 if crash else 1 + seed % 4
            run = harness._simulate(seed, changes=changes, crash=crash, detector=detector)
            _, lost_here = harness._verdict(run)
            runs += 1
            messages += len(run.addressed)
            deliveries += sum(len(s) for p, s in run.sequences.items() if p not in run.down)
            touched += sum(1 for e in run.addressed if run.places[e] & run.down)
            lost += lost_here
            dropped += sum(
                proc.statistics().dropped for p, proc in run.procs.items() if p not in run.down
            )
            epochs += run.procs[0].epoch
        what = "1-4 changes"
        if crash:
            found = "found by heartbeats" if detector else "declared 20-150 units later"
            what = f"a crashed sequencing machine ({found}), 0-2 changes"
        print(
            f"{what}: {runs} runs, {epochs} epochs, {messages} messages, "
            f"{deliveries} deliveries; messages whose path crossed the crashed node "
            f"{touched}, lost at some live member {lost} ({100 * lost / messages:.1f} % "
            f"of all); sends dropped toward the crashed node {dropped}; every run: "
            "0 pairwise violations, nothing stuck"
        )


if __name__ == "__main__":
    main()
