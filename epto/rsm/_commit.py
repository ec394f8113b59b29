"""When a replica's own command is in the group's order for good (sans-IO):
the majority commit rule of EpTO replicas (docs/rsm.md, *Acknowledgement*).

Rules:

* A command applied here at cut ``K`` with digest ``D`` there is
  **committed** once a majority of the replicas (the peers plus this one)
  hold the same prefix: their digest at ``K`` is ``D``. This replica counts
  while its own chain still has ``D`` at ``K`` (a fetched state may have
  replaced the prefix it applied the command in).
* Per peer, the highest cut of this replica's current chain the peer
  confirmed: the peer's digest at a cut this replica asked about (sending its
  own digest there) equals this replica's. The peer saw the match too and
  keeps that prefix for good (docs/rsm.md, *A partition with no majority*);
  a peer that is behind, whose latest digest matches this replica's there,
  is a verdict for the audits but no confirmation (it did not see the
  match): it is asked again at a cut it holds. The digest chains the whole
  prefix, so a peer that confirmed cut ``C`` confirms every command at or
  below ``C`` on this chain.
* A command whose prefix is no longer this replica's chain (an *orphan*,
  after a fetched state replaced it) is confirmed peer by peer with its own
  ``(K, D)``; it is released only if a majority of the peers still confirm it.
  One that never is stays pending: its call times out, never returns ok.
* A digest that differs from this replica's at the same cut is a
  contradiction: this replica or that peer applied another prefix. The
  verdict is handed to the audits (:class:`~._audit.AuditVerdicts`), which
  decide when to fetch the state again.
* Confirmations are kept per chain: :meth:`CommitTracker.reset` (a fetched
  state) forgets every peer's confirmed cut.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import attrs

from .._event import EventId
from ._replica import OrderKey, Replica

__all__ = ["CommitTracker"]


@attrs.define(slots=True)
class _Awaiting:
    key: OrderKey
    digest: bytes
    confirmers: set[Hashable] = attrs.field(factory=set)
    """Peers that confirmed this command's own (cut, digest) (orphans)."""


class CommitTracker:
    """The commands of one replica waiting for a majority (see the module)."""

    def __init__(self, peers: Iterable[Hashable]) -> None:
        self.peers = frozenset(peers)
        self.majority = (len(self.peers) + 1) // 2 + 1
        """Replicas (this one included) that must hold a command's prefix."""
        self._upto: dict[Hashable, OrderKey] = {}
        self._waiting: dict[EventId, _Awaiting] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, event: EventId, key: OrderKey, digest: bytes) -> None:
        """A command of this replica applied at ``key`` with ``digest`` there."""
        self._waiting[event] = _Awaiting(key, digest)

    def forget(self, event: EventId) -> None:
        self._waiting.pop(event, None)

    def reset(self) -> None:
        """A fetched state replaced the chain: peers' confirmations were of
        the old one."""
        self._upto.clear()

    def orphans(self, replica: Replica, limit: int) -> list[OrderKey]:
        """Cuts of waiting commands no longer on ``replica``'s chain (asked
        of the peers one by one), at most ``limit``, lowest first."""
        keys = sorted(
            {w.key for w in self._waiting.values() if replica.digest_at(w.key) != w.digest}
        )
        return keys[:limit]

    def record(
        self,
        peer: Hashable,
        replica: Replica,
        asked: Sequence[OrderKey | None],
        cut: OrderKey | None,
        digest: bytes | None,
        at: Sequence[bytes | None],
    ) -> bool | None:
        """A ready peer's answer: its latest ``(cut, digest)`` and its digests
        ``at`` the cuts ``asked`` (``asked[0]`` this replica's cut when it
        asked, the rest orphans' cuts). The verdict: True (the peer confirms
        a cut of this chain), False (a contradiction), None (nothing to
        compare)."""
        verdict: bool | None = None
        if asked and asked[0] is not None and at and at[0] is not None:
            mine = replica.digest_at(asked[0])
            if mine is not None:
                verdict = at[0] == mine
                if verdict:
                    self._confirm(peer, asked[0])
        if verdict is None and cut is not None and digest is not None:
            # Behind us: a verdict, not a confirmation (the peer did not see
            # the match, so it did not promise to keep that prefix).
            mine = replica.digest_at(cut)
            if mine is not None:
                verdict = mine == digest
        by_key: dict[OrderKey, bytes | None] = {}
        for key, theirs in zip(asked[1:], at[1:], strict=False):
            if key is not None:
                by_key[key] = theirs
        if by_key:
            for w in self._waiting.values():
                if w.key in by_key and by_key[w.key] == w.digest:
                    w.confirmers.add(peer)
        return verdict

    def digest_of(self, key: OrderKey) -> bytes | None:
        """The digest a waiting command was applied with at ``key``."""
        for w in self._waiting.values():
            if w.key == key:
                return w.digest
        return None

    def upto(self, peer: Hashable) -> OrderKey | None:
        """The highest cut of this chain ``peer`` confirmed (None: none)."""
        return self._upto.get(peer)

    def _confirm(self, peer: Hashable, cut: OrderKey) -> None:
        if peer in self.peers:
            previous = self._upto.get(peer)
            if previous is None or cut > previous:
                self._upto[peer] = cut

    def released(self, replica: Replica) -> list[EventId]:
        """The waiting commands a majority now holds (forgotten here)."""
        out = []
        for event, w in self._waiting.items():
            if replica.digest_at(w.key) == w.digest:
                count = 1 + sum(1 for c in self._upto.values() if c >= w.key)
            else:
                count = len(w.confirmers)
            if count >= self.majority:
                out.append(event)
        for event in out:
            del self._waiting[event]
        return out

    def confirmed(self, replica: Replica) -> OrderKey | None:
        """The highest cut of this chain a majority holds (None: none yet)."""
        cuts = sorted(
            [c for c in self._upto.values()] + ([replica.cut] if replica.cut is not None else []),
            reverse=True,
        )
        if len(cuts) < self.majority:
            return None
        return cuts[self.majority - 1]
