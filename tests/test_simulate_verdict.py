"""What the simulation summaries count as a failure.

Holes count against events delivered *somewhere*; validity counts the events
of processes that stayed that not every staying process delivered, including
events nobody delivered. A run that stopped at the round limit or stalled
fails in both modes; undelivered events fail a token ring (deterministic
agreement) and, with ``require_agreement``, EpTO.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from epto.transports.simulation import (
    Cluster,
    ConstantLatency,
    SimulationResult,
    SimulationSpec,
    run_simulation,
)

from epto import Config
from epto.cli import main

SMALL = ["simulate", "--processes", "8", "--rounds", "4", "--events", "6", "--quiet"]
CONSTANT = ["--latency", "constant", "--latency-max", "20"]


def _cli(tmp_path: Path, *args: str) -> tuple[int, dict[str, object]]:
    out = tmp_path / "out.json"
    status = main([*SMALL, *args, "--json", str(out)])
    data: dict[str, object] = json.loads(out.read_text())
    return status, data


def test_nothing_delivered_yet_is_no_hole_but_every_event_is_undelivered() -> None:
    # A TTL so long that nobody has delivered anything when we look: the holes
    # (counted against events delivered somewhere) stay 0; validity does not.
    c = Cluster(4, seed=2, config=Config(fanout=2, ttl=50, round_interval=10.0))
    for pid in range(4):
        c.broadcast(pid, b"x")
    c.run_until(100.0)
    report = c.check(staying=c.processes)
    assert report.events == 0 and report.total_holes == 0
    assert len(report.validity_violations) == 4
    assert report.total_undelivered == 16


def test_a_member_cut_off_after_broadcasting() -> None:
    config = Config(fanout=3, ttl=4, round_interval=10.0)
    # A seed whose gossip reaches every connected member (agreement is
    # probabilistic: with fanout 3 and TTL 4 some seeds leave one more hole).
    c = Cluster(5, seed=4, config=config, latency=ConstantLatency(1.0))
    c.disconnect(4)  # for good: 4 stays a member but hears nothing, and is not heard
    own = c.broadcast(4, b"from the cut-off member")
    other = c.broadcast(0, b"from the others")
    assert c.run_until_quiescent(max_rounds=100)
    everyone = c.check(staying=c.processes)
    assert everyone.ok
    # 4 delivered its own event, the others theirs: both miss something.
    assert everyone.validity_violations == tuple(sorted((own, other)))
    assert everyone.undelivered == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}
    # Had 4 left the group (not staying), nothing would be owed.
    c.remove_process(4)
    assert c.check(staying=c.processes).valid


def _result(**changes: object) -> SimulationResult:
    base = run_simulation(
        SimulationSpec(
            processes=6, rounds=3, events=4, latency="constant", latency_high=20.0, seed=1
        )
    )
    assert base.failures == [] and base.summary()["ok"] is True
    spec = attrs.evolve(base.spec, **{k: v for k, v in changes.items() if hasattr(base.spec, k)})
    fields = {k: v for k, v in changes.items() if not hasattr(base.spec, k)}
    return attrs.evolve(base, spec=spec, **fields)


@pytest.mark.parametrize(
    ("changes", "failures"),
    [
        ({}, []),
        # EpTO's agreement is probabilistic: holes and validity are reported only...
        ({"holes": 2, "validity_violations": 1, "undelivered": 3}, []),
        # ...unless agreement is required.
        (
            {"holes": 2, "validity_violations": 1, "require_agreement": True},
            ["validity", "agreement"],
        ),
        # A token ring promises agreement: an undelivered event fails it.
        ({"validity_violations": 1, "undelivered": 1, "mode": "token-ring"}, ["validity"]),
        ({"holes": 1, "mode": "token-ring"}, ["agreement"]),
        # Stopping unsettled fails both modes.
        ({"settled": "round-limit"}, ["round-limit"]),
        ({"settled": "round-limit", "mode": "token-ring"}, ["round-limit"]),
        ({"settled": "stalled", "stalled_at": 12.0}, ["stalled"]),
        ({"order_violations": 1, "settled": "round-limit"}, ["safety", "round-limit"]),
    ],
)
def test_failures(changes: dict[str, object], failures: list[str]) -> None:
    result = _result(**changes)
    assert result.failures == failures
    summary = result.summary()
    assert summary["failures"] == failures and summary["ok"] is (not failures)
    assert summary["stopped_at_round_limit"] is ("round-limit" in failures)
    for key in ("validity_violations", "undelivered", "stalled_at", "settled"):
        assert key in summary


def test_cli_a_run_stopped_at_the_round_limit_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, data = _cli(tmp_path, *CONSTANT, "--max-drain-rounds", "0")
    assert data["settled"] == "round-limit" and data["stopped_at_round_limit"] is True
    assert data["order_violations"] == data["integrity_violations"] == 0
    assert data["failures"] == ["round-limit"] and data["ok"] is False
    assert status == 3
    assert "verdict: FAILED: round-limit" in capsys.readouterr().out


def test_cli_a_settled_run_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, data = _cli(tmp_path, *CONSTANT)
    assert status == 0 and data["ok"] is True and data["failures"] == []
    assert data["settled"] in ("complete", "quiescent")
    assert data["validity_violations"] == data["undelivered"] == 0
    assert data["stalled_at"] is None and data["stopped_at_round_limit"] is False
    printed = capsys.readouterr().out
    assert "validity: 0 events" in printed and "verdict: ok" in printed


def test_cli_a_stalled_run_is_reported_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bound of one item per instant: the first instant with two items stalls.
    status, data = _cli(tmp_path, *CONSTANT, "--max-items-per-instant", "1")
    assert status == 3
    assert data["settled"] == "stalled" and isinstance(data["stalled_at"], float)
    assert data["failures"] == ["stalled"]
    assert "STALLED at t = " in capsys.readouterr().out


def test_cli_epto_holes_fail_only_with_require_agreement(tmp_path: Path) -> None:
    # Half the group cut off for good: each side misses the other's events.
    cut = ["--partition", "0.5", "--partition-start", "0", "--partition-rounds", "1000"]
    status, data = _cli(tmp_path, *CONSTANT, *cut)
    assert data["holes"] and data["validity_violations"]
    assert data["settled"] in ("complete", "quiescent")
    assert status == 0 and data["failures"] == []
    status, data = _cli(tmp_path, *CONSTANT, *cut, "--require-agreement")
    assert status == 3 and data["failures"] == ["validity", "agreement"]


def test_cli_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "exit status" in text and "3  validity or liveness failed" in text
