"""The configuration of a sequencing-atoms group, and the memberships the
paper's evaluation draws (seed 003: Zipf-sized groups over uniform members)."""

from __future__ import annotations

import random
from collections.abc import Iterable

import attrs

from .._errors import ConfigurationError
from ._graph import SequencingGraph


def _node_set(nodes: Iterable[int] | None) -> frozenset[int] | None:
    return None if nodes is None else frozenset(nodes)


@attrs.frozen(kw_only=True)
class AtomsConfig:
    """What every node of an atoms deployment shares: the sequencing graph
    (built from the same membership everywhere) and the bound on messages a
    node buffers while they wait for their turn."""

    graph: SequencingGraph
    max_pending: int = 100_000
    nodes: frozenset[int] | None = attrs.field(default=None, converter=_node_set)
    """Every node of the deployment (None: the members of the graph's
    groups and its atoms' hosts, or a node's configured members)."""
    coordinator: int | None = None
    """The node that changes the graph (None: the smallest node)."""
    suspect_after: float | None = None
    """The crash detector's silence in seconds (None: no detector)."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise ConfigurationError(
                f"AtomsConfig.max_pending must be a positive int, got {self.max_pending!r}"
            )


def zipf_memberships(
    nodes: int, groups: int, rng: random.Random, *, exponent: float = 1.0
) -> dict[int, frozenset[int]]:
    """``groups`` groups over nodes ``0 .. nodes-1``: sizes drawn from a Zipf
    law truncated to ``2 .. nodes`` (weight ``1 / size**exponent``), members
    drawn uniformly at random (the seed's evaluation, whose exponent and
    member rule are unstated; docs/atoms.md)."""
    if nodes < 2 or groups < 1:
        raise ConfigurationError(f"need at least 2 nodes and 1 group, got {nodes}, {groups}")
    sizes = list(range(2, nodes + 1))
    weights = [1.0 / size**exponent for size in sizes]
    out = {}
    for group in range(groups):
        size = rng.choices(sizes, weights)[0]
        out[group] = frozenset(rng.sample(range(nodes), size))
    return out
