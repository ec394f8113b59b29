"""When a replica's audits say its state is wrong (sans-IO)."""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["AuditVerdicts"]


class AuditVerdicts:
    """The latest comparable verdict of each peer ("your digest at my cut
    matches mine", or not); :meth:`record` says when to fetch the state again:
    at least two peers (``min_wrong``) contradict this replica and more
    contradict than confirm.

    Counting peers, not audits, matters: a correct replica in a group of
    three whose third member has a hole asks the two others in turn, and
    over any five audits three may be the wrong member's contradictions.
    Counted per peer it has one confirmation and one contradiction and keeps
    its state; the member with the hole has two contradictions and fetches.
    With one peer alone nobody can tell which of two replicas is wrong, and
    the state is never fetched on audits. An EpTO replica passes
    ``min_wrong=1``: its verdict only starts a decision that every replica
    computes alike (docs/rsm.md, *A partition with no majority*), which
    keeps whatever a majority may hold, so two ready replicas on different
    branches (the others down or recovering) agree again too.
    """

    def __init__(self, *, min_wrong: int = 2) -> None:
        self._latest: dict[Hashable, bool] = {}
        self._min_wrong = min_wrong

    def forget(self, peer: Hashable) -> None:
        """``peer`` is not ready (or does not answer): its last verdict, of a
        state it may no longer hold, no longer counts."""
        self._latest.pop(peer, None)

    def record(self, peer: Hashable, matches: bool) -> bool:
        """Note ``peer``'s verdict; whether the state must be fetched again
        (the verdicts are then forgotten: the fetched state starts afresh)."""
        self._latest[peer] = matches
        wrong = sum(not v for v in self._latest.values())
        if wrong >= self._min_wrong and wrong > len(self._latest) - wrong:
            self._latest.clear()
            return True
        return False
