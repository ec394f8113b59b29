"""A slice of the offline campaign (scripts/token_ring_schedules.py
--adversarial --seeds 0:10000): 200 drawn fault schedules, each checked for
order and integrity at every process, and agreement and validity among the
members that stay in the view (see ``campaign_violations``)."""

from __future__ import annotations

import pytest
from tokenring_scenarios import adversarial_run, campaign_violations

CHUNK = 20


@pytest.mark.parametrize("start", range(0, 200, CHUNK))
def test_adversarial_schedules_keep_order_agreement_and_validity(start: int) -> None:
    problems = {}
    for seed in range(start, start + CHUNK):
        cluster, params = adversarial_run(seed)
        found = campaign_violations(cluster)
        if found:
            problems[seed] = (params, found[:3])
    assert problems == {}
