"""The ``epto`` sink: rows broadcast into a running group, each delivered once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epto.spark._client import GatewayClient, GatewayError, send_rows
from epto.spark._rows import encode_event

from ._group import LoopbackGroup

pytestmark = pytest.mark.spark
JOB = Path(__file__).with_name("_sink_job.py")


def wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_stream_with_a_failed_task_is_delivered_once_at_every_member(tmp_path: Path) -> None:
    """100,000 rows in 4 micro-batches of 2 partitions into 3 members; the task
    holding row 62,000 fails once after sending rows, Spark retries it, and
    every member still has every row exactly once."""
    rows, fail_at = 100_000, 62_000  # the failure is near the end of its partition
    with LoopbackGroup(3) as group:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        job = subprocess.run(
            [sys.executable, str(JOB), group.address, str(tmp_path), str(rows), "8", str(fail_at)],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert job.returncode == 0, job.stderr[-3000:]
        result = json.loads(job.stdout.strip().splitlines()[-1])
        assert sum(n for _, n in result["progress"]) == rows
        assert wait_for(lambda: all(len(r) >= rows for r in group.rows.values()), 30)
        gateway = group.gateway
        assert gateway is not None
    expected = [f"{n:07d}".encode() for n in range(rows)]
    for pid, delivered in group.rows.items():
        assert sorted(r.value for r in delivered) == expected, pid
        ids = {(r.stream, r.batch, r.partition, r.row) for r in delivered}
        assert len(ids) == rows
        assert {r.stream for r in delivered} == {result["id"]}
        # Batch after batch, and each partition's rows in their order.
        batches = [r.batch for r in delivered]
        assert batches == sorted(batches)
        for key in {(r.batch, r.partition) for r in delivered}:
            numbers = [r.row for r in delivered if (r.batch, r.partition) == key]
            assert numbers == sorted(numbers)
    assert group.rows[1] == group.rows[2] == group.rows[3]  # the same order everywhere
    # The failed attempt had sent rows: they were broadcast twice, delivered once.
    assert gateway.statistics.rows > rows
    assert all(
        d.statistics.duplicates == gateway.statistics.rows - rows for d in group.dedup.values()
    )
    assert gateway.statistics.open_connections == 0 and not gateway.statistics.rejected


def test_batch_write_and_its_errors(spark: Any) -> None:
    with LoopbackGroup(3, max_payload=200) as group:
        df = spark.range(0, 500, numPartitions=3).selectExpr("cast(id as string) as value")
        df.write.format("epto").option("gateway", group.address).mode("append").save()
        assert wait_for(lambda: all(len(r) >= 500 for r in group.rows.values()), 30)
        with pytest.raises(Exception, match="column named 'value'"):
            spark.range(3).write.format("epto").option("gateway", group.address).mode(
                "append"
            ).save()
        with pytest.raises(Exception, match="at most 200 bytes"):
            spark.createDataFrame([("x" * 300,)], "value string").write.format("epto").option(
                "gateway", group.address
            ).mode("append").save()
    for delivered in group.rows.values():
        assert sorted(int(r.value) for r in delivered) == list(range(500))
        assert len({r.stream for r in delivered}) == 1
        assert {r.partition for r in delivered} == {0, 1, 2}


def test_the_gateway_refuses_hostile_peers_and_keeps_serving() -> None:
    with LoopbackGroup(3, max_payload=512, max_connections=4, token=b"secret") as group:
        gateway = group.gateway
        assert gateway is not None
        with pytest.raises(GatewayError, match="wrong token"):
            GatewayClient(group.address, token=b"guess")
        with (
            GatewayClient(group.address, token=b"secret") as client,
            pytest.raises(GatewayError, match="not a sink event"),
        ):
            client.send(b"ESNK" + b"\xff" * 40)
            client.wait_all()
        with GatewayClient(group.address, token=b"secret") as client:
            client._send_frame(b"E" + b"\0" * 8 + b"x" * 600)  # a frame above the bound
            with pytest.raises(GatewayError, match="exceeds"):
                client._read_reply()
        held = [GatewayClient(group.address, token=b"secret") for _ in range(4)]
        try:
            with pytest.raises(GatewayError, match="too many connections"):
                GatewayClient(group.address, token=b"secret")
        finally:
            for c in held:
                c.close()
        assert wait_for(lambda: gateway.statistics.open_connections == 0, 10)
        with GatewayClient(group.address, token=b"secret") as client:
            assert send_rows(client, "s", 7, 0, (b"%d" % i for i in range(100))) == 100
        assert wait_for(lambda: all(len(r) == 100 for r in group.rows.values()), 10)
        # The same rows again (a retried task) are broadcast and dropped on delivery.
        with GatewayClient(group.address, token=b"secret") as client:
            client.send(encode_event("s", 7, 0, 50, [b"50", b"51", b"x"]))
            client.wait_all()
    assert gateway.statistics.rejected == {
        "token": 1,
        "malformed": 1,
        "frame-size": 1,
        "connections": 1,
    }
    for pid, delivered in group.rows.items():
        assert sorted(r.row for r in delivered) == list(range(100)), pid
        assert group.dedup[pid].statistics.duplicates == 3
