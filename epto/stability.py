"""Exposing stability to the application (EpTO paper, section 8.4).

An event a process has received but not yet delivered is not yet known to be
held by everyone. This module estimates, from the balls-and-bins model that
underlies EpTO's dissemination, the probability that it is: a copy whose ttl
is ``r`` has been gossiped for about ``r`` rounds, each process holding it
sending it to ``K`` uniformly random peers per round.

The model is the mean-field recurrence of push gossip. With ``x_t`` the
fraction of the ``n`` processes holding the event after ``t`` rounds
(``x_0 = 1/n``), a process that does not hold it receives none of the
``x_t n K`` copies of round ``t`` with probability ``(1 - 1/n)^(x_t n K)``:

    x_{t+1} = 1 - (1 - x_t) (1 - 1/n)^(x_t n K)

The probability that one given process still lacks the event after ``r``
rounds is the product of those per-round misses, and the probability that
*every* process holds it is that, complemented, to the power ``n - 1``
(treating processes as independent, which the model does).

These are estimates for a loss-free, churn-free group with a uniform peer
sampler; message loss ``ε`` is modelled by scaling ``K`` by ``1 - ε``. Use them
to trade latency for certainty (act on an event once ``all_hold`` is high
enough); the total order itself never depends on them.
"""

from .epidemic._stability import StabilityEstimate as StabilityEstimate
from .epidemic._stability import estimate as estimate

__all__ = [
    "StabilityEstimate",
    "estimate",
]
