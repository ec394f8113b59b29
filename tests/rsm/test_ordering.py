"""The promises a replicated state machine reads from its engine
(:func:`epto.endpoint.ordering_of`), instead of the engine's name."""

from __future__ import annotations

import pytest

from epto import ConfigurationError
from epto.atoms import AtomsConfig, SequencingGraph
from epto.endpoint import NodeConfig, Ordering, ordering_of

MEMBERS = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}


def test_the_token_ring_numbers_its_deliveries_in_a_view() -> None:
    config = NodeConfig(pid=1, members=MEMBERS, mode="token-ring")
    assert ordering_of(config) == Ordering(positions=True, view=True)


def test_epto_promises_neither() -> None:
    assert ordering_of(NodeConfig(pid=1, members=MEMBERS)) == Ordering(positions=False, view=False)


def test_auto_follows_the_engine_it_resolves_to() -> None:
    small = NodeConfig(pid=1, members=MEMBERS, mode="auto")
    large = NodeConfig(pid=1, members=MEMBERS, mode="auto", group_size=1000)
    assert ordering_of(small).view and not ordering_of(large).view


def test_atoms_is_refused_with_a_reason() -> None:
    config = NodeConfig(
        pid=1, members=MEMBERS, mode="atoms", atoms=AtomsConfig(graph=SequencingGraph())
    )
    with pytest.raises(ConfigurationError, match="mode='atoms'"):
        ordering_of(config)
