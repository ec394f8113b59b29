"""Optimistic delivery from the command line and in the delivery log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epto import Delivery, DeliveryTag, Event, LocalProtocolError
from epto.cli import main
from epto.log import DeliveryLogWriter


def test_simulate_reports_how_often_the_optimistic_order_was_final(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    args = ["simulate", "--mode", "token-ring", "--processes", "5", "--rounds", "30"]
    args += ["--broadcast-rate", "0.3", "--latency", "uniform", "--latency-min", "20"]
    args += ["--latency-max", "30", "--json", str(out), "--quiet"]
    assert main([*args, "--optimistic", "optimal"]) == 0
    p = json.loads(out.read_text())["parameters"]
    assert p["optimistic"] == "optimal" and p["optimistic_planner"] == "optimal"
    assert p["final_deliveries"] == json.loads(out.read_text())["deliveries"]
    assert p["optimistic_deliveries"] <= p["final_deliveries"]
    assert 0.0 <= p["optimistic_agreement"] <= 1.0
    assert p["final_confirmed"] == round(p["optimistic_agreement"] * p["final_deliveries"])
    assert main(args) == 0
    assert "optimistic" not in json.loads(out.read_text())["parameters"]


def test_simulate_refuses_optimistic_delivery_without_the_token_ring(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--processes", "5", "--rounds", "5", "--optimistic", "optimal"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "epto simulate: optimistic delivery needs mode 'token-ring'"


def test_the_delivery_log_holds_final_deliveries_only(tmp_path: Path) -> None:
    event = Event(source=1, seq=0, ts=0, payload=b"x")
    with DeliveryLogWriter(tmp_path, 1) as log:
        with pytest.raises(LocalProtocolError, match="final delivery"):
            log.append(Delivery(event=event, tag=DeliveryTag.OPTIMISTIC), delivered_at=1)
        final = Delivery(event=Event(source=1, seq=0, ts=5, payload=b"x"), tag=DeliveryTag.FINAL)
        assert log.append(final, delivered_at=2) == 0
