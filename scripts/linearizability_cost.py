"""What epto.check.check_linearizable costs on histories like a fault suite's.

    python scripts/linearizability_cost.py
    python scripts/linearizability_cost.py --operations 3000 --keys 5 --clients 5 --info 0.02

Builds a register history by executing random operations (writes, reads,
cas; every written value distinct) at random linearization points inside
random intervals: ``--clients`` clients, each issuing one operation at a
time on a random one of ``--keys`` keys, with overlapping intervals; a
fraction ``--info`` of the operations is indeterminate (took effect late, or
never) and about one in fifty failed. Printed for that history (accepted),
then for the same history with the last read of one key given a value that
key never held (rejected): the verdict, the configurations explored and the
CPU time of the check.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from epto.check import HistoryOp, check_linearizable


def build(
    rng: random.Random, operations: int, keys: int, clients: int, info: float, latency: float
) -> list[HistoryOp]:
    names = [f"k{i}" for i in range(keys)]
    clock = [0.0] * clients
    planned = []
    for n in range(operations):
        client = rng.randrange(clients)
        invoked = clock[client] + rng.uniform(0.0, 1.0)
        completed = invoked + rng.expovariate(1.0 / latency)
        clock[client] = completed
        roll = rng.random()
        status = "info" if roll < info else "fail" if roll < info + 0.02 else "ok"
        if status == "ok":
            point: float | None = rng.uniform(invoked, completed)
        elif status == "info" and rng.random() < 0.5:
            point = invoked + rng.expovariate(0.2)  # took effect, maybe long after
        else:
            point = None
        kind = rng.choice(["write", "read", "read", "cas"])
        planned.append((point, n, client, rng.choice(names), kind, status, invoked, completed))
    state: dict[str, Any] = {}
    outcome: dict[int, tuple[Any, Any]] = {}
    timeline = sorted(planned, key=lambda p: (p[0] is None, p[0], p[1]))
    for value, (point, n, _, key, kind, _, _, _) in enumerate(timeline, start=1):
        current = state.get(key)
        if point is None:  # never took effect
            outcome[n] = ((-1, -value) if kind == "cas" else -value, None)
        elif kind == "read":
            outcome[n] = (None, current)
        elif kind == "write":
            state[key] = value
            outcome[n] = (value, None)
        else:
            expected = current if rng.random() < 0.5 else -1
            if current == expected:
                state[key] = value
            outcome[n] = ((expected, value), current == expected)
    history = []
    for _, n, client, key, kind, status, invoked, completed in sorted(planned, key=lambda p: p[1]):
        arg, result = outcome[n]
        history.append(
            HistoryOp(
                client=client,
                key=key,
                op=kind,
                arg=arg,
                result=None if status == "info" else result,
                status=status,
                invoked=invoked,
                completed=None if status == "info" else completed,
            )
        )
    return history


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--operations", type=int, default=3000)
    p.add_argument("--keys", type=int, default=5)
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--info", type=float, default=0.02, help="fraction of indeterminate operations")
    p.add_argument("--latency", type=float, default=1.0, help="mean operation duration")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-states", type=int, default=1_000_000)
    args = p.parse_args()
    history = build(
        random.Random(args.seed), args.operations, args.keys, args.clients, args.info, args.latency
    )
    last = max(
        (i for i, h in enumerate(history) if h.op == "read" and h.status == "ok"),
        key=lambda i: history[i].invoked,
    )
    old = history[last]
    mutated = list(history)
    mutated[last] = HistoryOp(
        client=old.client,
        key=old.key,
        op="read",
        result=-(10**9),
        status="ok",
        invoked=old.invoked,
        completed=old.completed,
    )
    print(
        f"{args.operations} operations, {args.keys} keys, {args.clients} clients, "
        f"{sum(h.status == 'info' for h in history)} indeterminate, seed {args.seed}"
    )
    for name, h in (("as executed", history), ("one impossible read", mutated)):
        start = time.process_time()
        v = check_linearizable(h, max_states=args.max_states)
        spent = time.process_time() - start
        print(
            f"  {name:20} ok={v.ok!s:5} operations={v.operations:6} "
            f"states={v.states_explored:8} {spent:7.3f} s CPU"
        )


if __name__ == "__main__":
    main()
