"""Two-level membership: the role table, the failure detector, and what
change a process wants next.

Roles and their transitions live in one table, :data:`TRANSITIONS`, in the
manner of h11's state module: (role, input) -> next role; any pair missing
from the table is a local protocol error. docs/token-ring.md draws its state
diagram from this table (:func:`mermaid_diagram`), and a test checks that the
page shows what the code does.

Inputs come from installing a configuration decided by consensus (the
process is in the core, in the external set, or not in the view) and from two
local discoveries that force a process out: its delivered prefix diverges from
the group's order, or the messages it missed are no longer kept by anyone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from .._errors import LocalProtocolError
from .._event import ProcessId
from ._config import TokenRingConfig
from ._messages import RingConfig


class Role(enum.Enum):
    JOINING = "joining"
    """A new identity asking to enter the view."""
    CORE = "core"
    """In the token list: sequences messages when it holds the token."""
    EXTERNAL = "external"
    """In the view but not in the token list: receives and sends every
    broadcast, learns the order from notices, fetches what it missed."""
    EXCLUDED = "excluded"
    """Out of the view for good (program-controlled crash), or superseded by
    a later incarnation of the member. A process started again under the
    same id is a new incarnation and joins back by itself."""


class Input(enum.Enum):
    INSTALL_CORE = "install: in the token list"
    INSTALL_EXTERNAL = "install: external member"
    INSTALL_NOT_MEMBER = "install: not in the view"
    DIVERGED = "delivered prefix diverges"
    TOO_FAR_BEHIND = "missed messages no longer kept"
    SUPERSEDED = "superseded: a later incarnation is in the view"
    RESTARTED = "restarted: the view is past the bootstrap one"


TRANSITIONS: dict[tuple[Role, Input], Role] = {
    (Role.JOINING, Input.INSTALL_CORE): Role.CORE,
    (Role.JOINING, Input.INSTALL_EXTERNAL): Role.EXTERNAL,
    (Role.JOINING, Input.INSTALL_NOT_MEMBER): Role.JOINING,
    (Role.CORE, Input.INSTALL_CORE): Role.CORE,
    (Role.CORE, Input.INSTALL_EXTERNAL): Role.EXTERNAL,
    (Role.CORE, Input.INSTALL_NOT_MEMBER): Role.EXCLUDED,
    (Role.CORE, Input.DIVERGED): Role.EXCLUDED,
    (Role.CORE, Input.TOO_FAR_BEHIND): Role.EXCLUDED,
    (Role.EXTERNAL, Input.INSTALL_CORE): Role.CORE,
    (Role.EXTERNAL, Input.INSTALL_EXTERNAL): Role.EXTERNAL,
    (Role.EXTERNAL, Input.INSTALL_NOT_MEMBER): Role.EXCLUDED,
    (Role.EXTERNAL, Input.DIVERGED): Role.EXCLUDED,
    (Role.EXTERNAL, Input.TOO_FAR_BEHIND): Role.EXCLUDED,
    (Role.JOINING, Input.SUPERSEDED): Role.EXCLUDED,
    (Role.CORE, Input.RESTARTED): Role.JOINING,
    (Role.CORE, Input.SUPERSEDED): Role.EXCLUDED,
    (Role.EXTERNAL, Input.SUPERSEDED): Role.EXCLUDED,
}


def transition(role: Role, event: Input) -> Role:
    try:
        return TRANSITIONS[(role, event)]
    except KeyError:
        raise LocalProtocolError(f"no transition from {role.value} on {event.value!r}") from None


def install_input(config: RingConfig, me: ProcessId) -> Input:
    if me in config.core:
        return Input.INSTALL_CORE
    if me in config.members:
        return Input.INSTALL_EXTERNAL
    return Input.INSTALL_NOT_MEMBER


def mermaid_diagram() -> str:
    """The role state diagram, drawn from :data:`TRANSITIONS` (self-loops omitted)."""
    lines = ["stateDiagram-v2", "    [*] --> core: bootstrap member", "    [*] --> joining"]
    for (src, event), dst in TRANSITIONS.items():
        if src is dst:
            continue
        lines.append(f"    {src.value} --> {dst.value}: {event.value}")
    lines.append("    excluded --> [*]")
    return "\n".join(lines)


class FailureDetector:
    """Heartbeat-based: every message from a process counts as a sign of life."""

    def __init__(self) -> None:
        self._last: dict[ProcessId, float] = {}
        self._since: dict[ProcessId, float] = {}
        self._heard: dict[ProcessId, float] = {}
        """When each process was last really heard (``grace`` does not count)."""
        self.reported_instance: dict[ProcessId, int] = {}
        self.reported_delivered: dict[ProcessId, int] = {}
        """Delivery watermarks the members' heartbeats reported."""

    def heard(self, pid: ProcessId, now: float, gap: float) -> None:
        last = self._last.get(pid)
        if last is None or now - last > gap:
            self._since[pid] = now
        self._last[pid] = now
        self._heard[pid] = now

    def forget(self, pid: ProcessId) -> None:
        """``pid``'s incarnation changed: what was heard of it was the old one."""
        self._last.pop(pid, None)
        self._since.pop(pid, None)
        self._heard.pop(pid, None)

    def heard_within(self, pid: ProcessId, now: float, gap: float) -> bool:
        """Whether ``pid`` was really heard less than ``gap`` before ``now``."""
        heard = self._heard.get(pid)
        return heard is not None and now - heard <= gap

    def reported(self, pid: ProcessId, instance: int, delivered: int) -> None:
        """``pid``'s heartbeat said it is in configuration ``instance`` and
        delivered up to ``delivered``."""
        self.reported_instance[pid] = instance
        self.reported_delivered[pid] = delivered

    def grace(self, pids: Iterable[ProcessId], now: float) -> None:
        """Start counting silence from ``now`` for processes never heard."""
        for pid in pids:
            self._last.setdefault(pid, now)
            self._since.setdefault(pid, now)

    def silent_for(self, pid: ProcessId, now: float) -> float:
        return now - self._last.get(pid, now)

    def alive_for(self, pid: ProcessId, now: float, gap: float) -> float:
        """How long ``pid`` has been heard without a gap longer than ``gap``."""
        if self.silent_for(pid, now) > gap:
            return 0.0
        return now - self._since.get(pid, now)


@attrs.frozen(kw_only=True, slots=True)
class Wanted:
    """The change a process would propose now."""

    demote: frozenset[ProcessId]
    promote: frozenset[ProcessId]
    exclude: frozenset[ProcessId]
    joiners: frozenset[ProcessId]
    token_lost: bool
    replace: frozenset[ProcessId] = frozenset()
    """Members whose later incarnation asks in: the full change puts it in
    the view in place of the earlier one, as an external member."""

    @property
    def full(self) -> bool:
        return bool(self.exclude or self.joiners or self.replace)

    def __bool__(self) -> bool:
        return bool(
            self.demote
            or self.promote
            or self.exclude
            or self.joiners
            or self.token_lost
            or self.replace
        )


def wanted_change(
    config: RingConfig,
    me: ProcessId,
    fd: FailureDetector,
    cfg: TokenRingConfig,
    now: float,
    *,
    joiners: Iterable[ProcessId],
    token_lost: bool,
    low: int = 0,
    restarted: Iterable[ProcessId] = (),
) -> Wanted:
    """The change ``me`` would propose: demote silent core members, exclude
    members silent past ``exclude_timeout``, admit joiners, and promote
    external members heard long enough that have delivered up to ``low`` (the
    token's low as ``me`` knows it): a member promoted while far behind would
    hold the token until it caught up; and replace the members ``restarted``
    under their id by their later incarnation."""
    replace = frozenset(p for p in restarted if p in config.members and p != me)
    others = [p for p in config.members if p != me and p not in replace]
    exclude = frozenset(p for p in others if fd.silent_for(p, now) > cfg.exclude_timeout)
    demote = frozenset(
        p
        for p in config.core
        if p != me and p not in replace and fd.silent_for(p, now) > cfg.suspect_timeout
    )
    promote = frozenset(
        p
        for p in config.external
        if p != me
        and p not in exclude
        and p not in replace
        and fd.reported_instance.get(p) == config.instance
        and fd.reported_delivered.get(p, -1) >= low
        and fd.alive_for(p, now, cfg.suspect_timeout) >= cfg.readmit_after
    )
    # Admit newcomers only while every member is heard, and at most a
    # minority of the view at once: identities that ask to join and then fall
    # silent (or never existed) can never outnumber the members that decide,
    # and are excluded before more are let in.
    admit: frozenset[ProcessId] = frozenset()
    if not any(fd.silent_for(p, now) > cfg.suspect_timeout for p in others):
        room = max(1, (len(config.members) - 1) // 2)
        admit = frozenset([j for j in joiners if j not in config.members][:room])
    return Wanted(
        demote=demote - exclude,
        promote=promote,
        exclude=exclude,
        joiners=admit,
        token_lost=token_lost,
        replace=replace,
    )


MAX_BACKOFF = 16.0
"""Most that view changes without progress multiply the suspicion and token
timeouts by (:class:`Timing`)."""


class Timing:
    """The timeouts a member uses: its configuration's, raised to fit the
    round trips it measures and the core's size, and backed off while view
    changes bring no progress.

    * **Measured latency** (as TCP derives its retransmission timeout,
      RFC 6298): every token this member passes and sees acknowledged
      without a resend is a round-trip sample (scheduling delays included;
      a token is acknowledged on arrival, before the messages it needs are
      fetched, so that wait is not); ``srtt`` and ``rttvar`` follow
      them, and ``(srtt + 4 * rttvar) / 2`` is the one-way delay the
      timeouts are fitted to (:meth:`TokenRingConfig.fitted`): a token
      timeout of at least one rotation at that delay, suspicion above two
      heartbeats and four delays, and so on. A configured timeout above its
      floor is kept.
    * **Back-off**: a view change installed while messages waited and none
      was delivered since the previous change doubles the suspicion and
      token timeouts (at most :data:`MAX_BACKOFF` times, suspicion below
      the exclusion timeout, the token timeout at most twice it); a change
      after progress, or progress with no change for four suspicion
      timeouts, halves it again. Members that suspect each other because
      they are starved of CPU, or a token timeout too short for the ring,
      stop changing views within a few doublings.
    """

    __slots__ = ("_base", "_change_seen", "_fit_latency", "backoff", "rttvar", "srtt")

    def __init__(self, base: TokenRingConfig) -> None:
        self._base = base
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.backoff = 1.0
        self._fit_latency = 0.0
        self._change_seen: tuple[float, int] | None = None
        """(when, delivered count) at the last change or decay step."""

    def latency(self) -> float:
        """The one-way delay the timeouts are fitted to (0 before any sample)."""
        if self.srtt is None:
            return 0.0
        return (self.srtt + 4 * self.rttvar) / 2

    def sample(self, rtt: float) -> bool:
        """Take a round-trip sample; True when the fitted delay moved enough
        (a quarter) to fit the timeouts again."""
        if not rtt >= 0:
            return False
        if self.srtt is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        latency = self.latency()
        return abs(latency - self._fit_latency) > 0.25 * max(self._fit_latency, 1e-9)

    def changed(self, now: float, delivered: int, waiting: bool) -> bool:
        """A view change was installed; True when the back-off moved."""
        last = self._change_seen
        self._change_seen = (now, delivered)
        before = self.backoff
        if last is not None and waiting and delivered <= last[1]:
            self.backoff = min(MAX_BACKOFF, 2 * self.backoff)
        elif last is None or delivered > last[1]:
            self.backoff = max(1.0, self.backoff / 2)
        return self.backoff != before

    def quiet(self, now: float, delivered: int, suspect: float) -> bool:
        """Time passed: with progress and no change for four suspicion
        timeouts, halve the back-off; True when it moved."""
        last = self._change_seen
        if self.backoff <= 1 or last is None:
            return False
        if now - last[0] < 4 * suspect or delivered <= last[1]:
            return False
        self._change_seen = (now, delivered)
        self.backoff = max(1.0, self.backoff / 2)
        return True

    def config(self, core: int) -> TokenRingConfig:
        """The configuration with the timeouts in use for a core of ``core``."""
        base = self._base
        self._fit_latency = latency = self.latency()
        fit = base.fitted(max(1, core), latency)
        # Whatever is measured, a lost token is regenerated within twice the
        # exclusion timeout, and suspicion stays below exclusion.
        top = max(base.token_timeout, 2 * base.exclude_timeout)
        token = min(fit.token_timeout * self.backoff, top)
        ceiling = max(base.suspect_timeout, fit.exclude_timeout / 2)
        suspect = min(fit.suspect_timeout * self.backoff, ceiling)
        if token == fit.token_timeout and suspect == fit.suspect_timeout:
            return fit
        return attrs.evolve(fit, suspect_timeout=suspect, token_timeout=token)
