"""Where one round of ``epto bench core`` spends its time, against the floor
of its merge: folding every copy into one dict.

    python scripts/core_round_anatomy.py --processes 100 10000

For each group size it runs the benchmark's ball model (``epto bench core``,
same seed), keeps the K balls of the last measured round, and times, in CPU
seconds per round (median of ``--repeat`` runs):

* ``round``: the benchmark's own figure (receive and the process's round),
  converted to time per round;
* ``merge``: :func:`epto.wire.merge_balls` on the kept balls, as the round
  calls it (the next ball, aged by one);
* ``fold``: only the fold inside it: each ttl's layers, from the highest,
  folded into one dict with ``|=`` (the order the merge needs, no layer cut,
  no bounds); the floor of any merge that keeps CPython dicts of the
  present ids;
* ``layers``: cutting the folded dict into the merged layers (what the merge
  adds to the fold);
* ``fold, int ids``: the same fold with every event id replaced by a
  distinct int (an interned id; the ints are allocated together, so this
  is an upper bound of what a different id representation would change).

The rest of the round (``round`` minus ``merge``) is the ordering component
and the receive calls.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from itertools import islice
from typing import Any


def _cpu(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def _fold(groups: list[list[Mapping[Any, Any]]]) -> tuple[dict[Any, Any], list[int]]:
    folded: dict[Any, Any] = {}
    cuts = []
    for group in groups:
        for layer in group:
            folded |= layer
        cuts.append(len(folded))
    return folded, cuts


def _cut(folded: dict[Any, Any], cuts: list[int]) -> None:
    items = iter(folded.items())
    start = 0
    for end in cuts:
        if end != start:
            dict(islice(items, end - start))
            start = end


def _last_round(n: int, seed: int) -> tuple[list[Any], float]:
    """The K balls of the last measured round of the benchmark's model, and
    the benchmark's copies per CPU second."""
    from epto.benchmarks import core
    from epto.epidemic import Process

    kept: dict[float, list[Any]] = {}
    receive = Process.receive

    def recording(self: Process, sender: Any, ball: Any, now: float) -> None:
        kept.setdefault(now, []).append(ball)
        receive(self, sender, ball, now)

    Process.receive = recording  # type: ignore[method-assign]
    try:
        figures = core.measure(
            n,
            rate=0.05,
            clock="logical",
            ordering="strict",
            copies_budget=10e6,
            max_rounds=200,
            seed=seed,
            ball_format="native",
        )
    finally:
        Process.receive = receive  # type: ignore[method-assign]
    return kept[max(kept)], figures["total_rate"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, nargs="+", default=[100, 10_000])
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    # The merge is internal: this script measures the core itself.
    from epto.epidemic._ball import merge_balls
    from epto.params import derive_parameters

    print(
        f"{'n':>6} {'copies':>8} {'round':>9} {'merge':>9} {'fold':>9} {'layers':>9} "
        f"{'int ids':>9} {'fold ns/copy':>12} {'fold/round':>10}"
    )
    for n in args.processes:
        balls, rate = _last_round(n, args.seed)
        relay_ttl = derive_parameters(n, clock="logical").ttl
        copies = sum(map(len, balls))
        layers = [ball.layers for ball in balls]
        top = min(relay_ttl - 1, max(max(each, default=0) for each in layers))
        groups = [[each[ttl] for each in layers if ttl in each] for ttl in range(top, -1, -1)]
        interned: dict[Any, int] = {}
        int_groups = [
            [
                {interned.setdefault(eid, 1 << 30 | len(interned)): ev for eid, ev in layer.items()}
                for layer in group
            ]
            for group in groups
        ]
        folded, cuts = _fold(groups)
        round_s = copies / rate
        merge_s = _cpu(partial(merge_balls, balls, relay_ttl, 1), args.repeat)
        fold_s = _cpu(partial(_fold, groups), args.repeat)
        cut_s = _cpu(partial(_cut, folded, cuts), args.repeat)
        int_s = _cpu(partial(_fold, int_groups), args.repeat)
        print(
            f"{n:>6} {copies:>8} {round_s * 1e3:>7.3f}ms {merge_s * 1e3:>7.3f}ms "
            f"{fold_s * 1e3:>7.3f}ms {cut_s * 1e3:>7.3f}ms {int_s * 1e3:>7.3f}ms "
            f"{fold_s / copies * 1e9:>12.1f} {fold_s / round_s:>10.0%}"
        )


if __name__ == "__main__":
    main()
