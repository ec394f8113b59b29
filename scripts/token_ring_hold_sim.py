"""Messages per command and delivery latency of the token ring against
``broadcast_hold``, in the virtual-time network (deterministic: the figures
do not depend on the machine).

    python scripts/token_ring_hold_sim.py

Three members on links of 0.1 to 0.3 ms (loopback-like), each broadcasting
at ``--rates`` commands per second for 2 s, default ``TokenRingConfig``
otherwise but for ``max_hold`` (``--max-holds``, default 0: fixed holds;
``--max-holds 0,0.05`` compares the adaptive holds). Printed per rate and
hold: the messages every member sent from the first command until 1 s
after the last (tokens, acknowledgements, order notices, heartbeats,
payloads), divided by the commands, and the delivery
latency (broadcast to delivery, every member) p50 and p99. The simulator
hands the process one message at a time, so without a hold every broadcast
is its own ``Data`` message per member, as a driver that pulls after every
broadcast sends it.
"""

from __future__ import annotations

import argparse
import random

from epto.transports.simulation import TokenRingCluster

from epto.tokenring import TokenRingConfig


def run(
    hold: float, rate: float, seconds: float = 2.0, seed: int = 1, max_hold: float = 0.0
) -> tuple[int, float, float, float]:
    cluster = TokenRingCluster(
        3,
        TokenRingConfig(broadcast_hold=hold, max_hold=max_hold),
        seed=seed,
        delay=(0.0001, 0.0003),
    )
    rng = random.Random(seed)
    commands = 0
    for pid in range(3):
        t = 0.5 + rng.random() / rate
        while t < 0.5 + seconds:
            cluster.broadcast_at(t, pid, b"incr")
            t += 1 / rate
            commands += 1
    cluster.run_until(0.5)
    before = sum(p.statistics().messages_sent for p in cluster.procs.values())
    cluster.run_until(0.5 + seconds + 1.0)
    after = sum(p.statistics().messages_sent for p in cluster.procs.values())
    assert cluster.check().ok
    latencies = sorted(cluster.latencies())
    assert len(latencies) == 3 * commands
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[int(0.99 * len(latencies))]
    return commands, (after - before) / commands, 1e3 * p50, 1e3 * p99


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="500,2000", help="commands/s per member")
    p.add_argument("--holds", default="0,0.002,0.005", help="broadcast_hold values, seconds")
    p.add_argument(
        "--max-holds", default="0", help="max_hold values, seconds (0: the holds do not adapt)"
    )
    args = p.parse_args()
    print("rate/s  hold ms  max_hold ms  commands  messages/command  p50 ms  p99 ms")
    for rate in (float(r) for r in args.rates.split(",")):
        for hold in (float(h) for h in args.holds.split(",")):
            for top in (float(m) for m in args.max_holds.split(",")):
                commands, per, p50, p99 = run(hold, rate, max_hold=top)
                print(
                    f"{rate:6g}  {1e3 * hold:7g}  {1e3 * top:11g}  {commands:8d}  "
                    f"{per:16.2f}  {p50:6.2f}  {p99:6.2f}"
                )


if __name__ == "__main__":
    main()
