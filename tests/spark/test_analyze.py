"""``epto analyze`` (Spark) and ``epto check`` (Python) agree, on good and bad logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epto.cli import main
from epto.log import DeliveryLogWriter, check_logs, write_broadcasts
from epto.spark._analyze import analyze

from ._cluster import run_cluster

pytestmark = pytest.mark.spark

A, B, C, D, E, X = (0, 0), (1, 0), (2, 0), (0, 1), (3, 0), (9, 9)


def write_sequences(root: Path, sequences: dict[int, list[tuple[int, int]]]) -> None:
    for node, seq in sequences.items():
        with DeliveryLogWriter(root, node) as w:
            for k, (source, s) in enumerate(seq):
                w.append_fields(
                    source=source,
                    seq=s,
                    ts=10 * source + s,
                    payload=b"p",
                    delivered_at=1000 * (k + 1),
                    broadcast_at=0,
                )
    write_broadcasts(root, [(s, q, 0) for s, q in (A, B, C, D, E)])


def verdicts(s: dict[str, Any]) -> dict[str, Any]:
    return {
        "ok": s["ok"],
        "counts": (s["nodes"], s["deliveries"], s["events"], s["out_of_order_deliveries"]),
        "order_ok": s["order"]["ok"],
        "cycles": sorted(
            (sorted(map(tuple, v["cycle"])), v["witnesses"] and sorted(v["witnesses"]))
            for v in s["order"]["violations"]
        ),
        "integrity": {k: v for k, v in s["integrity"].items()},
        "holes": s["holes"],
        "delays": None
        if s["delay_ms"] is None
        else (s["delay_ms"]["count"], s["delay_ms"]["min"], s["delay_ms"]["max"]),
    }


def test_agree_on_a_correct_run(spark: Any, tmp_path: Path) -> None:
    run_cluster(tmp_path, n=5, events=30, seed=3)
    python, _ = check_logs(tmp_path)
    on_spark = analyze(tmp_path, spark=spark, plot=False)
    assert verdicts(on_spark) == verdicts(python)
    assert on_spark["ok"] and on_spark["integrity"]["never_broadcast"] == 0
    assert on_spark["deliveries"] == 150 and on_spark["holes"]["total"] == 0
    # A correct EpTO run delivers in (ts, source) order: no edge went to the driver.
    assert on_spark["order"]["backward_edges"] == 0
    assert on_spark["order"]["edges_to_driver"] == 0
    assert on_spark["delay_ms"]["count"] == 150
    assert abs(on_spark["delay_ms"]["p50"] - python["delay_ms"]["p50"]) < 1e-6 + 0.01 * abs(
        python["delay_ms"]["p50"]
    )


def test_agree_on_planted_violations(spark: Any, tmp_path: Path, capsys: Any) -> None:
    write_sequences(
        tmp_path,
        {
            0: [A, B, C, D],
            1: [A, C, B, D],  # B and C swapped: a cycle B -> C -> B
            2: [A, B, C, D, D],  # D twice
            3: [A, B, C, X],  # X was never broadcast; D is a hole
        },
    )
    # One analysis through the command line (it uses the active session).
    python, _ = check_logs(tmp_path)
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path), "--out", str(out), "--json"]) == 1
    on_spark = json.loads(capsys.readouterr().out)
    assert verdicts(on_spark) == verdicts(python)
    assert not on_spark["ok"]
    (cycle,) = on_spark["order"]["violations"]
    assert sorted(map(tuple, cycle["cycle"])) == [B, C]
    assert "(1, 0) before (2, 0)" in cycle["text"] and "(2, 0) before (1, 0)" in cycle["text"]
    kinds = {(v["kind"], v["node"], tuple(v["event"])) for v in on_spark["integrity"]["violations"]}
    assert kinds == {("duplicate", 2, D), ("never-broadcast", 3, X)}
    assert on_spark["integrity"]["duplicates"] == 1
    assert on_spark["integrity"]["never_broadcast"] == 1
    assert on_spark["holes"]["per_node"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert on_spark["holes"]["missing_sample"]["3"] == [list(D)]
    assert json.loads((out / "summary.json").read_text())["ok"] is False
    assert (out / "analysis.png").stat().st_size > 1000

    # The Python checker's command line names the same events and exits with 1.
    assert main(["check", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert "total order: VIOLATED" in text and "duplicate (0, 1) at node 2" in text
    assert "never-broadcast (9, 9) at node 3" in text
    assert "(1, 0) before (2, 0)" in text


def test_out_of_order_deliveries_are_outside_the_order(spark: Any, tmp_path: Path) -> None:
    for node, seq in {0: [A, B, C], 1: [A, C, B]}.items():
        with DeliveryLogWriter(tmp_path, node) as w:
            for source, s in seq:
                late = node == 1 and (source, s) == B
                w.append_fields(
                    source=source,
                    seq=s,
                    ts=10 * source + s,
                    payload=b"",
                    delivered_at=0,
                    out_of_order=late,
                )
    python, _ = check_logs(tmp_path)
    on_spark = analyze(tmp_path, spark=spark, plot=False)
    assert verdicts(on_spark) == verdicts(python)
    assert on_spark["ok"] and on_spark["out_of_order_deliveries"] == 1
    assert on_spark["delay_ms"] is None and on_spark["integrity"]["never_broadcast"] is None
