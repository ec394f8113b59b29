"""A live group under an outsider's attack. Not a
test: it prints figures.

    .venv/bin/python scripts/hostile_live.py [--mode epto] [--mode token-ring]

Runs the scenario of tests/transports/test_hostile_processes.py once per mode:
three ``epto node`` OS processes on 127.0.0.1 broadcast and deliver, an
outsider (this process, id 666) attacks them (EpTO over UDP: one unsealed ball
with an event at ``ts = 2**64 - 1`` to member 1; token ring over TCP: a hello
and a ``Token`` claiming ``stable = 2**55`` to every member, and 500 idle
connections to member 1, kept open until the end), then every member
broadcasts again. Prints, for every member, its VmRSS (``/proc/PID/status``)
before and after the attack, how many deliveries after the attack were
compared and whether every member delivered them in the same sequence (and
nothing else); then what the outsider saw of its own connections. Figures
depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode",
        action="append",
        choices=("epto", "token-ring"),
        help="the modes to run (repeat; default both)",
    )
    args = parser.parse_args()
    # The scenario lives with its test (tests/transports is a package whose
    # helpers start and stop the node processes).
    sys.path.insert(0, str(ROOT / "tests"))
    from transports.test_hostile_processes import run_attack

    rows = []
    notes = []
    failed = False
    for mode in args.mode or ["epto", "token-ring"]:
        try:
            outcome = run_attack(mode, log=False)
        except AssertionError as exc:
            failed = True
            rows.append((mode, "-", "-", "-", "-", f"FAILED: {exc}"))
            continue
        same = "yes" if outcome.same_sequence() else "no"
        failed |= same == "no" or not all(m.running for m in outcome.members)
        for m in outcome.members:
            rows.append(
                (
                    mode,
                    str(m.pid) + ("" if m.running else " (exited)"),
                    f"{m.rss_before_kib / 1024:.1f}",
                    f"{m.rss_after_kib / 1024:.1f}",
                    str(len(m.after)),
                    same,
                )
            )
        if outcome.notes:
            notes.append(f"{mode}: " + ", ".join(f"{k}={v}" for k, v in outcome.notes.items()))
    header = (
        "mode",
        "member",
        "RSS before (MB)",
        "RSS after (MB)",
        "deliveries checked",
        "same sequence",
    )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for line in notes:
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
