"""Evaluation sweeps on Spark: 40 small seeded simulations as Spark tasks give
exactly the summaries the same simulations give in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epto.cli import main
from epto.spark import grid, simulate, sweep

pytestmark = pytest.mark.spark

CONFIGS = grid(
    {"processes": [8, 12, 16, 20], "seed": [1, 2, 3, 4, 5], "clock": ["logical", "global"]},
    rounds=4,
    broadcast_rate=0.2,
)


def _stable(summary: dict[str, Any]) -> dict[str, Any]:
    """What a run decides (times and CPU seconds aside)."""
    return {k: v for k, v in summary.items() if k not in ("wall_seconds", "cpu_seconds")}


def test_forty_simulations_on_spark_match_the_same_runs_here(spark: Any) -> None:
    assert len(CONFIGS) == 40
    results = sweep(CONFIGS, spark=spark)
    assert len(results) == 40
    for config, result in zip(CONFIGS, results, strict=True):
        assert result["processes"] == config["processes"]
        assert result["order_violations"] == result["integrity_violations"] == 0
        assert result["events"] > 0
    for i in (0, 17, 39):  # the same seeded run, in this process
        assert _stable(simulate(CONFIGS[i])) == _stable(results[i])


def test_the_command_line_runs_a_grid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = tmp_path / "grid.json"
    configs.write_text(
        json.dumps({"axes": {"seed": [1, 2]}, "fixed": {"processes": 6, "rounds": 3}})
    )
    out = tmp_path / "results.json"
    assert main(["sweep", str(configs), "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())) == 2
    assert "2 simulations" in capsys.readouterr().out
    configs.write_text(json.dumps([{"processes": 0}]))
    assert main(["sweep", str(configs)]) == 2
