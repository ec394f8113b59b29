"""The transit-stub latency model: a deterministic, symmetric matrix of
propagation delays where hosts of a cluster are close and clusters are far,
its parameters checked, and selectable in a simulation spec."""

from __future__ import annotations

import random
import statistics

import pytest
from epto.transports.simulation import SimulationSpec, TransitStubLatency

from epto import ConfigurationError


def test_deterministic_symmetric_and_clustered() -> None:
    model = TransitStubLatency(64, seed=5)
    assert model.routers == 10_000
    matrix = model.matrix()
    assert matrix == TransitStubLatency(64, seed=5).matrix()
    assert matrix != TransitStubLatency(64, seed=6).matrix()
    rng = random.Random(0)
    for i in range(64):
        assert matrix[i][i] == 0.0 == model.sample(i, i, rng)
        for j in range(64):
            assert matrix[i][j] == pytest.approx(matrix[j][i])
            assert model.sample(i + 64, j, rng) == matrix[i][j]
            if i != j:
                assert matrix[i][j] >= 2.0  # two access links at least
    inside = [matrix[i][j] for i in range(64) for j in range(64) if i != j and i // 8 == j // 8]
    across = [matrix[i][j] for i in range(64) for j in range(64) if i // 8 != j // 8]
    assert max(inside) < statistics.median(across)
    assert model.maximum == max(max(row) for row in matrix)


def test_shortest_paths_obey_the_triangle_inequality() -> None:
    matrix = TransitStubLatency(40, seed=2, cluster_size=4).matrix()
    for i in range(40):
        for j in range(40):
            for k in range(0, 40, 7):
                # Each leg pays its own access links, so the detour costs more.
                assert matrix[i][j] <= matrix[i][k] + matrix[k][j] + 1e-9


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hosts": 0},
        {"hosts": 8, "cluster_size": 0},
        {"hosts": 8, "stub_edges": 1.5},
        {"hosts": 8, "world": -1.0},
        {"hosts": 400, "cluster_size": 1, "transit_domains": 2, "transit_routers": 2},
    ],
)
def test_bad_parameters_refused(kwargs: dict[str, int | float]) -> None:
    with pytest.raises(ConfigurationError):
        TransitStubLatency(**kwargs)  # type: ignore[arg-type]


def test_selectable_in_a_spec() -> None:
    spec = SimulationSpec(processes=24, latency="transit-stub", seed=3)
    spec.validate()
    model = spec.latency_model()
    assert isinstance(model, TransitStubLatency)
    assert model.matrix() == TransitStubLatency(24, seed=3).matrix()
