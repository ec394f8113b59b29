"""Per-source sets of sequence numbers stored as intervals.

Tagged out-of-order delivery must know whether an event was ever delivered,
forever, without a set that grows with every event. Sequence numbers of one
source are delivered almost contiguously, so a sorted list of half-open
intervals per source stays at one or a few intervals: memory grows with the
number of holes, not with the number of events.
"""

from __future__ import annotations

from bisect import bisect_right

from ._event import ProcessId


class SeqIntervals:
    __slots__ = ("_by_source",)

    def __init__(self) -> None:
        # source -> (starts, ends), parallel sorted lists of half-open [start, end)
        self._by_source: dict[ProcessId, tuple[list[int], list[int]]] = {}

    def __contains__(self, item: tuple[ProcessId, int]) -> bool:
        source, seq = item
        runs = self._by_source.get(source)
        if runs is None:
            return False
        starts, ends = runs
        if seq >= ends[-1]:
            return False
        i = bisect_right(starts, seq) - 1
        return i >= 0 and seq < ends[i]

    def add(self, source: ProcessId, seq: int) -> bool:
        """Record ``seq``; False if it was already there."""
        runs = self._by_source.get(source)
        if runs is None:
            self._by_source[source] = ([seq], [seq + 1])
            return True
        starts, ends = runs
        if ends[-1] == seq:
            # The usual case: the next number of the last interval.
            ends[-1] = seq + 1
            return True
        i = bisect_right(starts, seq) - 1
        if i >= 0 and seq < ends[i]:
            return False
        joins_left = i >= 0 and ends[i] == seq
        joins_right = i + 1 < len(starts) and starts[i + 1] == seq + 1
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1]
            del ends[i + 1]
        elif joins_left:
            ends[i] = seq + 1
        elif joins_right:
            starts[i + 1] = seq
        else:
            starts.insert(i + 1, seq)
            ends.insert(i + 1, seq + 1)
        return True

    def interval_count(self) -> int:
        return sum(len(starts) for starts, _ in self._by_source.values())

    def source_count(self) -> int:
        return len(self._by_source)
