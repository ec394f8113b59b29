"""``epto bench rsm`` in its smallest configuration: the epto engines run to
the end and report consistent replicas (same state everywhere, the joiner
with the group's count); ``epto bench rsm_transfer`` fetches the state whole,
plain and sealed. No figure is asserted: the machine may be slow."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from epto.benchmarks import rsm, rsm_transfer

ROOT = Path(__file__).resolve().parents[2]


def _args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    rsm.add_arguments(parser)
    args = parser.parse_args(
        [
            "--commands",
            "30",
            "--paced-commands",
            "30",
            "--in-flight",
            "8",
            "--rate",
            "200",
            "--catchup-mb",
            "0.2",
            "--sizes",
            "0.2",
            "--timeout",
            "60",
        ]
    )
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


@pytest.fixture(autouse=True)
def _workers_find_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned workers import epto afresh: they need the checkout on their path.
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), path) if p))


def test_the_epto_side_completes_with_consistent_replicas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = rsm.run(_args(systems="token-ring,epto", parts="throughput,catchup"))
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.count("same state and count") == 2, out
    assert out.count("same state") == 2 * 2 * 2 + 2, out  # workloads x loads x engines
    assert "failed" not in out and "DIFFER" not in out and "INCONSISTENT" not in out


def test_pysyncobj_catches_up_too(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pysyncobj")
    status = rsm.run(_args(systems="pysyncobj", workloads="dict", parts="catchup"))
    out = capsys.readouterr().out
    assert status == 0, out
    assert "same state and count" in out


def test_the_transfer_benchmark_fetches_the_state_whole_every_way(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    rsm_transfer.add_arguments(parser)
    status = rsm_transfer.run(parser.parse_args(["--mb", "0.3", "--repeats", "2"]))
    out = capsys.readouterr().out
    assert status == 0, out
    rows = [line.split()[0] for line in out.splitlines()]
    assert all(variant in rows for variant in rsm_transfer.VARIANTS), out
    assert "DIFFERS" not in out
