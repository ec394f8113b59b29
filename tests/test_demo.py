"""The README's main job, without its Spark step (Spark has its own tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epto.cli import main


def test_demo_cluster_delivers_everything_in_one_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "demo",
            "--nodes",
            "3",
            "--events",
            "4",
            "--no-spark",
            "--out",
            str(tmp_path),
            "--timeout",
            "90",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    sequences = []
    for i in (1, 2, 3):
        lines = (tmp_path / f"node-{i}.jsonl").read_text().splitlines()
        sequences.append([(r["source"], r["seq"]) for r in map(json.loads, lines)])
    assert len(sequences[0]) == 12
    assert sequences[0] == sequences[1] == sequences[2]
    assert sorted((tmp_path / "logs").iterdir())  # one delivery log per node, and the manifest
    assert "total order: ok" in out
    # The manifest carries broadcast times, so the delay figures are filled.
    assert "delivery delay (ms): p50" in out and "no broadcast times" not in out
