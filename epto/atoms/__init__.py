"""Sequencing atoms: pairwise total order for many overlapping groups (seed 003).

Only groups sharing two members or more need a common numbering; each such
exact overlap gets an atom, atoms are placed on member nodes and linked into a
polytree, and each group's messages follow one directed path through the atoms
that number them. See docs/atoms.md.
"""

from ._check import check_graph as check_graph
from ._graph import SequencingGraph as SequencingGraph
from ._model import Atom as Atom
from ._model import GraphChange as GraphChange

__all__ = [
    "Atom",
    "GraphChange",
    "SequencingGraph",
    "check_graph",
]
