"""Agreement where the parameters promise it: 100 processes, the lemmas'
fanout and TTL, no loss, latency below the round length: no holes."""

from __future__ import annotations

from epto.transports.simulation import Cluster, UniformLatency

from epto import Config

DELTA = 125.0


def test_benign_group_of_100_has_no_holes() -> None:
    n = 100
    config = Config.for_group(
        n, clock="global", bounded_latency=True, round_interval=DELTA, clock_resolution=1.0
    )
    c = Cluster(n, seed=7, config=config, latency=UniformLatency(5, 100))
    rng = c.schedule_rng
    for i in range(60):
        c.broadcast_at(rng.uniform(0, 10 * DELTA), rng.randrange(n), b"event %d" % i)
    assert c.run_until_quiescent(max_rounds=10 * config.ttl)
    report = c.check()
    assert report.ok, report.summary()
    assert report.events == 60
    assert report.deliveries == 60 * n
    assert report.total_holes == 0
    # The same sequence everywhere.
    sequences = list(c.recorder.sequences.values())
    assert all(seq == sequences[0] for seq in sequences)
    assert c.network_statistics().lost == 0
