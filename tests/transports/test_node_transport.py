"""A TCP node built from a NodeConfig takes its transport settings from it:
derived when no ``tcp`` is given, and a given ``tcp`` may set the transport's
own fields but not contradict the configuration. Sequencing atoms and the
token ring follow the same rule."""

from __future__ import annotations

import pytest
from epto.transports.trio_atoms import AtomsNode
from epto.transports.trio_tcp import TcpNodeConfig, TokenRingNode

from epto import ConfigurationError, Limits
from epto.atoms import AtomsConfig, SequencingGraph
from epto.endpoint import NodeConfig

MEMBERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}


def _atoms(**changes: object) -> NodeConfig:
    graph = SequencingGraph.build({0: {1, 2, 3}})
    return NodeConfig(
        pid=2, members=MEMBERS, mode="atoms", atoms=AtomsConfig(graph=graph), **changes
    )


def _ring(**changes: object) -> NodeConfig:
    return NodeConfig(pid=2, members=MEMBERS, mode="token-ring", **changes)


def test_an_atoms_node_derives_its_transport_from_the_configuration() -> None:
    node = AtomsNode(_atoms(flush_timeout=2.5, delivery_buffer=77))
    assert node.tcp_config.bind == MEMBERS[2]  # its own entry of members
    assert node.tcp_config.flush_timeout == 2.5
    assert node.tcp_config.delivery_buffer == 77
    assert node.tcp_config.limits == TcpNodeConfig().limits  # stream limits by default
    assert node.config.limits == node.tcp_config.limits


def test_a_given_tcp_keeps_its_own_fields_and_takes_the_configurations() -> None:
    tcp = TcpNodeConfig(send_queue=5, max_connections=9)
    for node in (AtomsNode(_atoms(flush_timeout=2.5), tcp=tcp), TokenRingNode(_ring(), tcp=tcp)):
        assert node.tcp_config.send_queue == 5
        assert node.tcp_config.max_connections == 9
    atoms = AtomsNode(_atoms(flush_timeout=2.5), tcp=tcp)
    assert atoms.tcp_config.flush_timeout == 2.5
    assert atoms.tcp_config.bind == MEMBERS[2]


@pytest.mark.parametrize(
    ("field", "value"),
    [("flush_timeout", 9.0), ("bind", "127.0.0.1:9999"), ("limits", Limits(max_frame_size=4096))],
)
def test_a_given_tcp_that_contradicts_the_configuration_is_refused_by_name(
    field: str, value: object
) -> None:
    tcp = TcpNodeConfig(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=rf"AtomsNode: tcp\.{field}="):
        AtomsNode(_atoms(), tcp=tcp)
    with pytest.raises(ConfigurationError, match=rf"TokenRingNode: tcp\.{field}="):
        TokenRingNode(_ring(bind="127.0.0.1:0"), tcp=tcp)


def test_a_given_tcp_that_agrees_with_the_configuration_is_accepted() -> None:
    node = AtomsNode(_atoms(), tcp=TcpNodeConfig(bind=MEMBERS[2]))
    assert node.tcp_config.bind == MEMBERS[2]
