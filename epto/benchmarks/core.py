"""Event copies per second through one process's receive-and-order path.

One :class:`epto.epidemic.Process` receives, round after round, the balls a member of
a large group would receive, and runs its rounds. The balls are synthesised
from a model of steady-state gossip rather than from a full simulation (a
10,000-process simulation is the simulator's job, not this benchmark's):

* every round ``round(n * rate)`` new events are broadcast by random sources,
  with logical timestamps that grow with the round;
* the process receives K balls per round (K and TTL from
  :func:`epto.params.derive_parameters` for ``n``);
* a ball holds every event whose copies still circulate: an event of age
  ``a`` rounds is in a given sender's ball with the probability that the
  sender was infected by then, ``min(1, K**(a-1) / n)`` (the epidemic grows
  by about K per round until it saturates), with ttl ``a`` minus a lag of
  0, 1 or 2 rounds (75/20/5%) drawn per slice of events, as copies that
  travelled slower paths;
* ttls run from 1 to TTL, so the copies on their last hop (ttl = TTL) are
  received and not relayed, as in a real group;
* the same event is in almost every one of the K balls of a round: the
  duplicates that make up most of the work of gossip.

Only the calls into the process are timed (CPU time, ``time.process_time``);
building the balls is not. Figures: copies received (the sum of ball sizes)
per CPU second for the whole path, for ``receive`` alone and for the round
(``handle_timer``: building the next ball and ordering), and events per
second through the ordering component alone (a twin of the process's,
handed the ball the process ordered, right after its round).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

_LAGS = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2)
"""Lag of a slice of copies behind the event's age: 75% 0, 20% 1, 5% 2."""

_SLICES_PER_AGE = 4
"""Slices of one age group in one ball, each with its own lag."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[100, 10_000],
        help="group sizes whose balls to model (default: 100 10000)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.05,
        help="broadcasts per process per round (default 0.05, the EpTO paper's 5%%)",
    )
    parser.add_argument(
        "--clock",
        choices=("logical", "global"),
        default="logical",
        help="clock whose TTL to use (default logical, the larger TTL)",
    )
    parser.add_argument(
        "--ordering", choices=("strict", "paper"), default="strict", help="ordering conditions"
    )
    parser.add_argument(
        "--copies",
        type=float,
        default=10e6,
        help="stop measuring after about this many copies per group size (default 1e7)",
    )
    parser.add_argument(
        "--max-rounds", type=int, default=200, help="measured rounds at most (default 200)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the ball model")
    parser.add_argument(
        "--ball-format",
        choices=("native", "dict"),
        default="native",
        help="balls as processes build them (native), or as plain dicts "
        "{id: (event, ttl)} such as a decoder may produce",
    )


def run(args: argparse.Namespace) -> int:
    import platform

    from epto.epidemic import _fold

    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    build = "compiled" if _fold.compiled() else "Python (EPTO_PURE_PYTHON set, or none compiled)"
    print(f"# the merge's fold: the {build} build (docs/benchmarks.md, *The compiled fold*)")
    print(
        f"# epto bench core: rate {args.rate:g}, clock {args.clock}, ordering {args.ordering}, "
        f"ball format {args.ball_format}, seed {args.seed}"
    )
    print(
        f"{'n':>6} {'K':>3} {'TTL':>4} {'ball':>7} {'rounds':>6} {'copies':>10} "
        f"{'total/s':>11} {'receive/s':>11} {'round/s':>11} {'ordering ev/s':>13}"
    )
    for n in args.processes:
        r = measure(
            n,
            rate=args.rate,
            clock=args.clock,
            ordering=args.ordering,
            copies_budget=args.copies,
            max_rounds=args.max_rounds,
            seed=args.seed,
            ball_format=args.ball_format,
        )
        print(
            f"{n:>6} {r['fanout']:>3} {r['ttl']:>4} {r['mean_ball']:>7.0f} {r['rounds']:>6} "
            f"{r['copies']:>10} {r['total_rate']:>11,.0f} {r['receive_rate']:>11,.0f} "
            f"{r['round_rate']:>11,.0f} {r['ordering_rate']:>13,.0f}"
        )
    print(
        "# copies/s = event copies received (sum of ball sizes) per CPU second of the "
        "process; total = receive + rounds"
    )
    return 0


def measure(
    n: int,
    *,
    rate: float,
    clock: str,
    ordering: str,
    copies_budget: float,
    max_rounds: int,
    seed: int,
    ball_format: str,
) -> dict[str, Any]:
    """Run the model for group size ``n`` and return the figures."""
    from epto import Config, Event
    from epto.epidemic import FullView, Process
    from epto.epidemic._ordering import Ordering
    from epto.params import derive_parameters
    from epto.wire import LayeredBall

    params = derive_parameters(n, clock=clock)  # type: ignore[arg-type]
    fanout, ttl = params.fanout, params.ttl
    config = Config(fanout=fanout, ttl=ttl, clock=clock, ordering=ordering)  # type: ignore[arg-type]
    rng = random.Random(seed)
    me = 0
    proc = Process(me, config, peers=FullView(me, range(n)), rng=random.Random(seed + 1), now=0.0)
    make_ball = _ball_maker(ball_format)

    per_round = max(1, round(n * rate))
    # Infection probability of a sender for an event of age a (a = 1: the source).
    infected = [0.0] + [min(1.0, fanout ** (a - 1) / n) for a in range(1, ttl + 1)]
    # Events broadcast in each of the last TTL rounds, as (eid, event) pairs.
    ages: list[list[tuple[tuple[int, int], Any]]] = []
    seqs: dict[int, int] = {}

    # The ordering component alone: a twin of the process's, handed the very
    # ball the process ordered (the one it sends: the merged round ball),
    # right after the process's round, so that it starts from the same caches
    # and its state follows the process's exactly.
    ordering_time = 0.0
    ordering_events = 0
    twin = Ordering(
        ttl=ttl, strict=ordering == "strict", tagged=config.tagged_delivery, emit=_discard
    )
    nothing = LayeredBall()

    warmup = ttl + 5
    receive_time = round_time = 0.0
    copies = rounds = 0
    now = 0.0
    r = 0
    while True:
        r += 1
        born: list[tuple[tuple[int, int], Any]] = []
        for i in range(per_round):
            source = rng.randrange(1, n)
            seq = seqs.get(source, 0)
            seqs[source] = seq + 1
            ev = Event(source=source, seq=seq, ts=r * 16 + i % 16, payload=b"")
            born.append(((source, seq), ev))
        ages.insert(0, born)
        del ages[ttl:]
        balls = [_synth_ball(rng, ages, infected, ttl, make_ball) for _ in range(fanout)]
        measuring = r > warmup
        now += config.round_interval
        t0 = time.process_time()
        for k, ball in enumerate(balls):
            proc.receive(1 + k, ball, now)
        t1 = time.process_time()
        proc.handle_timer(now)
        t2 = time.process_time()
        sent = proc.messages_to_send()
        ball = sent[0][1] if sent else nothing
        t3 = time.process_time()
        twin.order(ball)
        t4 = time.process_time()
        for _ in proc.deliveries():
            pass
        if measuring:
            ordering_time += t4 - t3
            ordering_events += len(ball)
            receive_time += t1 - t0
            round_time += t2 - t1
            copies += sum(len(b) for b in balls)
            rounds += 1
            if copies >= copies_budget or rounds >= max_rounds:
                break
    total = receive_time + round_time
    return {
        "fanout": fanout,
        "ttl": ttl,
        "rounds": rounds,
        "copies": copies,
        "mean_ball": copies / rounds / fanout,
        "total_rate": copies / total,
        "receive_rate": copies / receive_time,
        "round_rate": copies / round_time,
        "ordering_rate": ordering_events / ordering_time if ordering_time else 0.0,
        "delivered": proc.statistics().delivered,
    }


def _discard(_delivery: object) -> None:
    """The twin ordering's deliveries: the process's own are the ones checked."""


def _synth_ball(
    rng: random.Random,
    ages: Sequence[Sequence[tuple[tuple[int, int], Any]]],
    infected: Sequence[float],
    ttl: int,
    make_ball: Callable[[list[tuple[int, list[tuple[tuple[int, int], Any]]]]], Any],
) -> Any:
    """One sender's ball: slices of each age group with a ttl each."""
    chunks: list[tuple[int, list[tuple[tuple[int, int], Any]]]] = []
    for index, group in enumerate(ages):
        age = index + 1
        if age > ttl or not group:
            continue
        p = infected[age]
        if p < 1.0:
            group = [item for item in group if rng.random() < p]
            if not group:
                continue
        step = max(1, -(-len(group) // _SLICES_PER_AGE))
        for start in range(0, len(group), step):
            copy_ttl = max(1, age - rng.choice(_LAGS))
            chunks.append((copy_ttl, list(group[start : start + step])))
    return make_ball(chunks)


def _ball_maker(
    fmt: str,
) -> Callable[[list[tuple[int, list[tuple[tuple[int, int], Any]]]]], Any]:
    def as_dict(chunks: list[tuple[int, list[tuple[tuple[int, int], Any]]]]) -> Any:
        ball: dict[Any, Any] = {}
        for copy_ttl, items in chunks:
            for eid, ev in items:
                ball[eid] = (ev, copy_ttl)
        return ball

    def native(chunks: list[tuple[int, list[tuple[tuple[int, int], Any]]]]) -> Any:
        from epto.wire import LayeredBall

        layers: dict[int, dict[Any, Any]] = {}
        for copy_ttl, items in chunks:
            layers.setdefault(copy_ttl, {}).update(items)
        return LayeredBall.from_layers(layers)

    return native if fmt == "native" else as_dict
