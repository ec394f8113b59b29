"""Failed proposals back off (``epto/tokenring/_change.py``): a view change
whose consensus takes longer than ``change_timeout`` is still decided.

A crowded or CPU-starved process delays every message past the timeouts
its members were configured with, before any token round trip told them
how long delays are (the token holder is gone at once). Each proposal then
expired, or was pre-empted by another member's, before a majority
answered, and a new one replaced it at once: no change was ever decided,
nor the lost token regenerated, and nothing was delivered (the crowd on
TCP in one process stalled at configuration instance 0). Backed off, the
proposals outlive a consensus round trip and one is decided.
"""

from __future__ import annotations

from epto.transports.simulation import TokenRingCluster

from epto.tokenring import TokenRingConfig


def test_a_change_slower_than_the_change_timeout_is_decided() -> None:
    # One-way delays of 0.3 s: a consensus (two round trips) takes 1.2 s,
    # three times change_timeout; run as given (the members measure no
    # round trip: the token holder crashes at once).
    cfg = TokenRingConfig(
        change_timeout=0.4, suspect_timeout=0.3, token_timeout=2.0, exclude_timeout=60.0
    )
    cluster = TokenRingCluster(3, cfg, seed=1, delay=(0.3, 0.3), fit=False)
    cluster.at(0.0, lambda: cluster.crash(0))
    cluster.broadcast_at(0.5, 1, b"x")
    cluster.run_until(20.0)
    for pid in (1, 2):
        stats = cluster.procs[pid].statistics()
        # Before: instance 0 after 20 s, about 50 proposals each, nothing delivered.
        assert stats.instance >= 1
        assert stats.proposals <= 6
        assert len(cluster.delivered[pid]) == 1
    assert cluster.delivered[1] == cluster.delivered[2]
