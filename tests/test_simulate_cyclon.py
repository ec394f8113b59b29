"""The virtual-time network with Cyclon as peer sampling (``--pss cyclon``)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from epto.transports.simulation import Cluster, SimulationSpec, run_simulation

import epto
import epto.epidemic
from epto.cli import main

SPEC = SimulationSpec(
    processes=60,
    rounds=10,
    clock="global",
    pss="cyclon",
    view_size=20,
    shuffle_length=5,
    pss_warmup=30,
    seed=3,
)


@pytest.mark.parametrize("churn", [0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1])
def test_safety_holds_under_churn_with_cyclon(churn: float) -> None:
    """Churn from 0 to 10% of the processes per round (the range of the Fig. 8
    and Fig. 9 reproductions): integrity and total order hold in every run;
    holes are counted, and in these small runs there are none."""
    result = run_simulation(attrs.evolve(SPEC, churn=churn * SPEC.processes))
    assert result.order_violations == 0 and result.integrity_violations == 0
    assert result.events > 20 and result.events_delivered >= result.events - 2
    assert result.network.peer_messages_sent > 0
    assert result.holes == 0, result.report.summary()
    if churn >= 0.01:
        assert result.processes > SPEC.processes  # newcomers did join


def test_cyclon_run_is_deterministic() -> None:
    spec = attrs.evolve(SPEC, churn=1.0, loss=0.05, rounds=6, pss_warmup=10)
    a, b = run_simulation(spec).summary(), run_simulation(spec).summary()
    a.pop("wall_seconds")
    b.pop("wall_seconds")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_cluster_with_cyclon_nodes_mixes_views_and_drops_the_dead() -> None:
    config = epto.Config(fanout=6, ttl=8, round_interval=1.0)
    pss = epto.CyclonConfig(view_size=10, shuffle_length=4, shuffle_period=1.0)
    cluster = Cluster(40, seed=2, config=config, pss=pss)
    cluster.run_rounds(40)
    nodes = list(cluster.processes.values())
    assert all(isinstance(n, epto.epidemic.Node) and n.cyclon is not None for n in nodes)
    views = {pid: {d.pid for d in n.cyclon.view()} for pid, n in cluster.processes.items()}  # type: ignore[union-attr]
    assert all(len(v) >= 9 for v in views.values())
    indegree = {pid: sum(pid in v for v in views.values()) for pid in views}
    assert min(indegree.values()) >= 3
    dead = [0, 1, 2]
    for pid in dead:
        cluster.remove_process(pid)
    cluster.run_rounds(pss.view_size + 10)
    assert not any(
        d.pid in dead
        for n in cluster.processes.values()
        for d in n.cyclon.view()  # type: ignore[union-attr]
    )
    net = cluster.network_statistics()
    assert net.peer_messages_arrived > 0 and net.sent == 0  # nobody broadcast


def test_pss_options_are_validated() -> None:
    with pytest.raises(epto.ConfigurationError, match="pss"):
        Cluster(2, pss="cyclone")  # type: ignore[arg-type]
    with pytest.raises(epto.ConfigurationError, match="shuffle_length"):
        SimulationSpec(pss="cyclon", view_size=4, shuffle_length=8).validate()


def test_cli_simulate_with_cyclon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    status = main(
        [
            "simulate", "-n", "30", "--rounds", "5", "--clock", "global", "--pss", "cyclon",
            "--view-size", "12", "--shuffle-length", "4", "--pss-warmup", "20",
            "--churn", "0.02", "-q", "--json", str(out),
        ]
    )  # fmt: skip
    assert status == 0
    text = capsys.readouterr().out
    assert "peer sampling: Cyclon, view 12, shuffle 4" in text
    summary = json.loads(out.read_text())
    assert summary["parameters"]["pss"] == "cyclon"
    assert summary["network"]["peer_messages_sent"] > 0
    assert summary["order_violations"] == 0
