"""Link sessions: what a broken link lost is found and sent again.

The token ring assumes reliable FIFO links. TCP gives that while a connection
lasts; when one breaks, what was in flight (and, in a driver that does not
queue, what was sent until it reconnected) is lost, and nothing in the
protocol's own messages says so. This layer makes the loss visible and
repairs it, with go-back-N over the heartbeats the members exchange anyway:

* every message but a heartbeat is numbered per destination (``sent``), and
  the sender keeps it until the destination acknowledges it (at most
  ``capacity`` per destination, and for at most :data:`KEEP_REPAIRS` repair
  intervals; older ones are let go, and the protocol's own repairs
  (fetches, retransmission of unsequenced messages, token retransmission)
  cover them);
* every heartbeat to ``q`` says how many messages were sent to ``q`` before it
  (``sent``), the oldest one still kept (``base``), how many of ``q``'s
  messages arrived without a gap (``received``), and whether some are missing;
* links are FIFO, so a heartbeat saying ``sent = s`` when fewer than ``s``
  messages arrived proves a loss: the receiver answers at once with
  ``missing``, and the sender sends again everything from the first message
  not acknowledged, preceded by a heartbeat whose ``sent`` numbers them.

Messages sent again may arrive twice; every handler of the protocol is
idempotent (a token or notice of an older hop, a payload already held, a
consensus message of an older ballot are ignored), so duplicates cost only
bandwidth. Heartbeats are never sent again: the next one replaces a lost one.
Only members of the view (and processes joining it) get a session, so a
hostile sender cannot make this layer keep state for arbitrary identities.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Collection

import attrs

from .._event import ProcessId
from ._messages import Heartbeat, Message

REPAIR_BURST = 16
"""Most messages sent again in answer to one report of a loss."""

KEEP_REPAIRS = 4
"""A message not acknowledged this many repair intervals after it was sent
is let go (the protocol's own repairs cover it)."""


class _Outgoing:
    __slots__ = ("base", "kept", "repaired_at", "stamps")

    def __init__(self) -> None:
        self.base = 0
        """Number of the oldest message kept (all below were acknowledged or
        let go)."""
        self.kept: deque[Message] = deque()
        self.stamps: deque[float] = deque()
        """When each kept message was sent."""
        """Messages ``base``, ``base + 1``, ... not acknowledged yet."""
        self.repaired_at = -math.inf


class _Incoming:
    __slots__ = ("expected", "received", "synced")

    def __init__(self) -> None:
        self.expected = 0
        """Number of the next message from this peer."""
        self.received = 0
        """Every message numbered below this arrived."""
        self.synced = False
        """Whether a heartbeat of this peer numbered its messages yet: the
        session starts at the first one (what a peer sent before we counted
        it as a member is not ours to repair)."""


@attrs.frozen(kw_only=True, slots=True)
class LinkStatistics:
    resent: int
    """Messages sent again after a peer reported a loss."""
    gaps: int
    """Losses detected on incoming links."""
    let_go: int
    """Messages dropped unacknowledged because a peer's buffer was full or
    they waited :data:`KEEP_REPAIRS` repair intervals."""


class LinkSessions:
    """The sessions of one process with every member of its view."""

    def __init__(self, *, capacity: int, repair_interval: float) -> None:
        self._capacity = capacity
        self._repair_interval = repair_interval
        self._out: dict[ProcessId, _Outgoing] = {}
        self._in: dict[ProcessId, _Incoming] = {}
        self._peers: frozenset[ProcessId] = frozenset()
        self._resent = 0
        self._gaps = 0
        self._let_go = 0

    def track(self, peers: Collection[ProcessId]) -> None:
        """Keep sessions with ``peers`` only (the view and its joiners)."""
        self._peers = frozenset(peers)
        for table in (self._out, self._in):
            for pid in [p for p in table if p not in self._peers]:
                del table[pid]

    def sent(self, dest: ProcessId, message: Message, now: float) -> None:
        """Number ``message``, sent to ``dest`` at ``now``, and keep it until
        acknowledged (or let go)."""
        if isinstance(message, Heartbeat) or dest not in self._peers:
            return
        link = self._out.get(dest)
        if link is None:
            link = self._out[dest] = _Outgoing()
        link.kept.append(message)
        link.stamps.append(now)
        if len(link.kept) > self._capacity:
            link.kept.popleft()
            link.stamps.popleft()
            link.base += 1
            self._let_go += 1

    def arrived(self, sender: ProcessId, message: Message) -> None:
        """Count a message that arrived from ``sender``."""
        if isinstance(message, Heartbeat) or sender not in self._peers:
            return
        link = self._in.get(sender)
        if link is None:
            link = self._in[sender] = _Incoming()
        if link.expected == link.received:
            link.received += 1
        link.expected += 1
        if link.expected < link.received:
            return  # a duplicate of a message sent again

    def reset(self, pid: ProcessId) -> None:
        """Forget both directions' counters with ``pid`` (a member restarted
        under its id: the new incarnation counts from 0)."""
        self._out.pop(pid, None)
        self._in.pop(pid, None)

    def heartbeat(
        self, dest: ProcessId, instance: int, delivered: int, incarnation: int = 0
    ) -> Heartbeat:
        """The heartbeat for ``dest``, carrying both directions' counters."""
        out = self._out.get(dest)
        inc = self._in.get(dest)
        return Heartbeat(
            instance=instance,
            delivered=delivered,
            sent=0 if out is None else out.base + len(out.kept),
            base=0 if out is None else out.base,
            received=0 if inc is None else inc.received,
            missing=inc is not None and inc.received < inc.expected,
            incarnation=incarnation,
        )

    def on_heartbeat(
        self, sender: ProcessId, hb: Heartbeat, now: float
    ) -> tuple[bool, list[Message]]:
        """Take in ``sender``'s counters. Returns whether to answer at once
        (a loss was found on the link from ``sender``) and the messages to
        send again to ``sender`` (after a heartbeat that numbers them)."""
        if sender not in self._peers:
            return False, []
        inc = self._in.get(sender)
        if inc is None:
            inc = self._in[sender] = _Incoming()
        answer = False
        if not inc.synced:
            inc.synced = True
            inc.expected = inc.received = hb.sent
        # Below ``base`` the sender no longer keeps anything: not coming back.
        if hb.base > inc.received:
            inc.received = hb.base
        if hb.sent > inc.expected:
            # FIFO: everything numbered below ``sent`` left before this
            # heartbeat, so what has not arrived was lost.
            self._gaps += 1
            answer = True
        # A smaller ``sent`` precedes messages sent again: they are counted
        # from there, and those that arrived before do not move ``received``.
        inc.expected = hb.sent
        out = self._out.get(sender)
        if out is None:
            return answer, []
        acked = min(hb.received, out.base + len(out.kept))
        while out.base < acked:
            out.kept.popleft()
            out.stamps.popleft()
            out.base += 1
        # Let go what has waited for several repair intervals: on a link that
        # breaks often, sending the same old messages again (go-back-N) breaks
        # it again before they arrive, and the protocol's own repairs (a
        # fetch, the token sent again, a source's retransmission, a consensus
        # retry) have covered them meanwhile, with fewer sends.
        horizon = now - KEEP_REPAIRS * self._repair_interval
        while out.stamps and out.stamps[0] < horizon:
            out.kept.popleft()
            out.stamps.popleft()
            out.base += 1
            self._let_go += 1
        if not hb.missing or not out.kept or now - out.repaired_at < self._repair_interval:
            return answer, []
        out.repaired_at = now
        # A bounded burst: on a link that breaks again, the rest follows the
        # next report (whatever arrived of this burst moves ``received``).
        again = list(itertools.islice(out.kept, REPAIR_BURST))
        self._resent += len(again)
        return answer, again

    def first_kept(self, dest: ProcessId) -> int:
        out = self._out.get(dest)
        return 0 if out is None else out.base

    def statistics(self) -> LinkStatistics:
        return LinkStatistics(resent=self._resent, gaps=self._gaps, let_go=self._let_go)

    def sizes(self) -> int:
        """Messages kept for acknowledgement, over every link."""
        return sum(len(o.kept) for o in self._out.values())
