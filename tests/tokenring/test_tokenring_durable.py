"""A majority of the members restarted at once with their durable vote
(docs/token-ring.md, *A majority restarted at once*), in virtual time: each
restart restores the record its earlier incarnation kept (written before
any message that depended on it left), votes as the member until the group
admits it, and the group goes on delivering; no position ever holds two
events, over every incarnation's deliveries. The record's codec refuses
what is not one."""

from __future__ import annotations

import random

import pytest
from test_tokenring_restart import CFG, RestartNet

from epto import Limits
from epto.check import check
from epto.tokenring import TokenRingProcess
from epto.tokenring._durable import DurableState, decode_durable, encode_durable

LIMITS = Limits.for_frame_size(1 << 20, max_events_per_ball=4096, max_payload_size=524_224)


class DurableNet(RestartNet):
    """:class:`RestartNet` whose processes keep their vote on a "disk" (its
    bytes, through the record's codec) before their messages leave; a
    restart restores it unless told otherwise."""

    def __init__(self, n: int, seed: int) -> None:
        self.disk: dict[int, bytes] = {}
        self.counter = 0
        super().__init__(n, CFG, seed)

    def _collect(self, proc: TokenRingProcess) -> None:
        if self.procs.get(proc.pid) is proc:
            durable = proc.take_durable()
            if durable is not None:
                self.counter += 1
                self.disk[proc.pid] = encode_durable(proc.pid, durable, self.counter, LIMITS)
        super()._collect(proc)

    def restart_durable(self, pid: int, *, resume: bool = True) -> TokenRingProcess:
        proc = self.restart(pid, restarted=True)
        record = self.disk.get(pid)
        if resume and record is not None:
            decoded = decode_durable(pid, record, LIMITS)
            assert decoded is not None
            assert proc.resume(decoded[1]) is None
        return proc


def _load(net: RestartNet, until: float, every: float = 0.05) -> None:
    i = 0
    while net.now < until:
        for p in list(net.procs):
            net.broadcast(p, b"d%d-%.3f-%d" % (p, net.now, i))
        i += 1
        net.run_until(min(until, net.now + every))


def _assert_safe(net: RestartNet) -> None:
    report = check(net.sequences())
    assert not report.order_violations and not report.integrity_violations, report.summary()
    split = {pos: ids for pos, ids in net.at_position.items() if len(ids) > 1}
    assert not split, f"two events at one position: {split}"


@pytest.mark.parametrize("n", [3, 5])
def test_a_majority_restarted_with_its_votes_is_admitted_and_delivers(n: int) -> None:
    net = DurableNet(n, seed=200 + n)
    _load(net, 1.0)
    down = list(range(n // 2, n))
    for p in down:
        net.crash(p)
    for p in down:
        net.restart_durable(p)
    _load(net, net.now + 4.0)
    net.run_until(net.now + 1.0)
    _assert_safe(net)
    for p in down:
        proc = net.procs[p]
        assert proc.role.value in ("core", "external"), (p, proc.statistics())
        assert net.delivered[(p, proc.incarnation)], p
    for p, proc in net.procs.items():
        assert proc.statistics().quorum, p


def test_without_the_record_a_majority_restart_still_waits() -> None:
    net = DurableNet(5, seed=7)
    _load(net, 1.0)
    for p in (2, 3, 4):
        net.crash(p)
    for p in (2, 3, 4):
        net.restart_durable(p, resume=False)
    _load(net, net.now + 3.0)
    _assert_safe(net)
    assert all(net.procs[p].role.value == "joining" for p in (2, 3, 4))


@pytest.mark.parametrize("seed", range(8))
def test_random_majority_restarts_with_votes_never_split(seed: int) -> None:
    """A majority killed at drawn times (the token in flight, a view change
    under way), each started again with its record after a drawn downtime:
    no position ever holds two events, order and integrity hold over every
    incarnation, and the group delivers again."""
    rng = random.Random(3000 + seed)
    n = rng.choice([3, 5])
    net = DurableNet(n, seed=seed)
    down = rng.sample(range(n), n // 2 + 1)
    events = []
    for p in down:
        at = rng.uniform(0.5, 1.5)
        events += [(at, p, False), (at + rng.uniform(0.0, 2.0), p, True)]
    events.sort()
    i = 0
    while net.now < 6.0:
        while events and events[0][0] <= net.now:
            _, p, back = events.pop(0)
            if back:
                net.restart_durable(p)
            else:
                net.crash(p)
        for p in list(net.procs):
            if rng.random() < 0.5:
                net.broadcast(p, b"x%d-%d" % (p, i))
        i += 1
        net.run_until(net.now + 0.01 * rng.randint(1, 6))
    _load(net, 9.0)
    net.run_until(10.0)
    _assert_safe(net)
    late = [p for p, proc in net.procs.items() if net.delivered[(p, proc.incarnation)]]
    assert len(late) == n, {p: proc.statistics().role for p, proc in net.procs.items()}


def test_the_record_codec_refuses_what_is_not_one() -> None:
    net = DurableNet(3, seed=1)
    _load(net, 0.5)
    record = net.disk[1]
    decoded = decode_durable(1, record, LIMITS)
    assert decoded is not None
    counter, state = decoded
    assert isinstance(state, DurableState) and counter > 0
    assert encode_durable(1, state, counter, LIMITS) == record
    assert decode_durable(2, record, LIMITS) is None  # another member's
    assert decode_durable(1, record[:-1], LIMITS) is None  # torn
    flipped = bytearray(record)
    flipped[-1] ^= 1
    assert decode_durable(1, bytes(flipped), LIMITS) is None  # altered
    assert decode_durable(1, b"", LIMITS) is None


class _Trigger(DurableNet):
    """Crashes the majority ``down`` at once right after one of them handed
    out a message of ``kinds`` (it left, and so did the record before it)."""

    def __init__(self, n: int, seed: int, down: list[int], kinds: tuple[type, ...]) -> None:
        self.down = down
        self.kinds = kinds
        self.armed = False
        self.fired_at: float | None = None
        super().__init__(n, seed)

    def _collect(self, proc: TokenRingProcess) -> None:
        fire = self.armed and self.procs.get(proc.pid) is proc and proc.pid in self.down
        # The queue is a heap: what this call adds is what carries a count
        # above every one queued before it, wherever the heap put it.
        before = max((m[1] for m in self._queue), default=-1)
        super()._collect(proc)
        if fire and any(m[1] > before and isinstance(m[4], self.kinds) for m in self._queue):
            self.armed = False
            self.fired_at = self.now
            for p in self.down:
                self.procs.pop(p, None)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["promise", "accepted", "token"])
def test_a_majority_crashing_right_after_it_answered_never_splits(seed: int, kind: str) -> None:
    """The majority dies at once just after one of its members promised,
    accepted, or passed the token (a view change under way: the members
    that kept running suspect it; or the token in flight), and comes back
    with its records: no position ever holds two events, and everyone
    delivers again."""
    from epto.tokenring._messages import Accepted, Promise, Token

    kinds = {"promise": (Promise,), "accepted": (Accepted,), "token": (Token,)}[kind]
    rng = random.Random(seed)
    n = 5
    down = rng.sample(range(n), 3)
    net = _Trigger(n, seed, down, kinds)
    _load(net, 0.6)
    net.armed = True
    if kind != "token":
        # A view change under way: one member of the majority goes quiet
        # long enough to be suspected, so the others propose (and the rest
        # of the majority answers).
        quiet = down[0]
        paused = net.procs.pop(quiet)
        _load(net, net.now + 0.5)
        if net.fired_at is None:
            net.procs[quiet] = paused
    _load(net, net.now + 1.5)
    assert net.fired_at is not None, "the crash never fired"
    for p in down:
        net.restart_durable(p)
    _load(net, net.now + 3.0)
    net.run_until(net.now + 0.5)
    _assert_safe(net)
    for p, proc in net.procs.items():
        assert net.delivered[(p, proc.incarnation)], (p, proc.statistics())


@pytest.mark.parametrize("seed", range(3))
def test_a_majority_that_moved_on_alone_then_restarted_brings_the_others_along(
    seed: int,
) -> None:
    """Two members of five are cut off while the three others go on (they
    move the two out of the token list and deliver without them); then the
    three crash at once, the cut heals, and the three start again with
    their records. The only memory of what the three decided and delivered
    is in those records: the restarted members tell the two the decided
    configuration and vote with the window they held, so no position ever
    holds two events, and the group delivers again. The two cut off
    members missed positions that only the crashed members' logs held:
    they leave the view (``too far behind``) unless they could fetch them,
    and start again to rejoin."""
    net = DurableNet(5, seed=50 + seed)
    _load(net, 0.6)
    net.cut = {0, 1}
    _load(net, net.now + 1.2)
    ahead = {p: net.procs[p].config.instance for p in (2, 3, 4)}
    assert all(i > net.procs[0].config.instance for i in ahead.values()), ahead
    for p in (2, 3, 4):
        net.crash(p)
    net.cut = set()
    for p in (2, 3, 4):
        net.restart_durable(p)
    _load(net, net.now + 3.0)
    net.run_until(net.now + 0.5)
    _assert_safe(net)
    for p in (2, 3, 4):
        proc = net.procs[p]
        assert proc.role.value in ("core", "external"), (p, proc.statistics())
        assert net.delivered[(p, proc.incarnation)], (p, proc.statistics())
    for p in (0, 1):
        stats = net.procs[p].statistics()
        assert stats.role in ("core", "external") or stats.exclusion == "too far behind"
