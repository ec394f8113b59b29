"""Replay protection: a sliding window over each sender's frame counter.

Every sealed frame carries a 64-bit counter that its sender increases by one
per frame. A receiver remembers, per sender, the highest counter it accepted
and a bitmap of the ``size`` counters below it (the IPsec / DTLS anti-replay
window, RFC 4303 section 3.4.3). A counter already seen, or older than the
window, is a replay. Memory is bounded: ``size`` bits per sender and at most
``max_senders`` senders, the least recently heard-from evicted first.
"""

from __future__ import annotations

from collections import OrderedDict

from .._errors import ConfigurationError
from .._event import ProcessId


class ReplayWindow:
    """Per-sender anti-replay windows.

    Check with :meth:`fresh` before the (costlier) authentication of a frame
    and record with :meth:`accept` only after it authenticated, so that a
    forged frame cannot advance the window.
    """

    __slots__ = ("_mask", "_senders", "evicted", "max_senders", "size")

    def __init__(self, size: int = 4096, max_senders: int = 65536) -> None:
        if size < 1 or max_senders < 1:
            raise ConfigurationError("ReplayWindow size and max_senders must be positive")
        self.size = size
        self.max_senders = max_senders
        self._mask = (1 << size) - 1
        self._senders: OrderedDict[ProcessId, tuple[int, int]] = OrderedDict()
        self.evicted = 0
        """Senders forgotten to stay within ``max_senders``."""

    def fresh(self, sender: ProcessId, counter: int) -> bool:
        """Whether ``counter`` from ``sender`` has not been accepted yet and is
        not older than the window."""
        state = self._senders.get(sender)
        if state is None:
            return True
        high, bitmap = state
        if counter > high:
            return True
        behind = high - counter
        return behind < self.size and not (bitmap >> behind) & 1

    def accept(self, sender: ProcessId, counter: int) -> None:
        """Record ``counter`` as seen (call after :meth:`fresh` returned True and
        the frame authenticated)."""
        state = self._senders.get(sender)
        if state is None:
            if len(self._senders) >= self.max_senders:
                self._senders.popitem(last=False)
                self.evicted += 1
            self._senders[sender] = (counter, 1)
            return
        self._senders.move_to_end(sender)
        high, bitmap = state
        if counter > high:
            shift = counter - high
            bitmap = ((bitmap << shift) | 1) & self._mask if shift < self.size else 1
            self._senders[sender] = (counter, bitmap)
        else:
            self._senders[sender] = (high, bitmap | (1 << (high - counter)))

    def __len__(self) -> int:
        return len(self._senders)
