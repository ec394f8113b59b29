"""Byte endpoints in the simulator: ``Simulation(wire=True)`` runs every EpTO
process as a full endpoint, frames as bytes on the simulated links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from epto.transports.simulation import Cluster, SimulationObserver, WireProcess

from epto import Config, ConfigurationError, Delivery, GroupKey, ProcessId
from epto.cli import main
from epto.epidemic import FullView, Membership, PeerSampler

N = 8


class _Orders(SimulationObserver):
    def __init__(self) -> None:
        self.seqs: dict[ProcessId, list[tuple[int, int]]] = {}

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        event = delivery.event
        self.seqs.setdefault(pid, []).append((event.source, event.seq))


def _run(*, wire: bool, key: GroupKey | None = None) -> tuple[Cluster, _Orders]:
    config = Config.for_group(N, round_interval=1.0)
    cluster = Cluster(N, seed=3, config=config, wire=wire, wire_key=key)
    orders = _Orders()
    cluster.add_observer(orders)
    for i in range(6):
        cluster.broadcast_at(0.5 + 0.7 * i, i % N, b"payload %d" % i)
    cluster.run_until(60.0)
    return cluster, orders


@pytest.mark.parametrize("key", [None, GroupKey(key_id=7, secret=bytes(range(32)))])
def test_wire_simulation_delivers_the_message_level_order(key: GroupKey | None) -> None:
    _, plain = _run(wire=False)
    wired, orders = _run(wire=True, key=key)
    assert len(plain.seqs) == N
    assert all(len(seq) == 6 for seq in plain.seqs.values())
    assert orders.seqs == plain.seqs
    # Bytes travelled: every process is a full endpoint and refused nothing.
    for proc in wired.endpoints.values():
        assert isinstance(proc, WireProcess)
        assert proc.rejected() == {}


def test_forged_and_oversized_frames_are_refused_and_counted() -> None:
    cluster, orders = _run(wire=True, key=GroupKey(key_id=7, secret=bytes(range(32))))
    target = cluster.endpoints[0]
    assert isinstance(target, WireProcess)
    before = dict(orders.seqs)
    cluster.inject(1, 0, b"\x00" * 40)  # not a frame of this group
    cluster.inject(1, 0, b"\xff" * (cluster.limits.max_frame_size + 1))  # too large
    cluster.inject(1, 0, "not bytes")  # an object where a frame belongs
    cluster.run_until(cluster.now + 10.0)
    rejected = target.rejected()
    assert sum(rejected.values()) == 3, rejected
    assert orders.seqs == before  # nothing delivered from them
    assert cluster.quiescent()


def _sampler(pid: ProcessId, membership: Membership) -> PeerSampler:
    return FullView(pid, membership)


def test_wire_is_refused_where_it_does_not_apply() -> None:
    with pytest.raises(ConfigurationError):
        Cluster(4, seed=1, config=Config.for_group(4), wire=True, pss_seeds=1, sampler=_sampler)


def test_cli_wire_run_matches_the_message_level_run(tmp_path: Path) -> None:
    summaries = []
    for extra in ([], ["--wire"]):
        out = tmp_path / f"out{len(extra)}.json"
        args = ["simulate", "--processes", "12", "--events", "4", "--rounds", "4"]
        args += ["--latency", "constant", "--drift", "0", "--seed", "2", "--quiet"]
        assert main([*args, "--json", str(out), *extra]) == 0
        summaries.append(json.loads(out.read_text()))
    plain, wired = summaries
    assert "wire" not in plain["parameters"]
    assert wired["parameters"]["wire"] is True
    assert wired["ok"] and plain["ok"]
    for key in ("events", "deliveries", "holes", "order_violations"):
        assert wired[key] == plain[key], key
