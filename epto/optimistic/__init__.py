"""Optimistic delivery with delay compensation (seed 001): the planner.

With a sequencer, every message goes to all members directly; each member
delivers it optimistically after an artificial delay chosen so that every
member sees the same spontaneous order, and finally when its sequence number
arrives. The planner computes those delays from one-way latencies ``W``
(``W[r][s]``: sender ``s`` to receiver ``r``) and send rates, three ways:

* :func:`seto_steady_state`: where SETO's adaptive rule settles
  (:class:`SetoDelays` is the rule itself);
* :func:`fast_seto`: the Fast SETO heuristic, O(N^2);
* :func:`optimal`: the optimum of the linear program, exact.

Each returns a :class:`Plan`. A token-ring group delivers optimistically with
``TokenRingConfig(optimistic=OptimisticConfig())``. See docs/optimistic.md.
"""

from ._config import OptimisticConfig as OptimisticConfig
from ._optimal import optimal as optimal
from ._plan import Plan as Plan
from ._planner import fast_seto as fast_seto
from ._planner import seto_steady_state as seto_steady_state
from ._seto import SetoDelays as SetoDelays

__all__ = ["OptimisticConfig", "Plan", "SetoDelays", "fast_seto", "optimal", "seto_steady_state"]
