"""Cyclon peer sampling as a sans-IO state machine.

Cyclon (Voulgaris, Gavidia and van Steen, "CYCLON: Inexpensive Membership
Management for Unstructured P2P Overlays") keeps a small partial view of the
group in every process and refreshes it by periodic *shuffles*. The rules this
module owns, all in one place:

Shuffle (initiator P, every ``shuffle_period``):
    1. age every entry by one; drop entries older than ``purge_age``;
    2. pick the OLDEST entry Q and remove it from the view;
    3. send Q a request with ``shuffle_length - 1`` other random entries and a
       fresh descriptor of P (age 0); remember which entries were sent.

Request (receiver Q, from P):
    reply with up to ``shuffle_length`` random entries of Q's view (never P,
    never an entry P just sent), then merge P's entries, replacing the ones
    sent in the reply.

Reply (P, from Q):
    merge Q's entries, replacing the ones sent in the request. A reply that
    matches no pending request (late, after ``shuffle_timeout``) only fills
    empty slots.

Merge (the replace-the-sent-entries rule):
    discard entries for oneself and for peers already in the view (the sender
    of a request refreshes its own entry: it has just proved it is alive);
    put the rest in empty slots first, then in the slots of sent entries;
    drop what does not fit.

Failure and leave:
    Q is removed from P's view when P shuffles with it, so a Q that never
    answers is gone from P's view; a live Q re-enters P's view later through
    other shuffles. Descriptors carry their age from view to view, so a dead
    peer's descriptors keep ageing and are dropped once older than
    ``purge_age``. A :class:`Leave` makes the receiver drop the sender at once
    (from its seeds too).

Join:
    a process starts with its seed peers (a tracker) in its view and shuffles
    with the oldest of them within one period; its fresh descriptor enters the
    seed's view and spreads from there. A process whose view becomes empty
    falls back to its seeds.

Sampling:
    uniform over the view; a view smaller than the sample asked for is topped
    up with the targets of shuffles awaiting their reply (a newcomer's seed is
    removed from its view by its first shuffle).

Validation:
    a message with too many entries, duplicate entries, an entry for the
    receiver itself, a bad id, age or address, or of an unknown type raises
    :class:`RemoteProtocolError` before anything changes; the fault is counted.

Size: one protocol's state machine (about 480 lines), kept whole so that
the rules above and the code that keeps them read in one place; its
messages and their codec live apart (``_peer_messages.py``,
``_frame_bodies.py``).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._defaults import DEFAULT_ROUND_INTERVAL
from .._errors import LocalProtocolError, RemoteProtocolError
from .._event import ProcessId
from ._peer_messages import Leave, PeerDescriptor, PeerMessage, ShuffleReply, ShuffleRequest
from ._sampler import PeerSampler

_MAX_PID = 2**64
_MAX_AGE = 2**31


def _positive_int(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    from .._errors import ConfigurationError

    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{attr.name} must be a positive integer, got {value!r}")


def _positive_float(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    from .._errors import ConfigurationError

    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{attr.name} must be a positive finite number, got {value!r}")


@attrs.frozen(kw_only=True)
class CyclonConfig:
    """Parameters of a Cyclon peer sampler; validated when built.

    The defaults sit between the EpTO paper's simulator (view 30, shuffle 5)
    and JEpTO (view 100, shuffle 30). A view of 50 stays above the EpTO fanout
    of groups up to 10**5 processes (K = 28 there), so the K peers of a round
    are still a choice among many. A shuffle length of 8 renews about a sixth
    of the view per period; longer shuffles meet more entries the receiver
    already knows, and the copies and drops that follow widen the in-degree
    distribution (measured with 1,000 processes and a view of 50: standard
    deviation 5.9 with 5, 6.6 with 8, 8.9 with 15, against 6.9 for a random
    graph). A request of 8 descriptors is about 250 bytes.
    """

    view_size: int = attrs.field(default=50, validator=_positive_int)
    """c: entries kept in the view."""

    shuffle_length: int = attrs.field(default=8, validator=_positive_int)
    """l: entries exchanged per shuffle, the initiator's own descriptor included."""

    shuffle_period: float = attrs.field(default=DEFAULT_ROUND_INTERVAL, validator=_positive_float)
    """Time between two shuffles of one process, in the unit of ``now``.
    The default equals :attr:`Config.round_interval`'s: one shuffle per EpTO round."""

    purge_age: int = attrs.field(validator=_positive_int)
    """Entries older than this many shuffles are dropped; defaults to twice
    ``view_size``. Each process shuffles with its oldest entry, so in a
    converged overlay entries rarely live much beyond ``view_size`` shuffles
    (measured: oldest 54 for a view of 50); the purge is the guarantee that a
    dead peer's descriptors are gone at most ``purge_age`` periods after it died."""

    shuffle_timeout: float = attrs.field(validator=_positive_float)
    """A reply later than this after its request only fills empty slots.
    Defaults to four shuffle periods."""

    max_address_length: int = attrs.field(default=255, validator=_positive_int)
    """Longest transport address accepted in a received descriptor."""

    @purge_age.default
    def _default_purge_age(self) -> int:
        return 2 * self.view_size

    @shuffle_timeout.default
    def _default_timeout(self) -> float:
        return 4.0 * self.shuffle_period

    def __attrs_post_init__(self) -> None:
        from .._errors import ConfigurationError

        if self.shuffle_length > self.view_size:
            raise ConfigurationError(
                f"shuffle_length ({self.shuffle_length}) must not exceed "
                f"view_size ({self.view_size})"
            )


@attrs.frozen(kw_only=True, slots=True)
class CyclonStatistics:
    """Counters and current state of one Cyclon sampler."""

    shuffles: int
    """Shuffles initiated."""
    requests_received: int
    replies_received: int
    late_replies: int
    """Replies that matched no pending request (merged into empty slots only)."""
    timeouts: int
    """Requests never answered within ``shuffle_timeout``."""
    purged: int
    """Entries dropped for being older than ``purge_age``."""
    leaves_received: int
    rejected: Mapping[str, int]
    """Rejected messages by fault label."""
    view_size: int
    pending: int


@attrs.define(slots=True)
class _Pending:
    sent: list[ProcessId]
    deadline: float


class Cyclon(PeerSampler):
    """One process's Cyclon view and shuffle protocol.

    Inputs take ``now``: :meth:`receive`, :meth:`handle_timer`, :meth:`leave`.
    Outputs are pulled: :meth:`messages_to_send`, :meth:`get_timer`.
    :meth:`sample` makes it a :class:`PeerSampler` for :class:`Process`.
    """

    def __init__(
        self,
        pid: ProcessId,
        config: CyclonConfig | None = None,
        *,
        address: bytes = b"",
        seeds: Iterable[PeerDescriptor] = (),
        rng: random.Random,
        now: float,
    ) -> None:
        if not isinstance(pid, int) or not 0 <= pid < _MAX_PID:
            raise LocalProtocolError(f"process id must be an integer in [0, 2**64), got {pid!r}")
        self.pid = pid
        self.address = bytes(address)
        self.config = config if config is not None else CyclonConfig()
        self._rng = rng
        # The view: pid -> birth tick, and pid -> address (same keys). An
        # entry's age is ``self._tick - birth``, so ageing the whole view is
        # one increment of the tick.
        self._view: dict[ProcessId, int] = {}
        self._view_addresses: dict[ProcessId, bytes] = {}
        self._tick = 0
        self._seeds = tuple(s for s in seeds if s.pid != pid)
        self._addresses: OrderedDict[ProcessId, bytes] = OrderedDict()
        self._address_cache = 4 * self.config.view_size
        self._pending: dict[ProcessId, _Pending] = {}
        self._outbox: list[tuple[ProcessId, PeerMessage]] = []
        self._closed = False
        self._fill_from_seeds()
        # A random phase keeps processes started together from shuffling in step.
        self._deadline = now + rng.uniform(0.0, self.config.shuffle_period)
        self._shuffles = 0
        self._requests = 0
        self._replies = 0
        self._late = 0
        self._timeouts = 0
        self._purged = 0
        self._leaves = 0
        self._rejected: dict[str, int] = {}

    # -- PeerSampler --------------------------------------------------------

    def sample(self, k: int, rng: random.Random) -> list[ProcessId]:
        """Up to ``k`` distinct peers drawn uniformly from the view.

        When the view holds fewer than ``k``, the targets of shuffles still
        awaiting their reply are added: they were in the view a moment ago.
        Without this, a newcomer whose only seed is its first shuffle target
        would have nobody to gossip to until the reply arrives.
        """
        view = list(self._view)
        if k >= len(view):
            if self._pending:
                view.extend(pid for pid in self._pending if pid not in self._view)
                if k < len(view):
                    return rng.sample(view, k)
            return view
        return rng.sample(view, k)

    # -- inputs -------------------------------------------------------------

    def handle_timer(self, now: float) -> None:
        """Shuffle if one is due; expire requests that were never answered."""
        if self._closed or now < self._deadline:
            return
        self._expire(now)
        self._shuffle(now)
        self._deadline += self.config.shuffle_period
        if self._deadline <= now:
            self._deadline = now + self.config.shuffle_period

    def receive(self, sender: ProcessId, message: object, now: float) -> None:
        """Handle a peer sampling message from ``sender``.

        Raises :class:`RemoteProtocolError` (and counts it) for a malformed
        message; the view is then unchanged.
        """
        if self._closed:
            return
        try:
            if isinstance(message, ShuffleRequest):
                entries = self._validated(sender, message.entries)
                if not any(e.pid == sender for e in entries):
                    raise RemoteProtocolError(
                        "shuffle request lacks the sender's descriptor", fault="missing-sender"
                    )
                self._on_request(sender, entries)
            elif isinstance(message, ShuffleReply):
                entries = self._validated(sender, message.entries)
                self._on_reply(sender, entries, now)
            elif isinstance(message, Leave):
                self._on_leave(sender)
            else:
                raise RemoteProtocolError(
                    f"not a peer sampling message: {type(message).__name__}",
                    fault="unknown-message",
                )
        except RemoteProtocolError as exc:
            self._rejected[exc.fault] = self._rejected.get(exc.fault, 0) + 1
            raise

    def leave(self, now: float) -> None:
        """Leave gracefully: tell every peer in the view, then stop."""
        if self._closed:
            return
        for pid in self._view:
            self._outbox.append((pid, Leave()))
        self._closed = True
        self._pending.clear()

    # -- outputs ------------------------------------------------------------

    def messages_to_send(self) -> list[tuple[ProcessId, PeerMessage]]:
        """``(destination, message)`` pairs; drains the outbox."""
        out = self._outbox
        self._outbox = []
        return out

    def get_timer(self) -> float:
        """When :meth:`handle_timer` next has work to do (infinity once left)."""
        return math.inf if self._closed else self._deadline

    def address_of(self, pid: ProcessId) -> bytes | None:
        """The transport address of a peer in the view or recently in contact."""
        address = self._view_addresses.get(pid)
        if address is not None:
            return address
        return self._addresses.get(pid)

    # -- introspection ------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def view(self) -> list[PeerDescriptor]:
        """The current view, as descriptors."""
        return [self._descriptor(pid) for pid in self._view]

    def __contains__(self, pid: object) -> bool:
        return pid in self._view

    def __len__(self) -> int:
        return len(self._view)

    def statistics(self) -> CyclonStatistics:
        return CyclonStatistics(
            shuffles=self._shuffles,
            requests_received=self._requests,
            replies_received=self._replies,
            late_replies=self._late,
            timeouts=self._timeouts,
            purged=self._purged,
            leaves_received=self._leaves,
            rejected=dict(self._rejected),
            view_size=len(self._view),
            pending=len(self._pending),
        )

    # -- the protocol -------------------------------------------------------

    def _shuffle(self, now: float) -> None:
        view = self._view
        addresses = self._view_addresses
        self._tick += 1
        if view:
            oldest_birth = self._tick - self.config.purge_age
            if min(view.values()) < oldest_birth:
                stale = [pid for pid, birth in view.items() if birth < oldest_birth]
                for pid in stale:
                    del view[pid], addresses[pid]
                self._purged += len(stale)
        if not view:
            self._fill_from_seeds()
            if not view:
                return
        # The oldest entry; ties go to the entry longest in the view.
        target = min(view, key=view.__getitem__)
        del view[target]
        self._remember(target, addresses.pop(target))
        others = list(view)
        count = min(self.config.shuffle_length - 1, len(others))
        sent = self._rng.sample(others, count)
        me = PeerDescriptor(pid=self.pid, address=self.address, age=0)
        entries = (me, *(self._descriptor(pid) for pid in sent))
        if target in self._pending:  # asked before and never answered
            self._timeouts += 1
        self._pending[target] = _Pending(sent=sent, deadline=now + self.config.shuffle_timeout)
        self._outbox.append((target, ShuffleRequest(entries=entries)))
        self._shuffles += 1

    def _on_request(self, sender: ProcessId, entries: Sequence[PeerDescriptor]) -> None:
        self._requests += 1
        offered = {e.pid for e in entries}
        candidates = [pid for pid in self._view if pid != sender and pid not in offered]
        count = min(self.config.shuffle_length, len(candidates))
        sent = self._rng.sample(candidates, count)
        reply = ShuffleReply(entries=tuple(self._descriptor(pid) for pid in sent))
        for e in entries:
            if e.pid == sender:
                self._remember(e.pid, e.address)
        self._outbox.append((sender, reply))
        self._merge(entries, sent, refresh=sender)

    def _on_reply(self, sender: ProcessId, entries: Sequence[PeerDescriptor], now: float) -> None:
        pending = self._pending.pop(sender, None)
        if pending is None or pending.deadline < now:
            self._late += 1
            self._merge(entries, [], refresh=None)
        else:
            self._replies += 1
            self._merge(entries, pending.sent, refresh=None)

    def _on_leave(self, sender: ProcessId) -> None:
        self._leaves += 1
        if self._view.pop(sender, None) is not None:
            del self._view_addresses[sender]
        self._pending.pop(sender, None)
        if any(s.pid == sender for s in self._seeds):
            self._seeds = tuple(s for s in self._seeds if s.pid != sender)

    def _merge(
        self,
        received: Sequence[PeerDescriptor],
        sent: list[ProcessId],
        *,
        refresh: ProcessId | None,
    ) -> None:
        view = self._view
        addresses = self._view_addresses
        tick = self._tick
        capacity = self.config.view_size
        replaceable = [pid for pid in sent if pid in view]
        for entry in received:
            pid = entry.pid
            if pid == self.pid:
                continue
            if pid in view:
                if pid == refresh:
                    view[pid] = tick - entry.age
                    addresses[pid] = entry.address
                continue
            if len(view) < capacity:
                view[pid] = tick - entry.age
                addresses[pid] = entry.address
            elif replaceable:
                evicted = replaceable.pop()
                del view[evicted], addresses[evicted]
                view[pid] = tick - entry.age
                addresses[pid] = entry.address

    def _expire(self, now: float) -> None:
        expired = [pid for pid, p in self._pending.items() if p.deadline < now]
        for pid in expired:
            del self._pending[pid]
        self._timeouts += len(expired)

    def _fill_from_seeds(self) -> None:
        for seed in self._seeds:
            if len(self._view) >= self.config.view_size:
                break
            if seed.pid not in self._view:
                self._view[seed.pid] = self._tick
                self._view_addresses[seed.pid] = seed.address

    def _descriptor(self, pid: ProcessId) -> PeerDescriptor:
        return PeerDescriptor(
            pid=pid, address=self._view_addresses[pid], age=self._tick - self._view[pid]
        )

    def _remember(self, pid: ProcessId, address: bytes) -> None:
        cache = self._addresses
        cache[pid] = address
        cache.move_to_end(pid)
        while len(cache) > self._address_cache:
            cache.popitem(last=False)

    def _validated(self, sender: ProcessId, entries: object) -> Sequence[PeerDescriptor]:
        if not isinstance(entries, tuple | list):
            raise RemoteProtocolError("entries must be a sequence", fault="malformed")
        if len(entries) > self.config.shuffle_length:
            raise RemoteProtocolError(
                f"{len(entries)} entries, at most {self.config.shuffle_length} allowed",
                fault="oversized",
            )
        seen: set[ProcessId] = set()
        max_address = self.config.max_address_length
        for e in entries:
            if not isinstance(e, PeerDescriptor):
                raise RemoteProtocolError("entry is not a peer descriptor", fault="malformed")
            pid = e.pid
            if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < _MAX_PID:
                raise RemoteProtocolError(f"bad process id {pid!r}", fault="bad-pid")
            if pid == self.pid:
                raise RemoteProtocolError("entry for the receiver itself", fault="self-entry")
            if pid in seen:
                raise RemoteProtocolError(f"duplicate entry for {pid}", fault="duplicate-entry")
            seen.add(pid)
            age = e.age
            if not isinstance(age, int) or isinstance(age, bool) or not 0 <= age < _MAX_AGE:
                raise RemoteProtocolError(f"bad age {age!r}", fault="bad-age")
            if not isinstance(e.address, bytes) or len(e.address) > max_address:
                raise RemoteProtocolError("bad or oversized address", fault="bad-address")
        return entries
