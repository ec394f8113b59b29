"""A datagram node refuses a configuration for another engine with a message
that names that engine and where it runs."""

from __future__ import annotations

import pytest
from epto.transports.trio_node import open_node

from epto import ConfigurationError
from epto.atoms import AtomsConfig, SequencingGraph
from epto.endpoint import NodeConfig

MEMBERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002"}


def test_open_node_names_the_atoms_node_for_an_atoms_configuration() -> None:
    config = NodeConfig(
        pid=1, members=MEMBERS, mode="atoms", atoms=AtomsConfig(graph=SequencingGraph())
    )
    with pytest.raises(ConfigurationError, match=r"mode='atoms'.*AtomsNode") as caught:
        open_node(config)
    assert "token ring" not in str(caught.value)


def test_the_zmq_node_names_the_atoms_node_too() -> None:
    pytest.importorskip("zmq")
    from epto.transports.zmq_node import ZmqNode

    config = NodeConfig(
        pid=1, members=MEMBERS, mode="atoms", atoms=AtomsConfig(graph=SequencingGraph())
    )
    with pytest.raises(ConfigurationError, match=r"mode='atoms'.*AtomsNode"):
        ZmqNode(config)
