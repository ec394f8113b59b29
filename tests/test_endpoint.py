"""The endpoints without any driver: bytes passed by hand between endpoints
in virtual time. The same harness runs both engines (it branches on nothing
engine-specific), as the driver loop does."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable

import pytest

import epto
from epto.atoms import AtomsConfig, SequencingGraph
from epto.check import check
from epto.endpoint import AtomsEndpoint, Endpoint, EptoEndpoint, NodeConfig, TokenRingEndpoint
from epto.tokenring import TokenRingConfig

LATENCY = 0.004
KEY = epto.GroupKey(key_id=1, secret=bytes(range(32)))


def _epto(pid: int, members: dict[int, str], **fields: object) -> EptoEndpoint:
    config = NodeConfig(
        pid=pid,
        members=members,
        seed=pid,
        epto=epto.Config(fanout=2, ttl=8, round_interval=0.01),
        **fields,  # type: ignore[arg-type]
    )
    return EptoEndpoint(config, now=0.0, rng=random.Random(pid))


def _ring(pid: int, members: dict[int, str], **fields: object) -> TokenRingEndpoint:
    config = NodeConfig(
        pid=pid,
        members=members,
        mode="token-ring",
        tokenring=TokenRingConfig(),
        limits=epto.Limits.for_frame_size(1 << 20, max_events_per_ball=4096),
        **fields,  # type: ignore[arg-type]
    )
    return TokenRingEndpoint(config, 0.0, rng=random.Random(pid), wall=1.0)


def _atoms(pid: int, members: dict[int, str], **fields: object) -> AtomsEndpoint:
    # One group of every member (the harness broadcasts to a node's only
    # group); overlapping groups are tests/atoms/test_endpoint_atoms.py's.
    graph = SequencingGraph.build({0: members})
    config = NodeConfig(
        pid=pid,
        members=members,
        mode="atoms",
        atoms=AtomsConfig(graph=graph),
        limits=epto.Limits.for_frame_size(1 << 16),
        **fields,  # type: ignore[arg-type]
    )
    return AtomsEndpoint(config, 0.0, rng=random.Random(pid), wall=1.0)


ENGINES: dict[str, Callable[..., Endpoint]] = {
    "epto": _epto,
    "token-ring": _ring,
    "atoms": _atoms,
}


class Wire:
    """Endpoints by address; every frame arrives ``LATENCY`` later."""

    def __init__(self, endpoints: dict[str, Endpoint]) -> None:
        self.endpoints = endpoints
        self.now = 0.0
        self.queue: list[tuple[float, int, str, bytes]] = []
        self.order = itertools.count()
        self.delivered: dict[int, list[epto.EventId]] = {e.pid: [] for e in endpoints.values()}

    def turn(self, endpoint: Endpoint) -> None:
        if self.now >= endpoint.get_timer():
            endpoint.handle_timer(self.now)
        for transmit in endpoint.frames_to_send(self.now):
            at = self.now + LATENCY
            heapq.heappush(self.queue, (at, next(self.order), transmit.address, transmit.data))
        while (delivery := endpoint.next_delivery()) is not None:
            self.delivered[endpoint.pid].append(delivery.event.id)

    def run_until(self, end: float) -> None:
        while self.now < end:
            timers = [e.get_timer() for e in self.endpoints.values()]
            upcoming = min([*timers, self.queue[0][0] if self.queue else end, end])
            self.now = max(self.now, upcoming)
            while self.queue and self.queue[0][0] <= self.now:
                _, _, address, data = heapq.heappop(self.queue)
                self.endpoints[address].receive(data, self.now)
            for endpoint in self.endpoints.values():
                self.turn(endpoint)


def _group(engine: str, n: int = 4, **fields: object) -> Wire:
    members = {pid: f"10.0.0.{pid}:9000" for pid in range(1, n + 1)}
    make = ENGINES[engine]
    return Wire({members[pid]: make(pid, members, **fields) for pid in members})


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_endpoints_deliver_one_order_from_bytes_alone(engine: str) -> None:
    wire = _group(engine)
    sent = set()
    for k, endpoint in enumerate(wire.endpoints.values()):
        for i in range(3):
            sent.add(endpoint.broadcast(b"%d-%d" % (k, i), wire.now))
        wire.turn(endpoint)
    wire.run_until(2.0)
    report = check(wire.delivered, broadcast=sent)
    assert report.ok, report.summary()
    sequences = list(wire.delivered.values())
    assert all(s == sequences[0] for s in sequences) and set(sequences[0]) == sent
    for endpoint in wire.endpoints.values():
        assert endpoint.flushed()
        assert endpoint.statistics().delivered == len(sent)
        assert endpoint.statistics().rejected == {}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_oversized_payload_is_refused_and_changes_nothing(engine: str) -> None:
    wire = _group(engine, 2)
    endpoint = next(iter(wire.endpoints.values()))
    before = endpoint.statistics()
    limit = (
        endpoint.config.limits if isinstance(endpoint, EptoEndpoint) else endpoint.limits
    ).max_payload_size
    with pytest.raises(epto.LocalProtocolError, match="max_payload_size"):
        endpoint.broadcast(bytes(limit + 1), 0.0)
    assert endpoint.statistics() == before


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_garbage_is_counted_never_raised(engine: str) -> None:
    wire = _group(engine, 2)
    endpoint = next(iter(wire.endpoints.values()))
    rng = random.Random(5)
    junk = [rng.randbytes(rng.randrange(0, 200)) for _ in range(50)]
    assert not any(endpoint.receive(data, 0.0) for data in junk)
    assert sum(endpoint.statistics().rejected.values()) == len(junk)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_statistics_change_nothing(engine: str) -> None:
    def run(look: bool) -> dict[int, list[epto.EventId]]:
        wire = _group(engine, 3)
        for endpoint in wire.endpoints.values():
            endpoint.broadcast(b"x", 0.0)
            if look:
                endpoint.statistics()
        for _ in range(200):
            wire.run_until(wire.now + 0.005)
            if look:
                for endpoint in wire.endpoints.values():
                    endpoint.statistics()
        return wire.delivered

    assert run(look=True) == run(look=False)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sealed_frames_are_bound_to_their_receiver(engine: str) -> None:
    wire = _group(engine, 3, group_key=KEY)
    one, two, three = wire.endpoints.values()
    one.broadcast(b"for everyone", 0.0)
    wire.run_until(0.05)
    wire.turn(one)
    one.broadcast(b"again", wire.now)
    frames = []
    for _ in range(100):
        if one.get_timer() <= wire.now:
            one.handle_timer(wire.now)
        frames = [t for t in one.frames_to_send(wire.now) if t.dest == two.pid]
        if frames:
            break
        wire.now += 0.005
    assert frames, "no frame for member 2"
    assert two.receive(frames[0].data, wire.now)  # its receiver takes it
    before = three.statistics().rejected.get("bad-tag", 0)
    assert not three.receive(frames[0].data, wire.now)  # any other member refuses it
    assert three.statistics().rejected["bad-tag"] == before + 1
