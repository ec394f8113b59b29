"""The network source: a group's logs read through members that serve them
(``epto.servers``), identical to the read of the files, in batch and in a
stream restarted from its checkpoint; the log server's bounds against
hostile clients; the options' errors in one line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epto import ConfigurationError
from epto.check import check
from epto.log import iter_raw, list_nodes, node_directory, read_log
from epto.spark._columnar import decode
from epto.spark._events import START, plan, read_runs
from epto.spark._logproto import FRAME_LEN, HELLO, answer, group_token
from epto.spark._network import LogClient, LogServerError, NetworkLogs
from epto.spark._options import parse_options

from ._cluster import run_cluster
from ._logserve import serving
from .test_events import (
    append_epto,
    check_logs_lenient,
    cut_middle_segment,
    events,
    in_order,
    ring_logs,
)

pytestmark = pytest.mark.spark
TOKEN = b"s3cret-token"


def per_member(root: Path) -> list[Path]:
    """Each node's log in a root of its own, as each member's --log-dir holds it."""
    roots = []
    for node in list_nodes(root):
        own = root.parent / f"member-{node}"
        shutil.copytree(node_directory(root, node), own / str(node))
        roots.append(own)
    return roots


def network(spark: Any, servers: list[Any], **options: str) -> Any:
    addresses = ",".join(s.address for s in servers)
    reader = spark.read.format("epto").option("epto.servers", addresses)
    return reader.option("epto.token", TOKEN.decode()).options(**options).load()


def test_a_group_read_over_the_network_is_the_read_of_its_files(spark: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    run_cluster(logs, n=3, events=60, seed=5, segment_bytes=1024)
    lost = cut_middle_segment(logs, 0)  # node 0 misses a stretch; 1 and 2 hold it
    assert lost > 0
    summary, _ = check_logs_lenient(logs)
    sequences = in_order(logs)
    files = spark.read.format("epto").load(str(logs)).collect()
    with serving(per_member(logs), TOKEN) as members, serving([logs], TOKEN) as (whole,):
        # Through the three members, each serving its own log; tasks of 7 events.
        through_all = network(spark, members, maxRecordsPerPartition="7").collect()
        # Through one member only: node 0's, the one with the hole.
        through_0 = network(spark, members[:1]).select("offset", "source", "seq").collect()
        # Through one member whose log directory has every node's.
        through_whole = network(spark, [whole]).collect()
    assert through_all == files == through_whole  # every column, payloads included
    payloads = {r["offset"]: bytes(r["payload"]) for r in through_all}
    files = [(r["offset"], (r["source"], r["seq"]), r["node"]) for r in files]
    order = [e for _, e, _ in files]
    assert [o for o, _, _ in files] == list(range(60)) and len(set(order)) == summary["events"]
    report = check({**sequences, -1: order})
    assert report.ok and report.holes[-1] == 0
    # A member that misses a stretch serves only what it has: the rest of the
    # order, ranked as that log alone ranks it.
    assert len(through_0) == 60 - lost
    assert [(r["source"], r["seq"]) for r in through_0] == sequences[0]
    logged = {(r.source, r.seq): r.payload for r in read_log(node_directory(logs, 1))}
    assert [payloads[k] for k in range(60)] == [logged[e] for e in order]
    for server in (*members, whole):
        assert server.statistics.rejected == {}


def test_a_stream_over_the_network_restarted_from_its_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    logs, ck = tmp_path / "logs", tmp_path / "ck"
    run_cluster(logs, n=3, events=30, seed=2)
    top = max(r[3] for n in list_nodes(logs) for r in iter_raw(node_directory(logs, n)))
    seen: list[tuple[int, tuple[int, int], int]] = []

    def run_once(address: str) -> int:
        before = len(seen)
        stream = (
            spark.readStream.format("epto")
            .option("epto.servers", address)
            .option("epto.token", TOKEN.decode())
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "12")
            .load()
        )
        q = (
            stream.writeStream.foreachBatch(lambda df, _: seen.extend(events(df)))
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(300)
        return len(seen) - before

    with serving([logs], TOKEN) as (server,):
        assert run_once(server.address) == 30
    for node in list_nodes(logs):
        append_epto(logs, node, [top + 1, top + 2, top + 3])
    # A new server (another port) for the restarted query: the checkpoint
    # holds offsets of the group's order, not of a connection.
    with serving([logs], TOKEN) as (server,):
        assert run_once(server.address) == 3
        assert run_once(server.address) == 0
    ids = [e for _, e, _ in seen]
    assert [o for o, _, _ in seen] == list(range(33))
    assert len(ids) == len(set(ids)) == 33  # 0 duplicates
    batch = events(spark.read.format("epto").load(str(logs)))
    assert [e for _, e, _ in batch] == ids  # 0 missing, the same ranks


def test_token_ring_logs_over_the_network_without_spark(tmp_path: Path) -> None:
    order = ring_logs(tmp_path, count=50)
    cut_middle_segment(tmp_path, 0)
    with serving([tmp_path], TOKEN, max_range=7, max_frame=1 << 16) as (server,):
        net = NetworkLogs([server.address], TOKEN)
        planned = plan(net, START, final_only=False)
        files = plan(str(tmp_path), START, final_only=False)
        assert planned.cursor == files.cursor
        assert [r[1:] for r in planned.runs] == [r[1:] for r in files.runs]
        assert {r[0] for r in planned.runs} == {server.address}
        rows = [
            row
            for batch in read_runs(planned.runs, ("offset", "source", "seq"), net.frames)
            for row in zip(*(c.to_pylist() for c in batch.columns), strict=True)
        ]
        net.close()
    assert rows == [(k, *order[k]) for k in range(50)]
    # Ranges of at most 7 records per request: many requests, no refusal.
    assert server.statistics.requests > 50 / 7 and server.statistics.rejected == {}


OPENED: list[socket.socket] = []


def raw_connection(address: str) -> tuple[socket.socket, bytes]:
    """A plain socket to a log server (closed by the test); the server's challenge."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    OPENED.append(sock)
    hello = b""
    while len(hello) < HELLO.size:
        hello += sock.recv(HELLO.size - len(hello))
    return sock, HELLO.unpack(hello)[3]


def reply(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    data = b""
    while True:
        part = sock.recv(4096)
        if not part:
            return data
        data += part


def prove(sock: socket.socket, challenge: bytes, token: bytes = TOKEN) -> None:
    sock.sendall(FRAME_LEN.pack(33) + b"H" + answer(token, challenge))


def test_the_log_server_refuses_hostile_clients_and_keeps_serving(tmp_path: Path) -> None:
    ring_logs(tmp_path, count=10)
    options = {"hello_timeout": 1.0, "max_connections": 2, "max_unauthenticated": 2}
    try:
        with serving([tmp_path], TOKEN, **options) as (server,):
            stats = server.statistics
            hostile_clients(server.address, stats)
    finally:
        for sock in OPENED:
            sock.close()
        OPENED.clear()
    assert stats.rejected == {
        "token": 2,
        "frame-size": 1,
        "malformed": 1,
        "hello-evicted": 1,
        "hello-timeout": 3,
        "connections": 1,
        "log": 1,
    }


def hostile_clients(address: str, stats: Any) -> None:
    """Each hostile client in turn (a connection is registered by the server
    once its hello arrived, so their order is the server's)."""
    with pytest.raises(LogServerError, match="refused: wrong token"):
        LogClient(address, b"not-the-token")
    # The answer to another connection's challenge proves nothing.
    first, challenge = raw_connection(address)
    other, _ = raw_connection(address)
    prove(other, challenge)
    assert b"wrong token" in reply(other)
    assert b"no token within" in reply(first)
    # A frame longer than any request, before and after authenticating.
    sock, _ = raw_connection(address)
    sock.sendall(FRAME_LEN.pack(1 << 30))
    assert b"exceeds" in reply(sock)
    sock, challenge = raw_connection(address)
    prove(sock, challenge)
    sock.sendall(FRAME_LEN.pack(3) + b"Xyz")
    assert b"unknown request" in reply(sock)
    # Silent connections: evicted by newer ones, or timed out.
    silent = [raw_connection(address)[0] for _ in range(3)]
    assert b"too many connections authenticating" in reply(silent[0])
    assert b"no token within" in reply(silent[1]) and b"no token within" in reply(silent[2])
    # Authenticated connections are bounded.
    held = [LogClient(address, TOKEN), LogClient(address, TOKEN)]
    with pytest.raises(LogServerError, match="refused: too many connections"):
        LogClient(address, TOKEN)
    # A request for a node it does not hold: one line, the connection stays.
    with pytest.raises(LogServerError, match="could not answer: no log of node 99 here"):
        held[0].keys(99, 0)
    assert held[0].listing().keys() == {0, 1, 2}
    for client in held:
        client.close()
    deadline = time.monotonic() + 10
    while stats.open_connections:  # the server sees the clients leave
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with LogClient(address, TOKEN) as client:  # still serving
        assert len(client.keys(1, 0).indices) == 10


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"epto.servers": "127.0.0.1:1"}, "epto.servers needs one of epto.token"),
        ({"epto.servers": "nowhere", "epto.token": "t"}, "'nowhere' is not host:port"),
        ({"epto.token": "t", "path": "/tmp"}, "epto.token applies with epto.servers only"),
        (
            {"epto.servers": "127.0.0.1:1", "epto.token": "t", "path": "/tmp"},
            "either log files (a path) or members (epto.servers)",
        ),
        (
            {"epto.servers": "127.0.0.1:1", "epto.token": "t", "rows": "per-node"},
            "rows=per-node reads log files",
        ),
        ({"epto.server": "127.0.0.1:1"}, "did you mean epto.servers?"),
    ],
)
def test_network_option_errors(options: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_options(options, streaming=False)
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"epto.servers": "127.0.0.1:1"}, "ConfigurationError: epto.servers needs one of"),
        ({"epto.servers": "127.0.0.1:1", "epto.token": "t"}, "cannot reach the epto log server"),
    ],
)
def test_network_errors_reach_the_user_in_one_line(
    spark: Any, options: dict[str, str], says: str
) -> None:
    with pytest.raises(Exception) as info:
        spark.read.format("epto").options(**options).load().collect()
    message = str(info.value).split(" SQLSTATE")[0].strip()
    assert "\n" not in message and "Traceback" not in message
    assert says in message


def test_a_refused_token_in_one_line(spark: Any, tmp_path: Path) -> None:
    ring_logs(tmp_path, count=4)
    with serving([tmp_path], TOKEN) as (server,):
        reader = spark.read.format("epto").option("epto.servers", server.address)
        with pytest.raises(Exception) as info:
            reader.option("epto.token", "wrong").load().collect()
    message = str(info.value).split(" SQLSTATE")[0].strip()
    assert "\n" not in message and "refused: wrong token" in message


def test_epto_node_serves_its_log_under_the_group_key(tmp_path: Path) -> None:
    key = tmp_path / "group.key"
    subprocess.run(
        [sys.executable, "-m", "epto", "keygen", "group", str(key)], check=True, timeout=60
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "epto",
            "node",
            "--id",
            "1",
            "--log-dir",
            str(tmp_path / "logs"),
            "--serve-log",
            "127.0.0.1:0",
            "--group-key-file",
            str(key),
            "--duration",
            "30",
            "--broadcast",
            "a",
            "--broadcast",
            "b",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("log-server 1 "), line
        address = line.split()[2]
        from epto.keys import load_group_key

        token = group_token(load_group_key(key).secret)
        net = NetworkLogs([address], token)
        deadline = time.monotonic() + 30
        while plan(net, START, final_only=False).cursor.next < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        planned = plan(net, START, final_only=False)
        payloads = [
            p for b in read_runs(planned.runs, ("payload",), net.frames) for p in b.column(0)
        ]
        net.close()
        assert [p.as_py() for p in payloads] == [b"a", b"b"]
        with pytest.raises(LogServerError, match="wrong token"):
            LogClient(address, b"x" * 64)
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()


def test_a_busy_server_is_asked_again(tmp_path: Path) -> None:
    """Tasks may outnumber a server's connections: a refused task's client
    waits for a free one instead of failing the task."""
    import threading

    ring_logs(tmp_path, count=5)
    with serving([tmp_path], TOKEN, max_connections=1) as (server,):
        held = LogClient(server.address, TOKEN)
        release = threading.Timer(0.3, held.close)
        release.start()
        net = NetworkLogs([server.address], TOKEN, timeout=30)
        try:
            assert net.nodes() == [0, 1, 2]
        finally:
            release.join()
            net.close()
        assert server.statistics.rejected["connections"] >= 1


def test_a_segment_larger_than_a_frame_is_sent_in_several(tmp_path: Path) -> None:
    """Frames stay within the server's bound, positions included; every
    record arrives once, in order."""
    from epto.log import DeliveryLogWriter

    with DeliveryLogWriter(tmp_path, 0) as w:  # one segment of 3,000 records
        for k in range(3000):
            w.append_fields(source=1, seq=k, ts=0, payload=b"p" * (k % 40), delivered_at=1)
    with serving([tmp_path], TOKEN, max_frame=1 << 16) as (server,):
        client = LogClient(server.address, TOKEN)
        parts = list(client.frames(0, 0, 3000))
        client.close()
    assert len(parts) > 3 and all(len(data) + 4 * len(pos) < 1 << 16 for data, pos in parts)
    seqs = [
        s
        for data, positions in parts
        for s in decode(data, positions, 0, ("seq",)).column(0).to_pylist()
    ]
    assert seqs == list(range(3000))


def test_json_offsets_over_the_group_order(spark: Any, tmp_path: Path) -> None:
    """``{"offset": N}`` under rows=events: a batch read of offsets [10, 25),
    from the files and over the network alike, and a stream that starts at 30."""
    logs = tmp_path / "logs"
    run_cluster(logs, n=3, events=40, seed=3, segment_bytes=1024)
    whole = events(spark.read.format("epto").load(str(logs)))
    span = {"startingOffsets": '{"offset": 10}', "endingOffsets": '{"offset": 25}'}
    files = events(spark.read.format("epto").options(**span).load(str(logs)))
    with serving([logs], TOKEN) as (server,):
        over_network = events(network(spark, [server], maxRecordsPerPartition="4", **span))
    assert files == over_network == whole[10:25]
    seen: list[tuple[int, tuple[int, int], int]] = []
    q = (
        spark.readStream.format("epto")
        .option("startingOffsets", '{"offset": 30}')
        .load(str(logs))
        .writeStream.foreachBatch(lambda df, _: seen.extend(events(df)))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(300)
    final = plan(str(logs), START, final_only=True).cursor.next
    assert seen == whole[30:final] and final > 30
    with pytest.raises(ConfigurationError, match="is before startingOffsets"):
        parse_options(
            {"path": str(logs), **span, "endingOffsets": '{"offset": 5}'}, streaming=False
        )
