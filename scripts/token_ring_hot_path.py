"""The token ring's per-delivery work, without sockets or an event loop:
the order book, decoding, and a paced run in virtual time.

    python scripts/token_ring_hot_path.py

Printed, each the best of ``--repeat`` runs (wall clock of a busy loop, so
compare two versions in turn on one machine):

* ``order book``: 30,000 events (three sources) through a fresh
  ``OrderBook``: ``add_event``, then their positions by ``learn_batches``
  100 at a time, each followed by ``deliver_into``;
* ``decoding``: 300 ``DataBatch`` frames of 100 events through
  ``FrameCodec.receive``;
* ``virtual time``: the CPU seconds of a ``TokenRingCluster`` of three
  members, each broadcasting ``--rate`` (2000) commands/s for ``--seconds``
  (2) with ``--max-hold`` (0.1; 0 is the library's default, fixed holds),
  the simulator's own work included, from the first command until 1 s
  after the last: the message-level core of a paced run, without frames,
  sockets or an event loop.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from epto.transports.simulation import TokenRingCluster

from epto import Event, Limits
from epto.tokenring import TokenRingConfig
from epto.tokenring._frames import token_ring_registry
from epto.tokenring._messages import Batch, DataBatch
from epto.tokenring._sequencer import OrderBook
from epto.wire._codec import FrameCodec


def order_book() -> float:
    book = OrderBook(log_retention=100_000)
    events = [Event(source=1 + i % 3, seq=i // 3, ts=0, payload=b"incr") for i in range(30_000)]
    start = time.perf_counter()
    for event in events:
        book.add_event(event)
    for first in range(0, len(events), 100):
        ids = tuple(e.id for e in events[first : first + 100])
        book.learn_batches([Batch(first=first, ids=ids, holders=frozenset({1}))], first + 100)
        book.deliver_into([], 256)
    return time.perf_counter() - start


def decoding() -> float:
    codec = FrameCodec(
        group=0, me=2, registry=token_ring_registry(), limits=Limits(max_frame_size=1 << 20)
    )
    events = tuple(Event(source=1, seq=i, ts=0, payload=b"incr") for i in range(100))
    [frame] = codec.encode(1, DataBatch(events=events), to=2)
    start = time.perf_counter()
    for _ in range(300):
        codec.receive(frame, 0.0)
    return time.perf_counter() - start


def virtual_time(rate: float = 2000.0, seconds: float = 2.0, max_hold: float = 0.1) -> float:
    config = TokenRingConfig(max_hold=max_hold)
    cluster = TokenRingCluster(3, config, seed=1, delay=(0.0001, 0.0003))
    rng = random.Random(1)
    for pid in range(3):
        t = 0.5 + rng.random() / rate
        while t < 0.5 + seconds:
            cluster.broadcast_at(t, pid, b"incr")
            t += 1 / rate
    cluster.run_until(0.5)
    start = time.process_time()
    cluster.run_until(0.5 + seconds + 1.0)
    spent = time.process_time() - start
    assert cluster.check().ok
    return spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--rate", type=float, default=2000.0, help="virtual time: commands/s per member")
    p.add_argument("--seconds", type=float, default=2.0, help="virtual time: seconds of commands")
    p.add_argument(
        "--max-hold", type=float, default=0.1, help="virtual time: TokenRingConfig.max_hold"
    )
    args = p.parse_args()

    def paced() -> float:
        return virtual_time(args.rate, args.seconds, args.max_hold)

    runs: list[tuple[str, Callable[[], float], str]] = [
        ("order book, 30,000 events", order_book, "ms"),
        ("decoding, 30,000 events", decoding, "ms"),
        (f"virtual time, 3 x {args.rate:g}/s, {args.seconds:g} s", paced, "s"),
    ]
    for name, run, unit in runs:
        best = min(run() for _ in range(args.repeat))
        value = 1e3 * best if unit == "ms" else best
        print(f"{name:32} {value:8.3f} {unit}")


if __name__ == "__main__":
    main()
