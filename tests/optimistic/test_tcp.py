"""Optimistic delivery over trio TCP on loopback, with emulated link delays
(``TcpNodeConfig.link_delays``): the members measure the links, plan,
deliver optimistically and finally, and agree on the final order."""

from __future__ import annotations

import pytest

from epto.benchmarks.optimistic import TRIANGLE, parse_latencies, run_group
from epto.check import check


@pytest.mark.trio
async def test_three_members_on_emulated_wide_area_links() -> None:
    run = await run_group(TRIANGLE, messages=30, rate=20.0, warmup=2.5, seed=3, timeout=30.0)
    assert run.complete
    assert len(run.broadcast) == 90
    sequences = {p: m.sequence for p, m in run.members.items()}
    assert len(set(sequences.values())) == 1
    report = check(sequences, broadcast=run.broadcast)
    assert not report.order_violations and not report.integrity_violations
    assert set(next(iter(sequences.values()))) == run.broadcast
    for pid, member in run.members.items():
        assert member.confirmed + member.reordered == 90
        assert len(member.optimistic) <= 90
        assert len(member.predicted) == len(member.optimistic)
        # A frame is held at least the link's delay each way: a round trip
        # cannot be measured shorter than the two delays.
        for peer, estimate in member.latencies:
            assert estimate >= (TRIANGLE[pid][peer] + TRIANGLE[peer][pid]) / 2 - 1e-4
        # A plan reached every member, with a delay for every sender.
        assert {p for p, _ in member.delays} == {0, 1, 2}


def test_latency_arguments() -> None:
    assert parse_latencies("5,7,9") == TRIANGLE
    assert parse_latencies("0,1,2,0") == ((0.0, 0.001), (0.002, 0.0))
    with pytest.raises(ValueError, match="square"):
        parse_latencies("1,2")
