"""Building the next configuration from the promises of a consensus instance.

Light i-view change (seed 004, Algorithm 2): the members stay; the token list
becomes the core members that answered, plus the external members the
proposer saw alive long enough; the token restarts from the most advanced
token snapshot reported (a snapshot of a later hop knows everything an
earlier one knew: one token, one chain of states).

Full view change (Algorithm 1): the answers also carry the payloads of the
messages sequenced but not yet stable; the decided configuration carries the
union, so every member of the new view holds them and they are all stable at
install. Members silent past the conservative timeout that did not answer
leave the view; new identities that asked to join enter it, as external
members that deliver from the first sequence number of the new view.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._event import Event, ProcessId
from .._incarnation import first_seq
from ._config import TokenRingConfig
from ._membership import Wanted
from ._messages import Promise, RingConfig, TokenState
from ._sequencer import chain, relabel

DEPARTED_KEPT = 64
"""Members that left the view whose incarnation a configuration still lists."""


def most_advanced(promises: Mapping[ProcessId, Promise]) -> TokenState:
    return max((p.report.state for p in promises.values()), key=lambda s: s.hop)


def build_config(
    current: RingConfig,
    me: ProcessId,
    promises: Mapping[ProcessId, Promise],
    wanted: Wanted,
    full: bool,
    cfg: TokenRingConfig,
    incarnations: Mapping[ProcessId, int] | None = None,
) -> RingConfig:
    """The next configuration. ``incarnations`` is the proposer's map of
    each member's (and each newcomer's) incarnation; the replaced members'
    later incarnations included."""
    answered = set(promises)
    latest = most_advanced(promises)
    replace = wanted.replace if full else frozenset()
    if full:
        members = [
            p
            for p in current.members
            if p not in replace and (p in answered or p not in wanted.exclude)
        ]
        members += sorted(j for j in wanted.joiners | replace if j not in members)
    else:
        members = list(current.members)
    member_set = set(members)
    # A member whose later incarnation asks in is out of the token's path even
    # in a light change (that start is not the member yet; its answers may
    # count as the member's vote, never as a core member's presence).
    gone = replace | wanted.replace
    core = [p for p in current.core if p in answered and p in member_set and p not in gone]
    core += [
        p
        for p in current.external
        if p in wanted.promote and p in answered and p in member_set and p not in replace
    ]
    known = dict(current.incarnations)
    for p, i in (incarnations or {}).items():
        # A member keeps the listed incarnation unless it is replaced; a
        # newcomer (a member that left, back in a later incarnation too)
        # enters with the one it asked in.
        if p in replace or p not in current.members or p not in known:
            known[p] = i
    # Members first; then the members that left, most recent last (at most
    # DEPARTED_KEPT): a process of a listed incarnation that is not in the
    # view was left out, one of a later incarnation restarted and may join.
    departed = [p for p, _ in current.incarnations if p not in member_set]
    departed += [p for p in current.members if p not in member_set and p not in departed]
    listed = tuple((p, known[p]) for p in members if p in known) + tuple(
        (p, known[p]) for p in departed[-DEPARTED_KEPT:] if p in known
    )
    if not core:
        core = [me]
    k = cfg.effective_k(len(members), len(core))
    instance = current.instance + 1
    starts = [s for s in current.starts if s[0] in member_set and s[0] not in replace]
    if not full:
        state = relabel(latest, instance, core, k)
        return RingConfig(
            instance=instance,
            view=current.view,
            members=tuple(members),
            core=tuple(core),
            state=state,
            starts=tuple(starts),
            incarnations=listed,
        )
    # Full change: gather the payloads of everything sequenced and not known
    # to every core member; cut the sequence at the first message nobody that
    # answered holds (nobody that answered can have delivered it).
    assigned = latest.assignments()
    payloads: dict[int, Event] = {}
    for promise in promises.values():
        for seq, event in promise.report.events:
            if assigned.get(seq) == event.id:
                payloads[seq] = event
    end = latest.low
    digest = latest.low_digest
    while end < latest.next_seq and end in payloads:
        digest = chain(digest, payloads[end].id)
        end += 1
    sources = dict(latest.sources)
    for seq in range(end, latest.next_seq):
        source, num = assigned[seq]
        sources[source] = min(sources.get(source, num), num)
    for p in replace:
        if p in known:
            # The earlier incarnation's unsequenced broadcasts die with it.
            sources[p] = max(sources.get(p, 0), first_seq(known[p]))
    state = TokenState(
        instance=instance,
        hop=0,
        next_seq=end,
        low=end,
        stable=end,
        low_digest=digest,
        batches=(),
        sources=tuple(sorted(sources.items())),
    )
    started = {s[0] for s in starts}
    starts += [
        (j, end, digest)
        for j in members
        if (j not in current.members or j in replace) and j not in started
    ]
    events = tuple((seq, payloads[seq]) for seq in range(latest.low, end))
    return RingConfig(
        instance=instance,
        view=current.view + 1,
        members=tuple(members),
        core=tuple(core),
        state=state,
        events=events,
        full=True,
        starts=tuple(starts),
        incarnations=listed,
    )


def bootstrap(members: tuple[ProcessId, ...]) -> RingConfig:
    state = TokenState(instance=0, hop=0, next_seq=0, low=0, stable=0, batches=())
    return RingConfig(instance=0, view=0, members=members, core=members, state=state)
