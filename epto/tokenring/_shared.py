"""What every part of a token-ring process reads: who it is, the configuration
it is in and its role, its order book, its failure detector, its counters and
its refusals. One small object, built by :class:`TokenRingProcess` and passed
to each part.

Rules:

* ``pid`` and ``cfg`` never change.
* ``config`` and ``role`` change only when a decided configuration is
  installed (``_change.ViewChange.install``) or when the process leaves the
  view for good (``TokenRingProcess._leave``, which also sets
  ``exclusion``, once); every other part only reads them.
* ``book`` (:class:`._sequencer.OrderBook`) and ``fd``
  (:class:`._membership.FailureDetector`) keep their own invariants; the parts
  call their methods.
* An event enters (a payload, a catch-up entry, a reported one) only if
  :meth:`Shared.authentic` says so; a refusal is counted in ``rejected`` by
  reason, which only grows.
"""

from __future__ import annotations

from collections.abc import Callable

from .._event import Event, ProcessId
from ._config import TokenRingConfig
from ._membership import FailureDetector, Role
from ._messages import RingConfig
from ._sequencer import OrderBook
from ._stats import Counters


class Shared:
    """The state every part of one process reads."""

    __slots__ = (
        "_verifier",
        "book",
        "cfg",
        "config",
        "counts",
        "exclusion",
        "fd",
        "pid",
        "rejected",
        "role",
    )

    def __init__(
        self,
        pid: ProcessId,
        cfg: TokenRingConfig,
        *,
        config: RingConfig,
        role: Role,
        verifier: Callable[[Event], str | None] | None,
    ) -> None:
        self.pid = pid
        self.cfg = cfg
        self.config = config
        self.role = role
        self.exclusion: str | None = None
        self.book = OrderBook(log_retention=cfg.log_retention)
        self.fd = FailureDetector()
        self.counts = Counters()
        self.rejected: dict[str, int] = {}
        self._verifier = verifier

    def authentic(self, event: Event) -> bool:
        """Whether ``event`` may enter (always, without a verifier)."""
        if self._verifier is None:
            return True
        reason = self._verifier(event)
        if reason is None:
            return True
        self.reject(reason)
        return False

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def k(self) -> int:
        """How many core members must hold a batch for it to become stable."""
        return self.cfg.effective_k(len(self.config.members), len(self.config.core))
