"""``epto simulate --mode token-ring``: same options, same JSON summary keys."""

from __future__ import annotations

import json
from pathlib import Path

from epto.cli import main

COMMON = ["simulate", "--processes", "5", "--rounds", "16", "--broadcast-rate", "0.3", "--quiet"]


def _run(tmp_path: Path, mode: str, *extra: str) -> dict[str, object]:
    out = tmp_path / f"{mode}.json"
    args = [*COMMON, "--mode", mode, "--json", str(out), *extra]
    assert main(args) == 0
    data: dict[str, object] = json.loads(out.read_text())
    return data


def test_token_ring_summary_has_the_epto_keys(tmp_path: Path) -> None:
    epto = _run(tmp_path, "epto")
    ring = _run(tmp_path, "token-ring")
    assert set(ring) == set(epto)
    assert set(ring["delay"]) == set(epto["delay"])  # type: ignore[arg-type]
    assert set(ring["network"]) == set(epto["network"])  # type: ignore[arg-type]
    assert ring["events"] and ring["events"] == ring["events_delivered"]
    assert ring["order_violations"] == ring["integrity_violations"] == ring["holes"] == 0
    params = ring["parameters"]
    assert isinstance(params, dict) and params["mode"] == "token-ring" and params["k"] == 3
    assert set(params) >= set(epto["parameters"])  # type: ignore[arg-type]
    assert {"view_changes", "iview_changes", "excluded", "members_at_end"} <= set(params)


def test_token_ring_with_planetlab_partition_churn_and_loss(tmp_path: Path) -> None:
    options = ["--loss", "0.0005", "--churn-count", "0.1", "--partition", "0.4"]
    options += ["--partition-start", "4", "--partition-rounds", "8"]
    epto = _run(tmp_path, "epto", *options)
    ring = _run(tmp_path, "token-ring", *options)
    assert set(ring) == set(epto)
    assert ring["order_violations"] == ring["integrity_violations"] == ring["holes"] == 0
    assert ring["settled"] == "complete"
    network = ring["network"]
    assert isinstance(network, dict) and network["cut"] > 0
    params = ring["parameters"]
    assert isinstance(params, dict) and params["latency"] == "planetlab"
    assert params["partition"] == 0.4 and params["iview_changes"] >= 1


def test_token_ring_with_loss_churn_and_k(tmp_path: Path) -> None:
    ring = _run(
        tmp_path,
        "token-ring",
        "--latency",
        "uniform",
        "--latency-min",
        "1",
        "--latency-max",
        "10",
        "--loss",
        "0.005",
        "--churn-count",
        "0.1",
        "--k",
        "2",
    )
    assert ring["order_violations"] == ring["integrity_violations"] == ring["holes"] == 0
    assert ring["processes_total"] > 5  # churn joined new identities
    network = ring["network"]
    assert isinstance(network, dict) and network["lost"] > 0
