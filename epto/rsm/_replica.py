"""A replica, sans-IO: applies the total order to a state machine, names the
prefix it covers (the *cut*), chains a digest over it, takes and restores
snapshots, and buffers what a newcomer delivers until its state arrives.

Rules:

* **The cut** is the order key ``(ts, source, seq)`` of the last command
  applied. Both engines deliver in increasing order keys: the token ring's
  ``ts`` is the position in the order; EpTO (strict ordering) delivers by
  ``(ts, source)`` and never delivers an event at or below the last one
  delivered. So a snapshot at cut ``C`` covers exactly the events of the order
  up to ``C``, whichever replica took it (for EpTO, as far as its
  probabilistic agreement holds: the digest tells).
* **The digest** chains a hash over the ids of the applied events, in order:
  ``d' = blake2b(d || source || seq || ts, 16 bytes)``. Two replicas with the
  same cut and different digests applied different prefixes; the last
  ``history`` (cut, digest) pairs are kept so that a replica answers "what was
  your digest at C" for recent cuts.
* **Only the total order is applied**: ``IN_ORDER`` and ``FINAL`` deliveries.
  ``OPTIMISTIC`` and ``OUT_OF_ORDER`` ones are ignored (they are not steps of
  the order).
* **A newcomer** (``joining=True``) buffers what it delivers (at most
  ``max_buffer`` deliveries; past that it must be restored from a snapshot at
  or after the last one it buffered, :attr:`Replica.overflowed`), restores a
  snapshot, then applies the buffered deliveries whose key is above the
  snapshot's cut. Deliveries at or below the cut are skipped: never applied
  twice.
* **Holes.** With ``contiguous=True`` (the token ring, whose ``ts`` are
  consecutive positions from 0) a delivery that does not follow the cut (an
  empty replica: that is not position 0) is a hole:
  the replica stops applying and buffers (:attr:`Replica.hole`), to be
  restored like a newcomer. Without it (EpTO), a hole shows as a digest that
  differs from another replica's at the same cut (:meth:`Replica.compare`).
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections import deque
from typing import Any

import attrs

from .._errors import ConfigurationError
from .._event import Delivery, Event, EventId
from ._machine import CommandCodec, JsonCodec, StateMachine, apply_command

OrderKey = tuple[int, int, int]
"""``(ts, source, seq)``: where an event sits in the total order."""

EMPTY_DIGEST = bytes(16)
"""The digest of the empty prefix."""

_LINK = struct.Struct(">QQQ")


def chain(digest: bytes, key: OrderKey) -> bytes:
    """The digest after applying the event at ``key`` to a prefix of ``digest``."""
    ts, source, seq = key
    return hashlib.blake2b(digest + _LINK.pack(source, seq, ts), digest_size=16).digest()


def order_key(event: Event) -> OrderKey:
    return (event.ts, event.source, event.seq)


@attrs.frozen(kw_only=True)
class Snapshot:
    """A machine's state after the prefix of the order up to ``cut``."""

    cut: OrderKey | None
    """The last event applied (None: nothing applied)."""
    applied: int
    """Commands applied in that prefix (as counted by the replica that took it)."""
    digest: bytes
    state: bytes


@attrs.frozen(kw_only=True)
class Applied:
    """One command applied: its event, the cut after it and its result."""

    event: EventId
    cut: OrderKey
    result: Any


class Replica:
    """One replica of ``machine`` (see the module's rules)."""

    def __init__(
        self,
        machine: StateMachine,
        *,
        codec: CommandCodec | None = None,
        joining: bool = False,
        contiguous: bool = False,
        history: int = 65_536,
        max_buffer: int = 1_000_000,
    ) -> None:
        if history < 1 or max_buffer < 1:
            raise ConfigurationError("Replica: history and max_buffer must be >= 1")
        self.machine = machine
        self._commands = type(machine).commands()
        self._codec = codec if codec is not None else JsonCodec()
        self._contiguous = contiguous
        self.cut: OrderKey | None = None
        self.applied = 0
        self.digest = EMPTY_DIGEST
        self._keys: deque[OrderKey] = deque(maxlen=history)
        self._digests: deque[bytes] = deque(maxlen=history)
        self.ready = not joining
        """False while a newcomer (or a replica with a hole) waits for a snapshot."""
        self.hole = False
        """A delivery did not follow the cut (``contiguous`` only)."""
        self._buffer: deque[Event] = deque()
        self._max_buffer = max_buffer
        self.overflowed = False
        """The buffer dropped its oldest deliveries: only a snapshot at or after
        the last one dropped can be restored (see :meth:`needed`)."""
        self._dropped: OrderKey | None = None

    # -- the total order in ------------------------------------------------------

    def deliver(self, delivery: Delivery) -> Applied | None:
        """Apply (or, while not ready, buffer) one delivery; the command applied, if any."""
        if not delivery.in_total_order:
            return None
        event = delivery.event
        if not self.ready:
            self._keep(event)
            return None
        key = order_key(event)
        cut = self.cut
        if cut is not None and key <= cut:
            return None  # covered by the state already
        if self._contiguous and key[0] != (0 if cut is None else cut[0] + 1):
            self.ready = False
            self.hole = True
            self._keep(event)
            return None
        return self._apply(event, key)

    def _keep(self, event: Event) -> None:
        buffer = self._buffer
        if len(buffer) >= self._max_buffer:
            dropped = buffer.popleft()
            self._dropped = order_key(dropped)
            self.overflowed = True
        buffer.append(event)

    def _apply(self, event: Event, key: OrderKey) -> Applied:
        result = apply_command(self.machine, self._commands, self._codec, event.payload)
        self.digest = chain(self.digest, key)
        self.cut = key
        self.applied += 1
        self._keys.append(key)
        self._digests.append(self.digest)
        return Applied(event=event.id, cut=key, result=result)

    # -- snapshots ---------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(
            cut=self.cut, applied=self.applied, digest=self.digest, state=self.machine.snapshot()
        )

    def needed(self) -> OrderKey | None:
        """The least cut a snapshot must reach to be restored here: the key of
        the oldest buffered delivery (a snapshot before it would leave a gap;
        one at or after it covers the buffer's head), or, after an overflow,
        of the last one dropped. None: any snapshot will do (nothing buffered)."""
        if self._dropped is not None:
            head = self._buffer[0] if self._buffer else None
            return self._dropped if head is None else max(self._dropped, order_key(head))
        return order_key(self._buffer[0]) if self._buffer else None

    def check_restorable(self, snapshot: Snapshot) -> None:
        """Raise ``ValueError`` unless ``snapshot`` reaches :meth:`needed`."""
        need = self.needed()
        if need is not None and (snapshot.cut is None or snapshot.cut < need):
            raise ValueError(f"snapshot at {snapshot.cut} does not reach {need}")

    def restore(self, snapshot: Snapshot, *, state_restored: bool = False) -> list[Applied]:
        """Take ``snapshot``'s state, then apply the buffered deliveries after
        its cut; the commands applied. Raises ``ValueError`` if the snapshot
        does not reach :meth:`needed`. With ``state_restored`` the caller has
        already handed ``snapshot.state`` to the machine's ``restore`` (a driver
        does that slow part in a worker thread, this bookkeeping in its own)."""
        self.check_restorable(snapshot)
        if not state_restored:
            self.machine.restore(snapshot.state)
        self.cut = snapshot.cut
        self.applied = snapshot.applied
        self.digest = snapshot.digest
        self._keys.clear()
        self._digests.clear()
        if snapshot.cut is not None:
            self._keys.append(snapshot.cut)
            self._digests.append(snapshot.digest)
        self.overflowed = False
        self._dropped = None
        return self._apply_buffered()

    def _apply_buffered(self) -> list[Applied]:
        """Ready again: apply the buffered deliveries after the cut (one that
        does not follow it, ``contiguous``, is a hole again)."""
        self.ready = True
        self.hole = False
        buffered, self._buffer = self._buffer, deque()
        out = []
        for event in buffered:
            applied = self.deliver(Delivery(event=event))
            if applied is not None:
                out.append(applied)
        return out

    # -- comparing with other replicas ---------------------------------------------

    def digest_at(self, cut: OrderKey | None) -> bytes | None:
        """This replica's digest at ``cut``, if ``cut`` is one of the recent
        cuts it applied (or its current one); None otherwise."""
        if cut is None:
            return EMPTY_DIGEST if self.applied == 0 or not self._keys else None
        keys = self._keys
        i = bisect.bisect_left(keys, cut)
        if i < len(keys) and keys[i] == cut:
            return self._digests[i]
        return None

    def history(self) -> list[tuple[OrderKey, bytes]]:
        """The recent (cut, digest) pairs this replica keeps, oldest first."""
        return list(zip(self._keys, self._digests, strict=True))

    def compare(self, cut: OrderKey | None, digest: bytes) -> bool | None:
        """Whether another replica's ``digest`` at ``cut`` matches ours (None:
        we did not apply that cut, or it left our history)."""
        mine = self.digest_at(cut)
        return None if mine is None else mine == digest

    def suspend(self) -> None:
        """Stop applying and buffer (a replica that must first learn whether
        its state is the group's): :meth:`resume` or :meth:`restore` next."""
        self.ready = False

    def resume(self) -> list[Applied]:
        """Apply from the state already held: the buffered deliveries after
        the cut; the commands applied. Raises ``ValueError`` after an
        overflow (the buffer lost deliveries: only a snapshot will do). A
        buffered delivery that does not follow the cut (``contiguous``) is a
        hole again (:attr:`ready` stays False)."""
        if self.overflowed:
            raise ValueError("the buffer overflowed: the state must be fetched")
        return self._apply_buffered()

    def reaches(self, cut: OrderKey | None, digest: bytes | None) -> bool:
        """Whether this replica's state, followed by what it buffered, holds
        the prefix another replica names by ``(cut, digest)``: its own digest
        there, or the chain over the buffered deliveries up to ``cut``, equals
        ``digest`` (an unknown digest, None, compares by the cut alone)."""
        if cut is None:
            return True
        own = self.cut
        if own is not None and cut <= own:
            mine = self.digest_at(cut)
            if mine is None:
                # Not a cut applied here: within the recent history, a command
                # this replica lacks; older, unknown (taken as held).
                return not self._keys or cut < self._keys[0]
            return digest is None or mine == digest
        if self.overflowed:
            return False
        chained, last = self.digest, own
        for event in self._buffer:
            key = order_key(event)
            if last is not None and key <= last:
                continue
            if self._contiguous and key[0] != (0 if last is None else last[0] + 1):
                return False
            chained, last = chain(chained, key), key
            if key >= cut:
                break
        return last == cut and (digest is None or chained == digest)

    def resync(self) -> None:
        """Stop applying and buffer until :meth:`restore` (a hole was found)."""
        self.ready = False
        self.hole = True

    def buffered(self) -> int:
        return len(self._buffer)
