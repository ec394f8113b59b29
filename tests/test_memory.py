"""A long run keeps every container of a process bounded: thousands of events
pass through each process and ``memory_sizes()`` stays flat."""

from __future__ import annotations

import pytest
from epto.transports.simulation import Cluster, UniformLatency

from epto import Config

DELTA = 100.0
ROUNDS = 1_000


@pytest.mark.parametrize(
    ("ordering", "tagged"), [("strict", False), ("strict", True), ("paper", False)]
)
def test_memory_sizes_stay_flat_over_a_long_run(ordering: str, tagged: bool) -> None:
    n = 8
    # With tagged delivery the delivered-sequence intervals grow by one per
    # event a process never receives (a hole), so that run avoids holes: no
    # loss and a TTL that is ample for 8 processes.
    config = Config(
        fanout=3 if not tagged else 4,
        ttl=4 if not tagged else 6,
        round_interval=DELTA,
        ordering=ordering,  # type: ignore[arg-type]
        tagged_delivery=tagged,
    )
    c = Cluster(
        n, seed=3, config=config, latency=UniformLatency(1, 60), loss=0.0 if tagged else 0.05
    )
    # Every process broadcasts every round: n events per round, 8,000 in all.
    counter = 0
    samples: list[dict[str, int]] = []
    watched = c.processes[0]
    for _ in range(ROUNDS):
        for pid in range(n):
            c.broadcast_at(c.now + DELTA * (pid + 0.5) / n, pid, b"%d" % counter)
            counter += 1
        c.run_rounds(1)
        samples.append(watched.memory_sizes())
    assert c.run_until_quiescent(max_rounds=100)
    delivered = len(c.recorder.sequences[0])
    assert delivered > 0.9 * ROUNDS * n  # thousands of events went through
    report = c.check()
    assert not report.integrity_violations
    if ordering == "strict":
        assert not report.order_violations

    keys = set().union(*samples)
    for key in keys:
        series = [s.get(key, 0) for s in samples]
        early = max(series[100:300])
        late = max(series[-250:])
        # In flight: about n events per round for a few rounds, never growing
        # with the number of events delivered so far.
        assert max(series) <= 20 * n, (key, max(series))
        assert late <= early + n, (key, early, late)
    final = watched.memory_sizes()
    assert final["received"] == 0
    assert final["next_ball"] == 0
    if tagged:
        # One interval of delivered sequence numbers per source, plus one per
        # event this process never received.
        assert final["delivered_intervals"] <= n + report.holes[0]
