"""``epto bench udp_scale`` in small configurations: real UDP sockets on
127.0.0.1, nodes spread over worker processes (or one thread), every node
delivers every event in one order. Waits are bounded and generous; no figure
is asserted (the machine may be slow)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from epto import ConfigurationError
from epto.benchmarks import udp_scale
from epto.benchmarks._udp_worker import digest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _workers_find_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned workers import epto afresh: they need the checkout on their path.
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), path) if p))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    udp_scale.add_arguments(parser)
    return parser.parse_args(list(argv))


def _measure(workers: int, nodes: int = 20, senders: int = 6) -> dict[str, object]:
    args = _args("--nodes", str(nodes), "--round-interval", "0.2")
    return udp_scale.measure(
        nodes=nodes,
        workers=workers,
        senders=senders,
        events=2,
        config=udp_scale.protocol(args),
        timeout=120.0,
        seed=3,
    )


def test_two_worker_processes_deliver_every_event_in_one_order() -> None:
    r = _measure(workers=2)
    assert r["complete"] and r["ok"]
    assert r["deliveries"] == 20 * 12 and r["missing"] == 0
    assert r["orders"] == 1
    assert [w["nodes"] for w in r["workers"]] == [10, 10]  # type: ignore[attr-defined]
    assert len(r["latencies"]) == 20 * 12  # type: ignore[arg-type]
    report = r["report"]
    assert not report.order_violations and report.total_holes == 0  # type: ignore[attr-defined]


def test_one_worker_runs_in_this_process(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args("--nodes", "10", "--workers", "1", "--senders", "3", "--round-interval", "0.2")
    assert udp_scale.run(args) == 0
    out = capsys.readouterr().out
    assert "nodes=10 workers=1 fanout=" in out
    assert "deliveries 30 of 30; missing 0" in out
    assert "distinct delivery orders among complete nodes: 1" in out


def test_parameters_default_to_the_groups_safe_ones() -> None:
    config = udp_scale.protocol(_args("--nodes", "1000"))
    assert (config.fanout, config.ttl, config.clock) == (20, 60, "logical")
    assert udp_scale.protocol(_args("--nodes", "1000", "--fanout", "8")).fanout == 8


def test_nodes_are_split_in_contiguous_blocks() -> None:
    blocks = udp_scale.blocks(1000, 3)
    assert [len(b) for b in blocks] == [334, 333, 333]
    assert [pid for b in blocks for pid in b] == list(range(1000))


def test_digests_tell_orders_apart() -> None:
    assert digest([(1, 0), (2, 0)]) == digest([(1, 0), (2, 0)])
    assert digest([(1, 0), (2, 0)]) != digest([(2, 0), (1, 0)])
    assert digest([(1, 0)]) != digest([(1, 0), (1, 1)])


def test_zero_workers_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="--workers"):
        udp_scale.run(_args("--nodes", "4", "--workers", "0"))


def test_a_run_cut_by_the_timeout_fails_and_still_reports(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A zero timeout stops the workers at the instant they broadcast: no
    # round has run since, so no node can have delivered anything.
    args = _args("--nodes", "10", "--workers", "2", "--round-interval", "1", "--timeout", "0")
    assert udp_scale.run(args) == 1
    out = capsys.readouterr().out
    assert "all delivered: False, not within the timeout" in out
    assert "worker 0: 5 nodes" in out and "worker 1: 5 nodes" in out
