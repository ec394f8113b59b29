"""SETO's adaptive delay rule (seed 001 Figure 2; notes-seed-001 §1.2 rules 1-6).

One :class:`SetoDelays` per process holds the delays it applies to each
sender's messages and, at the sequencer, the suggestions it has seen. It
decides nothing about messages: the process around it calls

1. :meth:`SetoDelays.suggestion` when it multicasts ``DATA(m, d)``;
2. :meth:`SetoDelays.scheduled` when ``DATA`` arrives (the optimistic time ``o``);
3. :meth:`SetoDelays.sequenced` at the sequencer, on optimistic delivery;
5. :meth:`SetoDelays.final` on each final delivery after the first, with the
   previous final message's sender, ``o`` and ``SEQ`` arrival time;
6. :meth:`SetoDelays.adjust` is rule 6, called by :meth:`final`.

With constant latencies it converges to :func:`epto.optimistic.seto_steady_state`
for ``0 < alpha < 1``; ``alpha = 0`` diverges (the notes), so it is refused.
"""

from __future__ import annotations

import math

from .._errors import ConfigurationError
from ._plan import check_process


class SetoDelays:
    """The per-process state of SETO's rule: ``delays[j]`` is what this
    process adds to messages from ``j``; ``alpha`` (default 0.95, Appia's) is
    the weight of the old delay in the exponential smoothing."""

    __slots__ = ("_delays", "_suggestions", "alpha", "me", "sequencer")

    def __init__(self, size: int, me: int, sequencer: int, *, alpha: float = 0.95) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"size must be a positive int, got {size!r}")
        self.me = check_process(me, size, "me")
        self.sequencer = check_process(sequencer, size, "sequencer")
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
            raise ConfigurationError(
                f"alpha must be strictly between 0 and 1 (0 diverges), got {alpha!r}"
            )
        self.alpha = float(alpha)
        self._delays = [0.0] * size
        self._suggestions = [0.0] * size

    @property
    def delays(self) -> tuple[float, ...]:
        """The delay this process adds to each sender's messages."""
        return tuple(self._delays)

    def suggestion(self) -> float:
        """Rule 1: the ``d`` to send with a new message, ``max(delay) -
        delay[sequencer]``."""
        return max(self._delays) - self._delays[self.sequencer]

    def scheduled(self, sender: int, now: float) -> float:
        """Rule 2: when a message from ``sender`` that arrives at ``now`` is
        to be delivered optimistically."""
        return now + self._delays[sender]

    def sequenced(self, sender: int, suggestion: float) -> None:
        """Rule 3, at the sequencer only: it sequenced a message from
        ``sender`` that carried ``suggestion``; it delays its own messages by
        the largest suggestion seen."""
        if self.me != self.sequencer:
            raise ConfigurationError("only the sequencer records suggestions")
        if not math.isfinite(suggestion):
            raise ConfigurationError(f"suggestion must be finite, got {suggestion!r}")
        self._suggestions[sender] = suggestion
        self._delays[self.me] = max(self._suggestions)

    def final(
        self,
        *,
        previous_sender: int,
        previous_scheduled: float,
        previous_seq_arrival: float,
        sender: int,
        scheduled: float,
        seq_arrival: float,
    ) -> None:
        """Rule 5: the message of ``sender`` was finally delivered right after
        the one of ``previous_sender``; ``scheduled`` are their optimistic
        times ``o``, ``seq_arrival`` when their ``SEQ`` arrived. Shrinks the
        delay of the sender whose message came relatively too late."""
        if sender == previous_sender:
            return
        delta = (seq_arrival - previous_seq_arrival) - (scheduled - previous_scheduled)
        if delta > 0:
            self.adjust(previous_sender, sender, delta)
        else:
            self.adjust(sender, previous_sender, -delta)

    def adjust(self, i: int, j: int, d: float) -> None:
        """Rule 6: ``v = delay[i] * alpha + (delay[i] - d) * (1 - alpha)``;
        ``delay[i] = v`` if positive, else ``delay[i] = 0`` and ``delay[j]``
        grows by ``|v|``."""
        v = self._delays[i] * self.alpha + (self._delays[i] - d) * (1 - self.alpha)
        if v > 0:
            self._delays[i] = v
        else:
            self._delays[i] = 0.0
            self._delays[j] += -v
