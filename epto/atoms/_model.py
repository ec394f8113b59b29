"""The values a sequencing graph hands out: atoms and the cost of a change."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class Atom:
    """A sequencer for one double overlap.

    ``overlap`` is the exact intersection ``Gi ∩ Gj`` (two members or more) of
    at least one pair of groups; ``served`` holds every group that takes part
    in such a pair (the groups whose messages the atom numbers); ``host`` is the
    node that plays the atom: latency-blind, a member of ``overlap`` chosen when
    the atom is created and kept for its life; placed for latency, any site
    (a member of ``overlap`` with ``member_hosts``), which a change of the
    graph may move. ``id`` is never reused.
    """

    id: int
    overlap: frozenset[int]
    served: frozenset[int]
    host: int


@attrs.frozen(kw_only=True)
class GraphChange:
    """What one :meth:`~epto.atoms.SequencingGraph.add_group` or
    :meth:`~epto.atoms.SequencingGraph.remove_group` changed: the atoms
    created, the atoms retired, and the groups whose route is no longer the
    same (a new group with a route counts; a removed group does not; placed
    for latency, a group whose ingress moved counts too).
    """

    added: tuple[int, ...] = ()
    retired: tuple[int, ...] = ()
    rerouted: tuple[int, ...] = ()
    rebuilt: bool = False
    """True when the whole graph was laid out again (every route may have
    changed): the latency-blind incremental step failed, or the graph is
    placed for latency (every change lays it out again)."""
    moved: tuple[int, ...] = ()
    """Atoms that were live before the change and have another host after it
    (only a graph placed for latency moves atoms)."""
