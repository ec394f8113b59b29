"""The token-ring endpoint: one :class:`epto.tokenring.TokenRingProcess`, its
frame codec and sealer, and the members' addresses.

The token ring assumes reliable FIFO links (a stream transport: TCP). Rules:

* a broadcast larger than ``limits.max_payload_size`` is refused before the
  process sequences it (nobody else could receive it);
* every frame is encoded for its receiver; a catch-up, a batch of broadcasts
  or an order notice too big for one frame is split in halves, in order, so
  that receiving the parts one after the other is receiving the whole (the
  rules are registered with the message kinds,
  :func:`epto.tokenring.splitting_registry`, and the codec applies them);
  without a sealer a message sent to several
  members is encoded once;
* addresses travel in frames of their own (:mod:`._addresses`): every new
  stream opens with this member's own address, small enough for a
  receiver's first-frame limit, then the addresses it knows
  (:meth:`TokenRingEndpoint.opening`); an installed view with members it can
  newly reach makes it send its book to every member;
* a member that left the view is reported by :meth:`gone` once, so that
  the driver lets its link go; an excluded process stops the endpoint
  (:attr:`stopped` is the reason);
* a signed group admits its roster only as joiners (unless
  ``TokenRingConfig.allowed_joiners`` says otherwise);
* flushed: every broadcast of this member was delivered here, so the group
  has sequenced it.
* the member's vote (:func:`epto.tokenring.encode_durable`): a driver that keeps it
  (``ring.durability`` not ``"off"``, a data directory) writes every
  :meth:`TokenRingEndpoint.durable_record` before it sends the frames of the
  same turn, and hands a restart the latest record it kept
  (:meth:`TokenRingEndpoint.resume`) before the first turn.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import attrs

from .._event import Delivery, EventId, ProcessId
from ..tokenring import (
    TokenRingProcess,
    TokenRingStatistics,
    decode_durable,
    encode_durable,
    splitting_registry,
)
from ._addresses import AddressBook, Directory, with_addresses
from ._config import Address, NodeConfig, endpoint_codec, parse_host_port
from ._engines import TokenRingAdapter
from ._handles import EngineHandle
from ._protocol import Transmit
from ._signatures import Signatures
from ._streams import StreamFraming

OPENER_MAX = 318
"""Largest opening frame of a stream: an address frame with one entry of at
most 255 address bytes, sealed and bound to its receiver."""


@attrs.frozen(kw_only=True, slots=True)
class TokenRingEndpointStatistics:
    """The process's counters and the endpoint's."""

    process: TokenRingStatistics
    broadcasts: int
    delivered: int
    rejected: Mapping[str, int]
    encode_failures: int
    holds_token: bool
    quorum: bool = False
    """The process's :meth:`~epto.tokenring.TokenRingProcess.quorum`."""


class TokenRingEndpoint:
    """The token ring behind the endpoint protocol (:class:`epto.endpoint.Endpoint`),
    built from a :class:`NodeConfig` (``config.tokenring`` its parameters)
    like every endpoint.

    Bootstrap members all pass the same ``members`` (pid to ``"host:port"``,
    this member included); a new identity passes ``contacts`` instead (some
    current members) and learns the others' addresses from them. ``now`` is
    the process's clock; ``wall`` (default ``now``) is wall-clock seconds,
    which start the sealer's nonce counter above anything an earlier run
    used. ``config.incarnation`` is this start of the member (None: 0;
    :class:`~epto.tokenring.TokenRingProcess`): a member started again under
    its id with a higher one is admitted back in place of the earlier.
    ``restarted`` says that this start is not the member's first: it joins
    its group instead of founding one (``TokenRingProcess(restarted=)``).
    ``rng`` draws the process's random choices and the sealer's nonce prefix.
    """

    def __init__(
        self,
        config: NodeConfig,
        now: float,
        *,
        rng: random.Random,
        wall: float | None = None,
        restarted: bool = False,
    ) -> None:
        pid = config.pid
        ring = config.tokenring
        limits = config.limits
        group_key = config.group_key
        signing_key = config.signing_key
        roster = config.roster
        incarnation = config.incarnation or 0
        wall = now if wall is None else wall
        group = config.group
        members: Mapping[ProcessId, Address] | None = config.members
        contacts: Mapping[ProcessId, Address] | None = config.contacts
        self._pid = pid
        self.limits = limits
        codec = endpoint_codec(
            pid=pid,
            group=group,
            limits=limits,
            group_key=group_key,
            wall=wall,
            rng=rng,
            registry=with_addresses(splitting_registry()),
        )
        members = dict(members or {})
        contacts = dict(contacts or {})
        self._directory = Directory(pid, {**members, **contacts})
        self._framing = StreamFraming(pid, codec, self._directory)
        if roster is not None and ring.allowed_joiners is None:
            ring = attrs.evolve(ring, allowed_joiners=frozenset(roster))
        hooks: dict[str, Any] = {}
        hooks["incarnation"] = incarnation
        hooks["restarted"] = restarted
        signatures = Signatures(pid, signing_key, roster)
        if signatures.signer is not None:
            hooks["signer"] = signatures.signer
        if signatures.check is not None:
            hooks["verifier"] = signatures.check
        if contacts:
            self._process = TokenRingProcess(
                pid, ring, rng=rng, now=now, contacts=sorted(contacts), **hooks
            )
        else:
            self._process = TokenRingProcess(
                pid, ring, rng=rng, now=now, members=sorted(set(members) | {pid}), **hooks
            )
        self.adapter = TokenRingAdapter(self._process, limits=limits)
        """The process at the message level: the payload limit, flushed
        (:mod:`._engines`); ``adapter.engine`` is the process."""
        self._view = -1
        self._view_members: frozenset[ProcessId] = frozenset()
        self._gone: list[ProcessId] = []
        self._book_changed = True
        """An address frame arrived since the last output (a book may be due)."""
        self._instance = -2
        """The configuration the last output was taken in."""
        self.durability = ring.durability
        """How a driver with a data directory keeps the member's vote
        (``TokenRingConfig.durability``)."""
        self.resumed: str | None = None
        """What :meth:`resume` said: ``"resumed"``, or why the start has no vote."""
        self.engine = TokenRingHandle(self)
        """The token ring's own operations (addresses, the process inside):
        :class:`~epto.endpoint.TokenRingHandle`."""

    # -- identity and addresses -----------------------------------------------

    @property
    def pid(self) -> ProcessId:
        return self._pid

    @property
    def stopped(self) -> str | None:
        if self._process.excluded:
            return self._process.exclusion or "excluded"
        return None

    def set_advertised(self, address: Address) -> None:
        """This member's own address, as its books announce it."""
        self._directory.advertised = address

    def _set_address(self, pid: ProcessId, address: Address) -> None:
        parse_host_port(address)
        self._directory.set(pid, address)

    def address_of(self, pid: ProcessId) -> Address | None:
        return self._directory.addresses.get(pid)

    def _addresses_known(self) -> dict[ProcessId, Address]:
        return dict(self._directory.addresses)

    # -- inputs -------------------------------------------------------------

    def broadcast(self, payload: bytes, now: float) -> EventId:
        return self.adapter.broadcast(payload, now)

    def receive(self, data: bytes, now: float, *, peer_host: str | None = None) -> bool:
        process = self._process
        fed = False

        def feed(sender: ProcessId, message: object) -> None:
            nonlocal fed
            fed = True
            process.receive(sender, message, now)  # type: ignore[arg-type]

        accepted = self._framing.receive(data, now, peer_host, feed)
        if accepted and not fed:
            self._book_changed = True  # an address frame: a book may be due
        return accepted

    def reject(self, fault: str) -> None:
        self._framing.codec.rejected[fault] += 1

    def handle_timer(self, now: float) -> None:
        self._process.handle_timer(now)

    # -- the member's vote -----------------------------------------------------

    def durable_record(self) -> bytes | None:
        """The member's vote when it changed since the last call (else None):
        the driver writes it before it sends this turn's frames."""
        durable = self._process.take_durable()
        if durable is None:
            return None
        return encode_durable(self._pid, durable, 0, self.limits)

    def resume(self, record: bytes | None) -> bool:
        """Restore the vote an earlier start kept (``record``: the latest
        one the driver holds, or None); True when this start votes as the
        member (:attr:`resumed` says why not otherwise)."""
        if record is None:
            self.resumed = "no record"
            return False
        decoded = decode_durable(self._pid, record, self.limits)
        if decoded is None:
            self.resumed = "unreadable record"
            return False
        why = self._process.resume(decoded[1])
        self.resumed = why or "resumed"
        return why is None

    # -- outputs ------------------------------------------------------------

    def get_timer(self) -> float:
        return self._process.get_timer()

    def frames_to_send(self, now: float) -> list[Transmit]:
        out = self._framing.frames(self._process.messages_to_send())
        self._watch_view(out)
        self._book_changed = False
        self._instance = self._process.config.instance
        return out

    def output_pending(self) -> bool:
        # The token ring answers an input at once when it has something to
        # answer; a payload that only joins the pool (most inputs when paced)
        # or a broadcast that is held (broadcast_hold) waits for the timer,
        # without a turn of its own.
        return (
            self._process.output_ready()
            or self._book_changed
            or self._process.config.instance != self._instance
        )

    def _watch_view(self, out: list[Transmit]) -> None:
        """Send this member's book when it can reach new members of the view;
        note the members that left it."""
        config = self._process.config
        for dest in self._directory.to_tell(config.instance, config.members):
            address = self._directory.addresses.get(dest, "")
            for data in self._book(dest):
                out.append(Transmit(dest, address, data))
        if config.view != self._view:
            members = frozenset(config.members)
            self._gone.extend(sorted(self._view_members - members))
            self._view, self._view_members = config.view, members

    def _book(self, dest: ProcessId) -> list[bytes]:
        return self._framing.encode(
            self._directory.book_for(dest, self._process.config.members), dest
        )

    def opening(self, dest: ProcessId) -> list[bytes]:
        """First a small address frame with this member's own entry only (at
        most :data:`OPENER_MAX` bytes), which ``dest`` accepts within its
        first-frame limit; then the addresses of the other members."""
        entries = self._directory.book_for(dest, self._process.config.members).entries
        opener = self._framing.opener(dest)
        if len(entries) < 2:
            return opener
        return opener + self._framing.encode(AddressBook(entries=entries[1:]), dest)

    def gone(self) -> list[ProcessId]:
        gone, self._gone = self._gone, []
        return gone

    def next_delivery(self) -> Delivery | None:
        return self.adapter.next_delivery()

    def flushed(self) -> bool:
        return self.adapter.flushed()

    def statistics(self) -> TokenRingEndpointStatistics:
        s = self._process.statistics()
        return TokenRingEndpointStatistics(
            process=s,
            broadcasts=s.broadcasts,
            delivered=s.delivered,
            rejected=self._framing.rejected(self._process.rejected),
            encode_failures=self._framing.encode_failures,
            holds_token=self._process.holds_token(),
            quorum=s.quorum,
        )


class TokenRingHandle(EngineHandle):
    """The token ring's own operations (:class:`~epto.endpoint.TokenRingEndpoint`)."""

    __slots__ = ("_endpoint",)

    def __init__(self, endpoint: TokenRingEndpoint) -> None:
        super().__init__()
        self._endpoint = endpoint

    def set_address(self, pid: ProcessId, address: Address) -> None:
        """Where ``pid`` is reached from now on (the next connection uses it)."""
        with self._input:
            self._endpoint._set_address(pid, address)

    def addresses(self) -> dict[ProcessId, Address]:
        """Where this member reaches each process it knows of."""
        with self._input:
            return self._endpoint._addresses_known()

    @property
    def process(self) -> TokenRingProcess:
        """The sans-IO token-ring process inside (for inspection)."""
        return self._endpoint.adapter.process

    def holds_token(self) -> bool:
        with self._input:
            return self._endpoint.adapter.process.holds_token()
