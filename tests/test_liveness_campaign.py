"""scripts/liveness_campaign.py counts deliveries against broadcasts among
the members that stay: a member cut off for ever shows as missing
deliveries, a crashed one is not counted, a schedule past its wall-time cap
is skipped and counted, and the summary adds the schedules up."""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "liveness_campaign.py"


@pytest.fixture(scope="module")
def campaign() -> ModuleType:
    spec = importlib.util.spec_from_file_location("liveness_campaign", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["liveness_campaign"] = module
    spec.loader.exec_module(module)
    return module


def _epto(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "engine": "epto",
        "seed": 7,
        "n": 4,
        "clock": "logical",
        "resolution": None,
        "latency": "uniform-5",
        "loss": 0.0,
        "rate": 20.0,
        "until": 1.0,
        "faults": [],
        "settle_rounds": 60,
    }
    spec.update(changes)
    return spec


def _ring(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "engine": "token-ring",
        "seed": 3,
        "n": 4,
        "delay": [0.0005, 0.002],
        "loss": 0.0,
        "break_duration": 0.01,
        "window": None,
        "optimistic": None,
        "timeouts": 1.0,
        "rate": 40.0,
        "until": 1.0,
        "faults": [],
        "settle": 10.0,
    }
    spec.update(changes)
    return spec


def test_a_clean_epto_schedule_delivers_every_broadcast_at_every_member(
    campaign: ModuleType,
) -> None:
    record = campaign.run_one(("epto", 7, 60.0, _epto()))
    assert record["status"] == "ok" and record["everything"]
    assert record["members"] == 4
    assert record["broadcasts"] > 5
    assert record["expected"] == record["delivered"] == 4 * record["broadcasts"]
    assert record["order"] == record["integrity"] == 0


def test_an_epto_member_cut_off_for_ever_misses_deliveries(campaign: ModuleType) -> None:
    record = campaign.run_one(("epto", 7, 60.0, _epto(faults=[["partition", 0.0, None, [3]]])))
    assert record["status"] == "missing" and not record["everything"]
    assert record["members"] == 4  # it stays alive: it counts
    assert record["expected"] == 4 * record["broadcasts"]
    # It delivers at most its own events, the others none of its own.
    assert record["delivered"] < record["expected"] - record["broadcasts"] // 2
    assert record["order"] == record["integrity"] == 0


def test_a_token_ring_counts_the_members_that_stay(campaign: ModuleType) -> None:
    clean = campaign.run_one(("token-ring", 3, 60.0, _ring()))
    assert clean["status"] == "ok"
    assert clean["expected"] == clean["delivered"] == 4 * clean["broadcasts"]
    crashed = campaign.run_one(("token-ring", 3, 60.0, _ring(faults=[["crash", 0.5, 2]])))
    assert crashed["status"] == "ok"
    assert crashed["members"] == 3
    # Only the broadcasts of the three that stay are expected of them.
    assert crashed["expected"] < 3 * crashed["broadcasts"]
    assert crashed["expected"] == crashed["delivered"]


def test_a_ring_member_cut_off_for_ever_leaves_the_view_and_is_not_counted(
    campaign: ModuleType,
) -> None:
    spec = _ring(n=5, faults=[["partition", 0.3, None, [0]]])
    record = campaign.run_one(("token-ring", 3, 60.0, spec))
    assert record["status"] == "ok"
    assert record["members"] == 4


def test_a_ring_without_a_majority_left_is_counted_apart(campaign: ModuleType) -> None:
    crashes = [["crash", 0.3, 0], ["crash", 0.3, 1], ["crash", 0.3, 2]]
    record = campaign.run_one(("token-ring", 3, 60.0, _ring(n=5, faults=crashes)))
    assert not record["everything"]
    assert record["status"] == "no-quorum"
    rows = campaign.summarize([record])
    assert rows[-1]["no_quorum"] == 1 and rows[-1]["share"] is None


def test_a_schedule_past_its_wall_cap_is_skipped_and_summed(campaign: ModuleType) -> None:
    # Long enough (seconds without the cap) that the alarm, fired again every
    # few milliseconds, cannot be lost every time before the schedule ends.
    slow = campaign.run_one(("epto", 7, 0.001, _epto(n=20, until=30.0)))
    assert slow["status"] == "skipped"
    fine = campaign.run_one(("epto", 7, 60.0, _epto()))
    rows = campaign.summarize([slow, fine])
    everything = next(r for r in rows if r["engine"] == "epto" and r["band"] == "all")
    assert everything["schedules"] == 2
    assert everything["skipped"] == 1
    assert everything["everything"] == 1
    assert everything["share"] == 1.0
    assert everything["expected"] == fine["expected"]


def test_a_wall_cap_that_lands_in_a_garbage_collector_callback_still_skips(
    campaign: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An exception raised in a gc callback cannot propagate: the alarm's first
    # WallCap is lost there, and the schedule must still be cut by a later one
    # (and the lost one must not surface as an unraisable-exception warning).
    landed: list[bool] = []

    def slow_callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and not landed:
            landed.append(True)
            end = time.perf_counter() + 0.2
            while time.perf_counter() < end:
                pass

    def schedule(spec: dict[str, Any]) -> dict[str, Any]:
        gc.callbacks.append(slow_callback)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(slow_callback)
        end = time.perf_counter() + 30.0
        while time.perf_counter() < end:
            pass
        raise AssertionError("the wall cap never cut the schedule")

    monkeypatch.setattr(campaign, "run_epto", schedule)
    record = campaign.run_one(("epto", 7, 0.01, _epto()))
    assert landed == [True]
    assert record["status"] == "skipped"
    assert record["wall"] < 5.0


def test_the_command_writes_its_summary(campaign: ModuleType, tmp_path: Path) -> None:
    out, table = tmp_path / "c.json", tmp_path / "c.csv"
    argv = ["--token-ring", "2", "--epto", "2", "--out", str(out), "--csv", str(table)]
    assert campaign.main(argv) == 0
    data = json.loads(out.read_text())
    assert len(data["records"]) == 4
    assert {r["band"] for r in data["summary"]} >= {"all"}
    assert len(table.read_text().splitlines()) == 5
    # The same seeds draw the same schedules.
    assert campaign.draw_ring(5) == campaign.draw_ring(5)
    assert campaign.draw_epto(5) == campaign.draw_epto(5)
