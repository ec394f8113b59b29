"""The simulator runs the decisions a real node's endpoint makes: each
simulated process sits behind the same message-level adapter an endpoint
holds (``epto.endpoint``), so a payload over the limit is refused in a
simulated run exactly as by a real node, and the holes a simulated process
counts are the holes its deliveries show."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from epto.transports.simulation import Cluster, SimulationObserver

from epto import Config, Delivery, Limits, LocalProtocolError, ProcessId
from epto.endpoint import (
    AtomsAdapter,
    EptoAdapter,
    EptoEndpoint,
    NodeConfig,
    TokenRingAdapter,
    TokenRingEndpoint,
)
from epto.tokenring import TokenRingConfig

LIMITS = Limits(max_payload_size=64)


def _endpoint(limits: Limits) -> EptoEndpoint:
    config = NodeConfig(
        pid=0,
        members={0: "a", 1: "b"},
        seed=0,
        epto=Config(fanout=1, ttl=3, round_interval=1.0),
        limits=limits,
    )
    return EptoEndpoint(config, now=0.0, rng=random.Random(0))


def _refusal(broadcast: object) -> str:
    with pytest.raises(LocalProtocolError) as info:
        broadcast(b"x" * (LIMITS.max_payload_size + 1), 0.0)  # type: ignore[operator]
    return str(info.value)


def test_epto_payload_over_the_limit_is_refused_as_by_a_real_node() -> None:
    sim = Cluster(3, seed=1, config=Config(fanout=2, ttl=3, round_interval=1.0), limits=LIMITS)
    real = _refusal(_endpoint(LIMITS).broadcast)
    simulated = _refusal(lambda payload, now: sim.broadcast(0, payload))
    assert simulated == real
    assert not sim.broadcasts  # nothing was broadcast, nothing observed
    sim.broadcast(0, b"x" * LIMITS.max_payload_size)  # at the limit: accepted
    assert len(sim.broadcasts) == 1
    # The very class a real endpoint holds.
    assert type(sim.endpoints[0]) is type(_endpoint(LIMITS).adapter) is EptoAdapter


def test_token_ring_payload_over_the_limit_is_refused_as_by_a_real_node() -> None:
    ring = Cluster(3, seed=1, config=TokenRingConfig(), limits=LIMITS)
    real = TokenRingEndpoint(
        NodeConfig(pid=0, members={0: "a"}, mode="token-ring", limits=LIMITS),
        0.0,
        rng=random.Random(0),
        wall=1.0,
    )
    assert type(ring.endpoints[0]) is type(real.adapter) is TokenRingAdapter
    assert _refusal(lambda payload, now: ring.broadcast(0, payload)) == _refusal(real.broadcast)
    assert not ring.broadcasts


def test_default_limits_are_a_real_nodes() -> None:
    sim = Cluster(2, seed=1)
    assert sim.limits == NodeConfig(pid=0).limits
    with pytest.raises(LocalProtocolError):
        sim.broadcast(0, b"x" * (sim.limits.max_payload_size + 1))


class _Seqs(SimulationObserver):
    def __init__(self) -> None:
        self.seqs: dict[ProcessId, list[tuple[ProcessId, int]]] = defaultdict(list)

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        self.seqs[pid].append((delivery.event.source, delivery.event.seq))


def _holes(delivered: list[tuple[ProcessId, int]]) -> int:
    """Sequence numbers skipped per source, in delivery order (one incarnation)."""
    last: dict[ProcessId, int] = {}
    holes = 0
    for source, seq in delivered:
        previous = last.get(source)
        if previous is None or seq > previous:
            if previous is not None:
                holes += seq - previous - 1
            last[source] = seq
    return holes


def test_holes_counted_in_a_simulated_run_are_the_deliveries_holes() -> None:
    # Lossy gossip with a small fanout and TTL: some events miss some processes.
    config = Config(fanout=1, ttl=2, round_interval=1.0)
    sim = Cluster(12, seed=3, config=config, loss=0.3)
    seqs = _Seqs()
    sim.add_observer(seqs)
    for i in range(60):
        sim.broadcast_at(0.5 * i, i % 4, b"e%d" % i)
    sim.run_until_quiescent(max_rounds=200)
    counted = {pid: sim.endpoints[pid].holes for pid in sim.endpoints}  # type: ignore[union-attr]
    expected = {pid: _holes(seqs.seqs[pid]) for pid in sim.endpoints}
    assert counted == expected
    assert sum(counted.values()) > 0  # the run has holes: the accounting ran


def test_hole_accounting_is_switchable_for_large_runs() -> None:
    config = Config(fanout=1, ttl=2, round_interval=1.0)
    sim = Cluster(6, seed=3, config=config, loss=0.3, count_holes=False)
    for i in range(20):
        sim.broadcast_at(0.5 * i, 0, b"e%d" % i)
    sim.run_until_quiescent(max_rounds=100)
    assert all(adapter.holes == 0 for adapter in sim.endpoints.values())  # type: ignore[union-attr]


def test_atoms_adapter_is_the_endpoints() -> None:
    from epto.atoms import AtomsConfig, SequencingGraph
    from epto.endpoint import AtomsEndpoint

    graph = SequencingGraph.build({1: [0, 1]})
    sim = Cluster(2, seed=1, config=AtomsConfig(graph=graph), limits=LIMITS)
    config = NodeConfig(
        pid=0,
        members={0: "a", 1: "b"},
        mode="atoms",
        atoms=AtomsConfig(graph=graph),
        limits=LIMITS,
    )
    real = AtomsEndpoint(config, 0.0, rng=random.Random(0), wall=1.0)
    assert type(sim.endpoints[0]) is type(real.adapter) is AtomsAdapter
    assert _refusal(lambda payload, now: sim.broadcast(0, payload)) == _refusal(real.broadcast)


def test_stream_engines_default_to_a_tcp_nodes_limits() -> None:
    from epto.transports._trio.tcp_config import TcpNodeConfig

    ring = Cluster(3, seed=1, config=TokenRingConfig())
    assert ring.limits == TcpNodeConfig().limits
    ring.broadcast(0, b"x" * 4096)  # what a token-ring node over TCP takes
    assert Cluster(2, seed=1).limits == NodeConfig(pid=0).limits  # EpTO: a UDP node's
