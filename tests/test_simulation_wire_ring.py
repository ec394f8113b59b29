"""The token ring's full endpoint in the seeded simulator:
``Simulation(wire=True)`` runs every member as a
:class:`epto.endpoint.TokenRingEndpoint`, its frames on simulated streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from epto.transports.simulation import (
    Cluster,
    SimulationObserver,
    SimulationSpec,
    TokenRingCluster,
    run_simulation,
)
from epto.transports.simulation._wire import FIRST_FRAME_LIMIT, StreamWireProcess
from epto.transports.trio_tcp import TcpNodeConfig

from epto import Delivery, EventId, GroupKey, Limits, ProcessId
from epto.atoms import AtomsConfig, SequencingGraph
from epto.cli import main
from epto.endpoint import AtomsEndpoint
from epto.tokenring import TokenRingConfig, splitting_registry
from epto.tokenring._messages import DataBatch
from epto.wire import HEADER_SIZE, FrameCodec

N = 5
EVENTS = 40
KEY = GroupKey(key_id=7, secret=bytes(range(32)))
CONFIG = TokenRingConfig().scaled(1000.0)


def _ring(*, wire: bool, key: GroupKey | None = None, **options: Any) -> TokenRingCluster:
    cluster = TokenRingCluster(
        N, CONFIG, seed=3, delay=(1.0, 5.0), wire=wire, wire_key=key, **options
    )
    for i in range(EVENTS):
        cluster.broadcast_at(10.0 + 3.7 * i, i % N, b"payload %d" % i)
    return cluster


def _wired(cluster: TokenRingCluster) -> Iterator[StreamWireProcess]:
    for proc in cluster.endpoints.values():
        assert isinstance(proc, StreamWireProcess)
        yield proc


def _one_total_order(cluster: TokenRingCluster) -> list[EventId]:
    """Every member delivered every event broadcast, in one and the same order."""
    orders = {tuple(seq) for seq in cluster.delivered.values()}
    assert len(orders) == 1, "members delivered different orders"
    (order,) = orders
    assert sorted(order) == sorted(cluster.broadcasts)
    assert len(cluster.delivered) == N
    report = cluster.check(staying=list(cluster.processes))
    assert report.ok, report
    return list(order)


@pytest.mark.parametrize("key", [None, KEY])
def test_wire_ring_delivers_the_events_of_the_message_level_run(key: GroupKey | None) -> None:
    plain = _ring(wire=False)
    plain.run_until(2000.0)
    wired = _ring(wire=True, key=key)
    wired.run_until(2000.0)
    assert plain.quiescent() and wired.quiescent()
    # The same events in one total order each. The orders themselves may
    # differ: a stream write carries everything one turn has for a peer
    # (one latency draw per write, not per message), so timing differs.
    assert sorted(_one_total_order(wired)) == sorted(_one_total_order(plain))
    for proc in _wired(wired):
        # Bytes travelled: every member is a full endpoint and refused nothing.
        assert proc.rejected() == {}
        assert not proc.streams_closed
        assert proc.endpoint.statistics().encode_failures == 0


def test_hostile_input_on_a_stream_is_refused_counted_and_the_run_delivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = _record_frames(monkeypatch)
    cluster = _ring(wire=True, key=KEY)
    cluster.run_until(60.0)  # streams are up, broadcasts go on until t = 155
    target = cluster.endpoints[0]
    assert isinstance(target, StreamWireProcess)
    real = [data for src, dest, data in sent if src == 1 and dest == 0][-1]
    forged = bytearray(real)
    forged[HEADER_SIZE + 4] ^= 0x40  # a nonce never used: the seal does not open
    hostile: list[tuple[ProcessId, object]] = [
        (1, bytes(forged)),  # forged: fails authentication
        (1, real),  # a replay of a frame 0 accepted
        (1, b"\x00" * 40),  # not a frame of this group
        (1, "not bytes"),  # an object where a frame belongs
        (2, b"\xff" * (cluster.limits.max_frame_size + 1)),  # too large: ends the stream
        (77, b"\x01" * 100),  # an outsider's stream: its first frame does not pass
        (78, b"\x01" * 5000),  # an outsider's first frame above the first-frame limit
    ]
    for src, data in hostile:
        cluster.inject(src, 0, data)
        cluster.run_until(cluster.now + 1.0)
    cluster.run_until(2000.0)
    assert target.rejected() == {
        "bad-tag": 1,
        "replay": 1,
        "bad-magic": 2,
        "not-a-frame": 1,
        "bad-length": 1,
    }
    # The outsider's stream was closed, as the TCP driver closes it; the
    # member's stream that the oversized frame ended was opened again.
    assert dict(target.streams_closed) == {"handshake-rejected": 1, "first-frame-too-large": 1}
    assert cluster.quiescent()
    _one_total_order(cluster)
    for proc in _wired(cluster):
        if proc is not target:
            assert proc.rejected() == {}


def test_wire_ring_streams_broken_by_a_partition_open_again() -> None:
    cluster = _ring(wire=True, key=KEY)
    cluster.run_until(40.0)
    sides = cluster.split([[0, 1], [2, 3, 4]])  # cut writes close their streams
    cluster.run_until(70.0)
    cluster.heal(sides)
    cluster.disconnect(4)  # every stream of 4 breaks
    cluster.run_until(90.0)
    cluster.reconnect(4)
    cluster.run_until(3000.0)
    assert cluster.network_statistics().cut > 0
    assert cluster.quiescent()
    for proc in _wired(cluster):
        # Every new stream opened with its opening frames and passed.
        assert proc.rejected() == {}
        assert not proc.streams_closed
    assert cluster.staying_members() == list(range(N))
    _one_total_order(cluster)


def _record_frames(monkeypatch: pytest.MonkeyPatch) -> list[tuple[ProcessId, ProcessId, bytes]]:
    """Every frame a wire token-ring member sends: ``(src, dest, frame)``."""
    sent: list[tuple[ProcessId, ProcessId, bytes]] = []
    messages_to_send = StreamWireProcess.messages_to_send

    def recording(self: StreamWireProcess) -> list[tuple[ProcessId, Any]]:
        out = messages_to_send(self)
        sent.extend((self.pid, dest, data) for dest, data in out)
        return out

    monkeypatch.setattr(StreamWireProcess, "messages_to_send", recording)
    return sent


def test_a_message_larger_than_a_frame_is_split_and_delivered_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = Limits.for_frame_size(1024)
    payloads = [bytes([i]) * (limits.max_payload_size - 8) for i in range(6)]
    assert sum(map(len, payloads[1:])) > limits.max_frame_size
    sent = _record_frames(monkeypatch)
    cluster = TokenRingCluster(N, CONFIG, seed=5, delay=(1.0, 5.0), wire=True, limits=limits)
    payloads_at = _Payloads()
    cluster.add_observer(payloads_at)

    def burst() -> None:
        # At one instant: the first leaves at once, the others are held
        # (broadcast_hold) and leave together, as one batch.
        for payload in payloads:
            cluster.broadcast(0, payload)

    cluster.at(50.0, burst)
    cluster.run_until(2000.0)
    assert cluster.quiescent()
    order = _one_total_order(cluster)
    assert order == [(0, seq) for seq in range(6)]
    assert payloads_at.payloads == {pid: payloads for pid in range(N)}
    assert all(len(data) <= limits.max_frame_size for _, _, data in sent)
    codec = FrameCodec(group=0, limits=limits, registry=splitting_registry())
    batches = [
        message.events
        for src, dest, data in sent
        if src == 0 and dest == 1
        for message in [_decoded(codec, data)]
        if isinstance(message, DataBatch)
    ]
    # The held broadcasts left as one batch, larger than a frame: it took
    # several frames, each within the limit, whose events are the batch's,
    # in order.
    assert len(batches) >= 2
    carried = [event.payload for batch in batches for event in batch]
    assert sum(map(len, carried)) > limits.max_frame_size
    assert carried == payloads[len(payloads) - len(carried) :]
    for proc in _wired(cluster):
        assert proc.rejected() == {}
        assert proc.endpoint.statistics().encode_failures == 0


class _Payloads(SimulationObserver):
    def __init__(self) -> None:
        self.payloads: dict[ProcessId, list[bytes]] = {}

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        self.payloads.setdefault(pid, []).append(delivery.event.payload)


def _decoded(codec: FrameCodec, data: bytes) -> object:
    frame = codec.receive(data)
    return None if frame is None else frame.message


def test_cli_token_ring_wire_run_matches_the_message_level_verdict(tmp_path: Path) -> None:
    summaries = []
    for extra in ([], ["--wire"]):
        out = tmp_path / f"out{len(extra)}.json"
        args = ["simulate", "--mode", "token-ring", "--processes", "5", "--events", "30"]
        args += ["--rounds", "10", "--seed", "1", "--quiet", "--json", str(out), *extra]
        assert main(args) == 0
        summaries.append(json.loads(out.read_text()))
    plain, wired = summaries
    assert "wire" not in plain["parameters"]
    assert wired["parameters"]["wire"] is True
    assert wired["ok"] and plain["ok"]
    for key in ("events", "events_delivered", "deliveries", "holes", "order_violations"):
        assert wired[key] == plain[key], key


def test_wire_ring_runs_in_run_simulation_with_loss() -> None:
    # Loss breaks streams (what was in flight is lost, the next write opens
    # a new stream with the opening frames): the ring repairs, every event
    # is delivered in one order.
    spec = SimulationSpec(
        mode="token-ring", processes=4, events=20, rounds=10, seed=2, loss=0.02, wire=True
    )
    result = run_simulation(spec)
    assert not result.failures, result.failures
    assert result.events == result.events_delivered == 20
    assert result.network.lost > 0


def test_stream_limits_match_the_tcp_driver() -> None:
    assert TcpNodeConfig(bind="127.0.0.1:0").first_frame_limit == FIRST_FRAME_LIMIT


def test_atoms_wire_run_matches_the_message_level_run() -> None:
    # Sequencing atoms are a stream endpoint too (AtomsEndpoint): the same
    # simulated streams. Their routes are fixed and every member answers at
    # once, so the runs deliver alike, pairwise order checked.
    results = []
    for wire in (False, True):
        spec = SimulationSpec(mode="atoms", processes=10, events=40, rounds=8, seed=4, wire=wire)
        results.append(run_simulation(spec))
    plain, wired = results
    assert not plain.failures and not wired.failures, wired.failures
    for key in ("events", "events_delivered", "deliveries", "holes", "order_violations"):
        assert getattr(wired, key) == getattr(plain, key), key
    assert wired.events_delivered == 40


def test_atoms_wire_members_are_full_endpoints_and_refuse_hostile_frames() -> None:
    memberships = {1: frozenset({0, 1, 2}), 2: frozenset({1, 2, 3}), 3: frozenset({3, 4, 5})}
    config = AtomsConfig(graph=SequencingGraph.build(memberships))
    runs = []
    for wire in (False, True):
        cluster = Cluster(6, seed=1, config=config, wire=wire, wire_key=KEY if wire else None)
        for i in range(12):
            cluster.broadcast_at(1.0 + i, i % 6, b"payload %d" % i)
        cluster.run_until(5.0)
        if wire:
            cluster.inject(2, 1, b"\x00" * 40)  # not a frame of this group
        cluster.run_until(200.0)
        assert cluster.quiescent()
        runs.append(cluster)
    plain, wired = runs
    target = wired.endpoints[1]
    assert isinstance(target, StreamWireProcess)
    assert isinstance(target.endpoint, AtomsEndpoint)
    assert target.rejected() == {"bad-magic": 1}
    assert wired.recorder.sequences == plain.recorder.sequences
    assert sum(map(len, wired.recorder.sequences.values())) > 12
