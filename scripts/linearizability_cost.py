"""What epto.check.check_linearizable costs on histories like a fault suite's.

    python scripts/linearizability_cost.py
    python scripts/linearizability_cost.py --operations 3000 --keys 5 --clients 5 --info 0.02

Builds a history by executing random operations (register: writes, reads,
cas; set: adds, reads) at random linearization points inside random
intervals: ``--clients`` clients, each issuing one operation at a time
(gaps uniform in [0, 1), durations exponential with mean ``--latency``) on a
random one of ``--keys`` keys; a fraction ``--info`` of the operations is
indeterminate (half of them took effect, maybe long after, half never) and
about one in fifty failed. Values are all distinct, or drawn from
``range(--values)``. Printed for that history (accepted), then for the same
history with its last completed read given a value never written (register)
or one more element never added (set): rejected, and the search must get to
the end of that key's history to see it. Printed: the verdict, the
configurations explored and the CPU time of the check.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from epto.check import HistoryOp, check_linearizable


def build(rng: random.Random, a: argparse.Namespace) -> list[HistoryOp]:
    """The history of one random execution (see the module's docstring)."""
    names = [f"k{i}" for i in range(a.keys)]
    kinds = ["write", "read", "read", "cas"] if a.model == "register" else ["add", "read"]
    clock = [0.0] * a.clients
    planned = []
    for n in range(a.operations):
        client = rng.randrange(a.clients)
        invoked = clock[client] + rng.uniform(0.0, 1.0)
        completed = invoked + rng.expovariate(1.0 / a.latency)
        clock[client] = completed
        roll = rng.random()
        status = "info" if roll < a.info else "fail" if roll < a.info + 0.02 else "ok"
        if status == "ok":
            point: float | None = rng.uniform(invoked, completed)
        elif status == "info" and rng.random() < 0.5:
            point = invoked + rng.expovariate(0.2)  # took effect, maybe long after
        else:
            point = None
        kind = rng.choice(kinds)
        planned.append((point, n, client, rng.choice(names), kind, status, invoked, completed))
    state: dict[str, Any] = {}
    outcome: dict[int, tuple[Any, Any]] = {}
    timeline = sorted(planned, key=lambda p: (p[0] is None, p[0], p[1]))
    for unique, (point, n, _, key, kind, _, _, _) in enumerate(timeline, start=1):
        value = rng.randrange(a.values) if a.values else unique
        current: Any = state.get(key, None if a.model == "register" else frozenset())
        if point is None:  # never took effect
            outcome[n] = ((-1, value) if kind == "cas" else value, None)
        elif kind == "read":
            outcome[n] = (None, sorted(current) if a.model == "set" else current)
        elif kind == "write":
            state[key] = value
            outcome[n] = (value, None)
        elif kind == "add":
            state[key] = current | {value}
            outcome[n] = (value, None)
        else:
            expected = current if rng.random() < 0.5 else rng.randrange(max(a.values, 1))
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
    p.add_argument("--model", choices=["register", "set"], default="register")
    p.add_argument(
        "--values", type=int, default=0, help="draw values from range(VALUES); 0: all distinct"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-states", type=int, default=1_000_000)
    args = p.parse_args()
    history = build(random.Random(args.seed), args)
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
        result=[*old.result, -1] if args.model == "set" else -1,  # -1: never written nor added
        status="ok",
        invoked=old.invoked,
        completed=old.completed,
    )
    print(
        f"{args.model}: {args.operations} operations, {args.keys} keys, {args.clients} clients, "
        f"{sum(h.status == 'info' for h in history)} indeterminate, "
        f"values {args.values or 'distinct'}, mean latency {args.latency}, seed {args.seed}"
    )
    for name, h in (("as executed", history), ("one impossible read", mutated)):
        start = time.process_time()
        v = check_linearizable(h, model=args.model, max_states=args.max_states)
        spent = time.process_time() - start
        print(
            f"  {name:20} ok={v.ok!s:5} operations={v.operations:6} "
            f"states={v.states_explored:8} {spent:7.3f} s CPU"
        )


if __name__ == "__main__":
    main()
