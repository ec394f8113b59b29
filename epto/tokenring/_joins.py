"""Joining a token-ring group, and telling others the view.

Rules:

* A joining process sends ``Join`` to its contacts every ``change_timeout``.
  When it hears of a view it is not in (a decision it is not part of), the
  members of that view become contacts too (the first ones at once); a
  hint of an older view than one heard before is ignored.
* A member (core or external) remembers who asked to join (``joiners``, at
  most :data:`._bounds.MAX_JOINERS` at once, each forgotten unless it asks
  again within ``4 * change_timeout``; only ``allowed_joiners`` if the
  configuration lists them), answers each one, rate-limited, with the
  current view, and forgets a joiner once it is a member.
* A member answers a ``ConfigRequest`` with the current view.
* Every ``Join`` carries the joiner's incarnation; a member keeps the latest
  one per joiner (``incarnations``) for the change that admits it. A
  ``Join`` from a member of the view in a later incarnation than the one in
  the view (a member restarted under its id) is noted in ``Shared.newer``
  by the process's checks, and answered like a newcomer's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._event import ProcessId
from ._bounds import MAX_JOINERS
from ._membership import Role
from ._messages import ConfigRequest, Decided, Join, RingConfig
from ._outbox import Outbox
from ._shared import Shared


class Joins:
    """Who asked to join (member side), and whom to ask (joining side)."""

    __slots__ = (
        "_initial_contacts",
        "_join_at",
        "_joiners",
        "_out",
        "_s",
        "_view_hint",
        "contacts",
        "incarnations",
    )

    def __init__(
        self, shared: Shared, out: Outbox, contacts: Sequence[ProcessId], now: float
    ) -> None:
        self._s = shared
        self._out = out
        self._joiners: dict[ProcessId, float] = {}
        self.incarnations: dict[ProcessId, int] = {}
        """The latest incarnation each remembered joiner asked in."""
        self.contacts = tuple(contacts)
        """Whom a joining process asks (read by the message checks)."""
        self._initial_contacts = self.contacts
        self._view_hint = -1
        self._join_at = now

    # -- joining side ---------------------------------------------------------

    def timer(self) -> float:
        return self._join_at

    def tick(self, now: float) -> None:
        if now >= self._join_at:
            for contact in self.contacts:
                self._out.send(contact, self._join())
            self._join_at = now + self._s.settings.change_timeout

    def learn_view(self, config: RingConfig) -> None:
        """A joining process heard of the view ``config`` (without it): send
        the join to its members from now on, and at once to the new ones."""
        if config.instance <= self._view_hint:
            return
        self._view_hint = config.instance
        known = set(self.contacts)
        me = self._s.pid
        self.contacts = tuple(
            p for p in dict.fromkeys((*self._initial_contacts, *config.members)) if p != me
        )
        for member in config.members:
            if member not in known and member != self._s.pid:
                self._out.send(member, self._join())

    def _join(self) -> Join:
        return Join(incarnation=self._s.incarnation, resumes=self._s.resumes)

    def restart(self, config: RingConfig, now: float) -> None:
        """A (re)started process found ``config`` beyond its bootstrap view
        without it (or with an earlier incarnation of it): ask its members
        to let this incarnation in."""
        self._initial_contacts = ()
        self._view_hint = -1
        self.contacts = ()
        self.learn_view(config)
        self._join_at = now + self._s.settings.change_timeout

    # -- member side ----------------------------------------------------------

    def on_join(self, sender: ProcessId, msg: Join, now: float) -> None:
        s = self._s
        if sender in s.newer and s.role in (Role.CORE, Role.EXTERNAL):
            # A member restarted under its id: the next full change replaces it.
            self._out.rate_limited(sender, Decided(config=s.ring), now)
            return
        if s.role in (Role.CORE, Role.EXTERNAL) and sender not in s.ring.members:
            allowed = s.settings.allowed_joiners
            if allowed is not None and sender not in allowed:
                s.reject("not-allowed-to-join")
                return
            joiners = self._joiners
            if sender not in joiners and len(joiners) >= MAX_JOINERS:
                horizon = now - 4 * s.settings.change_timeout
                for old in [j for j, t in joiners.items() if t < horizon]:
                    del joiners[old]
                    self.incarnations.pop(old, None)
                if len(joiners) >= MAX_JOINERS:
                    s.reject("too-many-joiners")
                    return
            joiners[sender] = now
            self.incarnations[sender] = msg.incarnation
            # Tell the newcomer who the members are: it then asks every one of
            # them, the coordinator included, instead of waiting for a contact
            # far down the view order to time out into proposing.
            self._out.rate_limited(sender, Decided(config=s.ring), now)

    def on_config_request(self, sender: ProcessId, msg: ConfigRequest, now: float) -> None:
        s = self._s
        if s.role in (Role.CORE, Role.EXTERNAL):
            self._out.send(sender, Decided(config=s.ring))

    def recent(self, now: float) -> list[ProcessId]:
        """The joiners that asked within ``4 * change_timeout``."""
        horizon = 4 * self._s.settings.change_timeout
        return [j for j, t in self._joiners.items() if now - t <= horizon]

    def admitted(self, members: Iterable[ProcessId]) -> None:
        """``members`` are in the view now: forget them as joiners."""
        for m in members:
            self._joiners.pop(m, None)
            self.incarnations.pop(m, None)
        self.incarnations = {j: i for j, i in self.incarnations.items() if j in self._joiners}
