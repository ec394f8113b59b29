"""Sequencing atoms: pairwise total order for many overlapping groups (seed 003).

Only groups sharing two members or more need a common numbering; each such
exact overlap gets an atom, atoms are placed on member nodes and linked into a
polytree, and each group's messages follow one directed path through the atoms
that number them. The guarantee is **pairwise total order**: any two processes
that both deliver two messages deliver them in the same order (not one global
order). The graph changes at run time in epochs: the coordinator's change
(groups added and removed, a crashed host replaced) is installed at every
node, and every message of one epoch is delivered before any of the next.
See docs/atoms.md.
"""

from ._config import AtomsConfig as AtomsConfig
from ._config import zipf_memberships as zipf_memberships
from ._graph import SequencingGraph as SequencingGraph
from ._graph_check import check_graph as check_graph
from ._model import Atom as Atom
from ._model import GraphChange as GraphChange
from ._placement import Latencies as Latencies
from ._process import AtomsProcess as AtomsProcess
from ._process import AtomsStatistics as AtomsStatistics

__all__ = [
    "Atom",
    "AtomsConfig",
    "AtomsProcess",
    "AtomsStatistics",
    "GraphChange",
    "Latencies",
    "SequencingGraph",
    "check_graph",
    "zipf_memberships",
]
