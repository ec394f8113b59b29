"""EpTO's fanout and TTL from the EpTO paper's Lemmas 3 to 7.

Notation as in the paper (Matos, Mercier, Felber, Oliveira, Pereira, "EpTO:
an epidemic total order algorithm for large-scale distributed systems"):

* fanout (Lemmas 3, 4, 7): ``K = ceil(2e ln n / ln ln n * n/(n-α) * 1/(1-ε))``
  with churn α (processes replaced per round) and message loss ε;
* TTL with a global clock (Lemma 3): ``ceil((c+1) log2 n)``; with logical
  clocks (Lemma 4): ``2 ceil((c+1) log2 n)``; c > 1;
* round durations between δmin and δmax (Lemma 5): the TTL is multiplied by
  the drift ratio ``δmax/δmin`` (and rounded up);
* latency bounded by the round duration (Lemma 6): one more round.

The bounds hold "with high probability" for large n; below about 16 processes
``ln ln n`` is tiny or negative and the formula asks for more peers than
exist, so the fanout is capped at ``n - 1`` (every other process). The paper's
own simulations show much smaller TTLs work in practice (TTL 5 for n = 100 with
a global clock and no holes); these functions return the safe values and the
caller may go lower knowingly.
"""

from .epidemic._params import Parameters as Parameters
from .epidemic._params import derive_parameters as derive_parameters
from .epidemic._params import fanout_for as fanout_for
from .epidemic._params import ttl_for as ttl_for

__all__ = [
    "Parameters",
    "derive_parameters",
    "fanout_for",
    "ttl_for",
]
