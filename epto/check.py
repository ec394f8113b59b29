"""Checking what a group delivered: integrity, total order, agreement.

Total order holds when one sequence of events is consistent with every
process's delivery sequence, that is, when the union over all processes of
the edges "a was delivered right before b" has no cycle. Comparing processes
two by two while skipping events one of them lacks (JEpTO, Algorithm 3) is
not enough: with ``a, b`` at one process, ``b, c`` at a second and ``c, a``
at a third, every pair agrees on the events it shares, yet the union is the
cycle a -> b -> c -> a and no single order fits all three. The graph test
finds such cycles of any length, as well as the plain ``a, x, b`` against
``b, y, a``.

Sequencing atoms (many overlapping groups) promise less: *pairwise* total
order, any two processes that both deliver two messages deliver them in the
same order. The three sequences above satisfy it (each pair shares one event
at most). :func:`check_pairwise` judges that mode, with per-group agreement
and liveness (nothing stuck at quiescence).

Every violation names its events and, for order, a process witnessing each
edge of the cycle, so a failing run can be read, not just counted.

What clients of a replicated object saw is judged apart:
:func:`check_linearizable` decides whether a history of register or
grow-only set operations (invocation, completion, result; indeterminate
ones included) is linearizable, key by key, with Wing and Gong's search as
improved by Lowe ("Testing for linearizability", G. Lowe).
"""

from ._delivery_check import CheckReport as CheckReport
from ._delivery_check import IntegrityViolation as IntegrityViolation
from ._delivery_check import OrderViolation as OrderViolation
from ._delivery_check import check as check
from ._delivery_check import find_cycles as find_cycles
from ._linearizability import HistoryOp as HistoryOp
from ._linearizability import LinearizabilityVerdict as LinearizabilityVerdict
from ._linearizability import check_linearizable as check_linearizable
from ._pairwise import PairwiseReport as PairwiseReport
from ._pairwise import PairwiseViolation as PairwiseViolation
from ._pairwise import check_pairwise as check_pairwise

__all__ = [
    "CheckReport",
    "HistoryOp",
    "IntegrityViolation",
    "LinearizabilityVerdict",
    "OrderViolation",
    "PairwiseReport",
    "PairwiseViolation",
    "check",
    "check_linearizable",
    "check_pairwise",
    "find_cycles",
]
