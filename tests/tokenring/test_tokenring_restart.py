"""A member restarted under its own id, in virtual time: a crashed member
started again with a higher incarnation is admitted back in place of the
earlier one (in the core, demoted to external, or already excluded; the
token holder or not), total order and integrity hold over every
incarnation's deliveries, and what it broadcasts afterwards is delivered by
all. An earlier incarnation that comes back to life after the later one was
admitted stops as superseded and corrupts nothing. And the quorum the
statistics report is truthful: a member cut off reports none within
``suspect_timeout``, and one again once it hears the others. A start that
knows it ran before (``restarted``, from its data directory) never founds a
group: a majority, or the whole group, restarted at once waits (safely: no
position ever holds two events) until it is started as a new group."""

from __future__ import annotations

import heapq
import itertools
import random

import pytest
from epto.transports.simulation import TokenRingCluster
from tokenring_scenarios import agreement_violations

from epto import Event, Limits
from epto._incarnation import MAX_INCARNATION
from epto.check import check
from epto.tokenring import TokenRingConfig, TokenRingProcess, token_ring_registry
from epto.tokenring._messages import (
    Data,
    DataBatch,
    Decided,
    Heartbeat,
    Join,
    Message,
    RingConfig,
    TokenState,
)
from epto.wire._codec import FrameCodec


class RestartNet:
    """Reliable FIFO links with seeded delays between the processes that run
    under each id now; crashes, restarts (a new process, the next
    incarnation, the same bootstrap ``members``), pauses and cuts."""

    def __init__(self, n: int, cfg: TokenRingConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.now = 0.0
        self.members = list(range(n))
        self.procs: dict[int, TokenRingProcess] = {}
        self.paused: list[TokenRingProcess] = []
        self.ghosts: list[TokenRingProcess] = []
        """Earlier incarnations running again next to the current one."""
        self.cut: set[int] = set()
        self.delivered: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.at_position: dict[int, set[tuple[int, int]]] = {}
        """Every event delivered at each position, by any process."""
        self.sent: dict[tuple[int, int], float] = {}
        self._queue: list[tuple[float, int, int, int, Message]] = []
        self._link_free: dict[tuple[int, int], float] = {}
        self._count = itertools.count()
        for p in self.members:
            self.start(p, 0)

    def start(self, pid: int, incarnation: int, restarted: bool = False) -> TokenRingProcess:
        proc = TokenRingProcess(
            pid,
            self.cfg,
            rng=random.Random(f"{pid}/{incarnation}"),
            now=self.now,
            members=self.members,
            incarnation=incarnation,
            restarted=restarted,
        )
        self.procs[pid] = proc
        self.delivered[(pid, incarnation)] = []
        return proc

    def crash(self, pid: int) -> TokenRingProcess:
        return self.procs.pop(pid)

    def restart(self, pid: int, restarted: bool = False) -> TokenRingProcess:
        """Start ``pid`` again; ``restarted`` as a node does that finds an
        earlier incarnation in its data directory (``MemberClaim.previous``)."""
        old = self.procs.pop(pid, None)
        incarnation = 1 + max(i for p, i in self.delivered if p == pid)
        if old is not None:
            self.paused.append(old)
        return self.start(pid, incarnation, restarted)

    def broadcast(self, pid: int, payload: bytes) -> None:
        proc = self.procs.get(pid)
        if proc is not None and proc.role.value in ("core", "external"):
            eid = proc.broadcast(payload, self.now)
            self.sent[eid] = self.now
            self._collect(proc)

    def _running(self) -> list[TokenRingProcess]:
        return [*self.procs.values(), *self.ghosts]

    def _collect(self, proc: TokenRingProcess) -> None:
        key = (proc.pid, proc.incarnation)
        got = [d.event.id for d in proc.deliveries()]
        first = proc.statistics().next_deliver - len(got)
        for i, eid in enumerate(got):
            self.at_position.setdefault(first + i, set()).add(eid)
        self.delivered[key] += got
        for dest, message in proc.messages_to_send():
            if proc.pid in self.cut or dest in self.cut:
                continue
            link = (proc.pid, dest)
            at = max(self.now + self.rng.uniform(0.0005, 0.004), self._link_free.get(link, 0.0))
            self._link_free[link] = at
            heapq.heappush(self._queue, (at, next(self._count), proc.pid, dest, message))

    def run_until(self, end: float) -> None:
        for proc in self._running():
            self._collect(proc)
        while True:
            due = min((p.get_timer() for p in self._running()), default=end + 1)
            arrival = self._queue[0][0] if self._queue else end + 1
            t = min(due, arrival)
            if t > end:
                self.now = end
                return
            self.now = max(self.now, t)
            if arrival <= due:
                _, _, src, dest, message = heapq.heappop(self._queue)
                if src in self.cut or dest in self.cut:
                    continue
                for proc in self._running():
                    if proc.pid == dest:
                        proc.receive(src, message, self.now)
                        self._collect(proc)
            else:
                for proc in self._running():
                    if proc.get_timer() <= self.now:
                        proc.handle_timer(self.now)
                        self._collect(proc)

    def sequences(self) -> dict[int, list[tuple[int, int]]]:
        """Every incarnation's deliveries, keyed ``1000 * pid + incarnation``."""
        return {1000 * p + i: seq for (p, i), seq in self.delivered.items()}


CFG = TokenRingConfig(exclude_timeout=2.0)


def _steady(net: RestartNet, until: float, every: float = 0.05) -> None:
    t = 0.0
    i = 0
    while t < until:
        net.run_until(t)
        for p in list(net.procs):
            net.broadcast(p, b"m%d-%d" % (p, i))
        i += 1
        t += every
    net.run_until(until)


def _assert_safe(net: RestartNet) -> None:
    report = check(net.sequences())
    assert not report.order_violations and not report.integrity_violations, report.summary()
    split = {pos: ids for pos, ids in net.at_position.items() if len(ids) > 1}
    assert not split, f"two events at one position: {split}"


@pytest.mark.parametrize("restarted", [False, True], ids=["no-directory", "directory"])
@pytest.mark.parametrize("downtime", [0.1, 1.0, 3.0], ids=["core", "external", "excluded"])
def test_a_member_restarted_under_its_id_is_admitted_back(downtime: float, restarted: bool) -> None:
    net = RestartNet(5, CFG, seed=int(downtime * 10))
    _steady(net, 1.0)
    net.crash(4)
    _steady(net, 1.0 + downtime)
    # In the core still (0.1 s < suspect_timeout), demoted to external
    # (1.0 s), or excluded (3.0 s > exclude_timeout). With its data
    # directory (``restarted``) it asks to be admitted at once; without,
    # it starts as a bootstrap member and finds out.
    back = net.restart(4, restarted)
    assert back.incarnation == 1
    net.run_until(net.now + 2.0)
    assert back.role.value in ("core", "external"), back.statistics()
    eid = back.broadcast(b"back", net.now)
    net.sent[eid] = net.now
    net.run_until(net.now + 2.0)
    for p, proc in net.procs.items():
        assert eid in net.delivered[(p, proc.incarnation)], p
        assert proc.config.incarnation_of(4) == 1
    _assert_safe(net)
    # The restarted member delivers a suffix of the others' sequence.
    others = net.delivered[(0, 0)]
    mine = net.delivered[(4, 1)]
    assert mine and others[-len(mine) :] == mine


@pytest.mark.parametrize("restarted", [False, True], ids=["no-directory", "directory"])
def test_the_token_holder_restarted_under_its_id_is_admitted_back(restarted: bool) -> None:
    net = RestartNet(3, CFG, seed=5)
    _steady(net, 1.0)
    holder = next(p for p, proc in net.procs.items() if proc.holds_token())
    net.crash(holder)
    back = net.restart(holder, restarted)
    _steady(net, 4.0)
    assert back.role.value in ("core", "external")
    assert all(proc.config.incarnation_of(holder) == 1 for proc in net.procs.values())
    mine = [e for e in net.delivered[(holder, 1)] if e[0] == holder]
    assert mine, "the restarted holder's broadcasts are delivered"
    for p, proc in net.procs.items():
        assert set(mine) <= set(net.delivered[(p, proc.incarnation)])
    _assert_safe(net)


def test_an_earlier_incarnation_running_again_stops_as_superseded() -> None:
    net = RestartNet(3, CFG, seed=9)
    _steady(net, 1.0)
    net.restart(2)  # the earlier one paused (SIGSTOP), not dead
    old = net.paused.pop()
    _steady(net, 3.0)
    assert net.procs[2].role.value in ("core", "external")
    net.ghosts.append(old)  # continued
    _steady(net, 5.0)
    net.run_until(6.0)
    assert old.excluded and old.superseded
    assert net.procs[2].role.value in ("core", "external")
    fresh = [e for e, t in net.sent.items() if t > 3.5]
    for p, proc in net.procs.items():
        assert set(fresh) <= set(net.delivered[(p, proc.incarnation)])
    _assert_safe(net)


@pytest.mark.parametrize("restarted", [False, True], ids=["no-directory", "directory"])
@pytest.mark.parametrize("seed", range(8))
def test_random_restarts_keep_order_and_integrity(seed: int, restarted: bool) -> None:
    rng = random.Random(seed)
    net = RestartNet(rng.choice([3, 4, 5]), CFG, seed=seed)
    # One member down at a time (a majority stays up: see docs/token-ring.md,
    # *Restart*, for a majority restarted at once).
    schedule = []
    at = rng.uniform(0.3, 1.0)
    for _ in range(rng.randint(1, 3)):
        down = rng.uniform(0.0, 2.5)
        schedule.append((at, rng.randrange(len(net.members)), down))
        at += down + rng.uniform(0.3, 1.0)
    t = 0.0
    i = 0
    restarts: list[tuple[float, int]] = []
    for at, pid, down in schedule:
        restarts.append((at, pid))
        restarts.append((at + down, -1 - pid))
    restarts.sort()
    while t < 8.0:
        while restarts and restarts[0][0] <= t:
            _, what = restarts.pop(0)
            if what >= 0 and what in net.procs:
                net.crash(what)
            elif what < 0 and -1 - what not in net.procs:
                net.restart(-1 - what, restarted)
        net.run_until(t)
        if t < 6.0:
            for p in list(net.procs):
                if rng.random() < 0.5:
                    net.broadcast(p, b"r%d-%d" % (p, i))
        i += 1
        t += 0.05
    net.run_until(12.0)
    _assert_safe(net)
    in_view = [p for p, proc in net.procs.items() if proc.role.value in ("core", "external")]
    settled = max(at + down for at, _, down in schedule) + 2.0
    if 2 * len(in_view) > len(net.members) and settled < 6.0:
        # What the members in the view broadcast once the last restart
        # settled is delivered by every one of them.
        late = [e for e, at in net.sent.items() if at > settled and e[0] in in_view]
        for p in in_view:
            assert set(late) <= set(net.delivered[(p, net.procs[p].incarnation)]), p


def test_quorum_is_false_when_cut_off_and_true_again_after_healing() -> None:
    cfg = TokenRingConfig()
    cluster = TokenRingCluster(5, cfg, seed=3)
    cluster.run_until(1.0)
    assert all(proc.statistics().quorum for proc in cluster.procs.values())
    cluster.disconnect(0)
    cluster.run_until(1.0 + cfg.suspect_timeout + 2 * cfg.heartbeat_interval)
    cut_off = cluster.procs[0].statistics()
    assert not cut_off.quorum
    assert all(cluster.procs[p].statistics().quorum for p in (1, 2, 3, 4))
    cluster.run_until(3.0)  # before exclude_timeout: still a member
    assert not cluster.procs[0].statistics().quorum
    cluster.reconnect(0)
    cluster.run_until(3.0 + cfg.suspect_timeout)
    assert cluster.procs[0].statistics().quorum
    assert agreement_violations(cluster) == []


def test_frames_of_the_earlier_incarnation_are_refused_and_counted() -> None:
    net = RestartNet(3, CFG, seed=11)
    _steady(net, 1.0)
    old = net.crash(2)
    net.restart(2)
    _steady(net, 3.0)
    member = net.procs[0]
    assert member.config.incarnation_of(2) == 1
    before = dict(member.rejected)
    stale = [
        Heartbeat(instance=member.config.instance, delivered=0, incarnation=0),
        Join(incarnation=0),
        Data(event=Event(source=2, seq=7, ts=0, payload=b"old")),
        DataBatch(events=(Event(source=2, seq=8, ts=0, payload=b"old"),)),
    ]
    for message in stale:
        member.receive(2, message, net.now)
    assert member.rejected["stale-incarnation"] == before.get("stale-incarnation", 0) + 4
    # What the earlier process sends of an older configuration is ignored.
    for _, message in old.messages_to_send():
        member.receive(2, message, net.now)
    assert not member.excluded
    net.run_until(net.now + 1.0)
    _assert_safe(net)


def test_incarnations_travel_on_the_wire() -> None:
    codec = FrameCodec(group=1, limits=Limits(), registry=token_ring_registry())
    state = TokenState(instance=3, hop=0, next_seq=0, low=0, stable=0, batches=())
    config = RingConfig(
        instance=3,
        view=1,
        members=(1, 2),
        core=(1,),
        state=state,
        incarnations=((1, 5), (2, MAX_INCARNATION), (9, 4)),
    )
    for message in (
        Heartbeat(instance=1, delivered=2, incarnation=MAX_INCARNATION),
        Join(incarnation=123),
        Decided(config=config),
    ):
        [frame] = codec.encode(1, message)
        assert codec.decode(frame).message == message


def test_a_started_member_speaks_first_with_its_incarnation() -> None:
    """The first message every member gets from a start of nonzero
    incarnation is a heartbeat carrying it: after a restart, the members
    refuse the rest (a token, the fresh acceptor's promises) until it is
    admitted."""
    proc = TokenRingProcess(1, CFG, rng=random.Random(1), now=0.0, members=[0, 1, 2], incarnation=7)
    first: dict[int, Message] = {}
    for dest, message in proc.messages_to_send():
        first.setdefault(dest, message)
    assert set(first) == {0, 2}
    assert all(isinstance(m, Heartbeat) and m.incarnation == 7 for m in first.values())


def _load(net: RestartNet, until: float, every: float = 0.05) -> None:
    """Every running member broadcasts every ``every`` s from now to ``until``."""
    i = 0
    while net.now < until:
        for p in list(net.procs):
            net.broadcast(p, b"l%d-%.3f-%d" % (p, net.now, i))
        i += 1
        net.run_until(min(until, net.now + every))


def test_a_restarted_member_never_founds_a_group() -> None:
    """A start that finds an earlier incarnation in its data directory joins:
    no token, no promise, only joins, and it is not a member until a
    configuration lists this incarnation."""
    proc = TokenRingProcess(
        1, CFG, rng=random.Random(1), now=0.0, members=[0, 1, 2], incarnation=7, restarted=True
    )
    assert proc.role.value == "joining" and not proc.holds_token()
    proc.handle_timer(proc.get_timer())
    sent = proc.messages_to_send()
    assert {d for d, _ in sent} == {0, 2}
    assert all(isinstance(m, Join) and m.incarnation == 7 for _, m in sent)
    # The bootstrap view lists member 1 but not this incarnation: not admitted.
    proc.receive(
        0,
        Decided(
            config=RingConfig(instance=0, view=0, members=(0, 1, 2), core=(0, 1, 2), state=_STATE0)
        ),
        0.01,
    )
    assert proc.role.value == "joining" and not proc.holds_token()
    with pytest.raises(Exception, match="group of one"):
        TokenRingProcess(
            1, CFG, rng=random.Random(1), now=0.0, members=[1], incarnation=2, restarted=True
        )


_STATE0 = TokenState(instance=0, hop=0, next_seq=0, low=0, stable=0, batches=())


@pytest.mark.parametrize("changed", [False, True], ids=["bootstrap-view", "after-a-change"])
@pytest.mark.parametrize("n", [3, 5])
def test_a_majority_restarted_at_once_never_splits(n: int, changed: bool) -> None:
    """2 of 3 or 3 of 5 members killed and started again at once with their
    data directories: they ask to be admitted, the members that kept running
    cannot decide without them, and nothing is ever delivered at a position
    that holds another event anywhere (before, the restarted majority founded
    a second group from position 0 next to the member that kept running).
    The group is stalled, safely; the documented way out (every member
    stopped, then started as a new group) delivers again."""
    net = RestartNet(n, CFG, seed=100 + n + changed)
    _load(net, 1.0)
    if changed:
        net.restart(0, restarted=True)  # one restart: one full view change
        _load(net, 3.0)
        assert all(p.config.instance > 0 for p in net.procs.values())
    before = {p: len(net.delivered[(p, proc.incarnation)]) for p, proc in net.procs.items()}
    assert all(before.values())
    down = list(range(n // 2, n))  # a majority
    for p in down:
        net.crash(p)
    for p in down:
        net.restart(p, restarted=True)
    _load(net, net.now + 3.0)
    net.run_until(net.now + 2.0)
    _assert_safe(net)
    for p in down:
        proc = net.procs[p]
        assert proc.role.value == "joining", (p, proc.statistics())
        assert net.delivered[(p, proc.incarnation)] == []
    for p in range(n // 2):
        assert not net.procs[p].statistics().quorum
    # The operator's way out: stop every member, start them all as a new
    # group (``fresh_group=True``; here: bootstrap members not marked
    # restarted). A new group: its positions start again at 0.
    old = dict(net.procs)
    for p in old:
        net.crash(p)
    net.at_position = {}
    fresh = {p: net.restart(p) for p in old}
    net.paused.clear()
    _load(net, net.now + 2.0)
    net.run_until(net.now + 1.0)
    new = {
        1000 * p + proc.incarnation: net.delivered[(p, proc.incarnation)]
        for p, proc in fresh.items()
    }
    report = check(new)
    assert not report.order_violations and not report.integrity_violations, report.summary()
    assert not {pos: ids for pos, ids in net.at_position.items() if len(ids) > 1}
    assert all(len(seq) > 10 for seq in new.values())
    # Frames of the stopped processes still in flight may make a member take
    # another for a restart and replace it: that one delivers a suffix.
    longest = max(new.values(), key=len)
    assert all(longest[len(longest) - len(seq) :] == seq for seq in new.values())


def test_a_whole_group_restarted_waits_for_an_explicit_new_start() -> None:
    """Every member started again with its directory: nobody founds a group
    (nothing is delivered, no token) until they are started as a new group."""
    net = RestartNet(3, CFG, seed=7)
    _load(net, 1.0)
    for p in net.members:
        net.crash(p)
    back = [net.restart(p, restarted=True) for p in net.members]
    _load(net, net.now + 2.0)
    assert all(proc.role.value == "joining" and not proc.holds_token() for proc in back)
    assert all(net.delivered[(p.pid, p.incarnation)] == [] for p in back)
    _assert_safe(net)


@pytest.mark.parametrize("seed", range(6))
def test_random_majority_restarts_never_split(seed: int) -> None:
    """A majority killed at drawn times, each started again with its
    directory after a drawn downtime (some while others are down, some
    after): order and integrity hold over every incarnation, and no position
    ever holds two events."""
    rng = random.Random(1000 + seed)
    n = rng.choice([3, 4, 5])
    net = RestartNet(n, CFG, seed=seed)
    down = rng.sample(range(n), n // 2 + 1)
    events = []
    for p in down:
        at = rng.uniform(0.5, 1.5)
        events += [(at, p, False), (at + rng.uniform(0.0, 3.0), p, True)]
    events.sort()
    i = 0
    while net.now < 7.0:
        while events and events[0][0] <= net.now:
            _, p, back = events.pop(0)
            if back:
                net.restart(p, restarted=True)
            else:
                net.crash(p)
        for p in list(net.procs):
            if rng.random() < 0.5:
                net.broadcast(p, b"x%d-%d" % (p, i))
        i += 1
        net.run_until(net.now + 0.05)
    net.run_until(9.0)
    _assert_safe(net)
