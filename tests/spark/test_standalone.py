"""On a Spark standalone cluster (a master and a worker on 127.0.0.1): a batch
read, a streaming query restarted once, and ``epto analyze --master``.

The daemons run without the virtual environment or ``PYTHONPATH``: the
executors import ``epto`` only because ``epto.spark.session()`` tells Spark
which interpreter and which ``epto`` to use. Select with ``-m cluster``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import epto
from epto.log import check_logs, list_nodes, read_log
from epto.spark import standalone_cluster
from epto.spark._logserver import serve_in_thread

from ._cluster import run_cluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow]
JOB = Path(__file__).with_name("_cluster_job.py")
TOKEN = b"cluster-token"
HOME = Path(os.path.abspath(Path(epto.__file__).parent.parent))
"""Where this epto is imported from, links not followed (a strict editable
install links a build tree, epto/transports included, to the checkout)."""


def records(root: Path) -> list[list[Any]]:
    return sorted(
        [r.node, r.index, r.source, r.seq, r.ts, r.tag.value, r.payload.hex()]
        for node in list_nodes(root)
        for r in read_log(root / str(node))
    )


def test_on_a_standalone_cluster(tmp_path: Path) -> None:
    logs = (tmp_path / "logs").resolve()
    run_cluster(logs, n=3, events=40, seed=5, manifest=False)
    expected = records(logs)
    env = {**os.environ, "PYTHONPATH": str(HOME)}
    with (
        standalone_cluster(tmp_path / "spark") as master,
        serve_in_thread([logs], TOKEN) as (server,),
    ):
        job = subprocess.run(
            [
                *(sys.executable, str(JOB), master, str(logs), str(tmp_path / "out")),
                *(server.address, TOKEN.decode()),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert job.returncode == 0, job.stderr[-4000:]
        cli = subprocess.run(
            [sys.executable, "-m", "epto", "analyze", str(logs), "--master", master, "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    result = json.loads(job.stdout.strip().splitlines()[-1])
    assert sorted(result["batch"]) == sorted(result["jvm_batch"]) == expected
    # The worker's Python imported this epto, not another copy.
    assert result["workers_import"] == [result["driver"]] == [epto.__file__]
    assert sorted(result["first"]) == expected
    after = records(logs)
    assert len(after) == len(expected) + 15
    # Restarted from its checkpoint, the query wrote only the new records.
    assert sorted(result["second"]) == after

    # Over the network: the group's order once, the restarted query adding
    # only the new events (0 duplicates, 0 missing), as the files read.
    events = result["events"]
    assert [r[0] for r in events] == list(range(len(events))) and len(events) == 45
    assert result["net_first"] == events[:40] and result["net_second"] == events
    assert server.statistics.rejected == {}

    python, _ = check_logs(logs)
    assert cli.returncode == 0, cli.stderr[-4000:]
    summary = json.loads(cli.stdout[cli.stdout.index("{") :])
    assert summary["ok"] and summary["deliveries"] == python["deliveries"] == len(after)
    assert summary["order"]["ok"] and summary["holes"] == python["holes"]
