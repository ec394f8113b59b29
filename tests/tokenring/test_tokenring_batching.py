"""The token ring's batching: broadcasts leave together, a token visit
sequences several batches, delivery is bounded per input, the order book
learns a batch once, and own messages are retransmitted only when the token's
counter for them stalls."""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable

import pytest

from epto import ConfigurationError, Event
from epto.check import check
from epto.tokenring import TokenRingConfig, TokenRingProcess
from epto.tokenring._messages import Batch, Data, DataBatch, Heartbeat, Message, Token
from epto.tokenring._process import DELIVER_CHUNK
from epto.tokenring._sequencer import BATCH_IDS, Divergence, OrderBook

Drop = Callable[[int, int, Message], bool]


def _ring(n: int = 3, **fields: object) -> dict[int, TokenRingProcess]:
    members = list(range(1, n + 1))
    cfg = TokenRingConfig(**fields)  # type: ignore[arg-type]
    return {
        p: TokenRingProcess(p, cfg, rng=random.Random(p), now=0.0, members=members) for p in members
    }


class Net:
    """Zero-delay FIFO links; records what was sent and how much each input delivered."""

    def __init__(self, procs: dict[int, TokenRingProcess], drop: Drop | None = None) -> None:
        self.procs = procs
        self.drop = drop or (lambda src, dst, m: False)
        self.t = 0.0
        self.sent: list[tuple[int, int, Message]] = []
        self.delivered: dict[int, list[tuple[int, int]]] = {p: [] for p in procs}
        self.per_input: list[int] = []
        self._queue: deque[tuple[int, int, Message]] = deque()

    def _collect(self, proc: TokenRingProcess) -> None:
        got = [d.event.id for d in proc.deliveries()]
        self.delivered[proc.pid] += got
        self.per_input.append(len(got))
        for dest, message in proc.messages_to_send():
            self.sent.append((proc.pid, dest, message))
            self._queue.append((proc.pid, dest, message))

    def run(self, until: float) -> None:
        for proc in self.procs.values():
            self._collect(proc)
        while True:
            if self._queue:
                src, dest, message = self._queue.popleft()
                if not self.drop(src, dest, message):
                    self.procs[dest].receive(src, message, self.t)
                    self._collect(self.procs[dest])
                continue
            due = min(p.get_timer() for p in self.procs.values())
            if due > until:
                self.t = until
                return
            self.t = max(self.t, due)
            for proc in self.procs.values():
                if proc.get_timer() <= self.t:
                    proc.handle_timer(self.t)
                    self._collect(proc)


def test_a_burst_leaves_in_batches_and_one_visit_sequences_several_batches() -> None:
    procs = _ring(max_batch=4096)
    sender = procs[2]
    ids = [sender.broadcast(b"x%d" % i, 0.0) for i in range(3000)]
    net = Net(procs)
    net.run(1.0)
    data = [(d, m) for s, d, m in net.sent if s == 2 and isinstance(m, Data | DataBatch)]
    # 3000 broadcasts: three batches of at most 1024 to each of the two peers.
    assert len(data) == 6 and all(isinstance(m, DataBatch) for _, m in data)
    to_1 = [e.id for d, m in data if d == 1 for e in m.events]  # type: ignore[union-attr]
    assert to_1 == ids
    tokens = [m.state for _, _, m in net.sent if isinstance(m, Token)]
    # The first visit sequenced all 3000 (the sender's pool) in three batches.
    first = next(s for s in tokens if s.batches)
    assert [len(b.ids) for b in first.batches] == [1024, 1024, 952]
    assert all(len(b.ids) <= BATCH_IDS for s in tokens for b in s.batches)
    assert all(seq == net.delivered[1] for seq in net.delivered.values())
    assert sorted(net.delivered[1]) == sorted(ids)
    assert check(net.delivered).ok
    # Delivery is bounded per input; the rest follows on the next timer.
    assert max(net.per_input) == DELIVER_CHUNK


def test_a_visit_sequences_at_most_max_batch() -> None:
    procs = _ring()  # max_batch 1024
    for i in range(3000):
        procs[2].broadcast(b"y%d" % i, 0.0)
    net = Net(procs)
    net.run(1.0)
    tokens = [m.state for _, _, m in net.sent if isinstance(m, Token)]
    assert max(len(b.ids) for s in tokens for b in s.batches) == 1024
    assert all(len(seq) == 3000 for seq in net.delivered.values())


def test_own_broadcasts_leave_before_what_is_sent_after_them() -> None:
    procs = _ring()
    holder = procs[1]  # the first member starts with the token
    assert holder.holds_token()
    holder.broadcast(b"a", 0.0)
    holder.broadcast(b"b", 0.0)
    while holder.holds_token():
        holder.handle_timer(holder.get_timer())
    out = [(d, type(m).__name__) for d, m in holder.messages_to_send()]
    assert out.index((2, "DataBatch")) < out.index((2, "Token"))


def test_lost_broadcasts_are_retransmitted_once_the_counter_stalls() -> None:
    proc = _ring()[3]  # its links are down: nothing it sends arrives
    eid = proc.broadcast(b"lost", 0.0)
    resent = []
    t = 0.0
    while t < 1.5:
        for _, m in proc.messages_to_send():
            if isinstance(m, Data):
                resent.append((t, m.event.id))
        t = proc.get_timer()
        proc.handle_timer(t)
    # Sent to both peers at 0, then again once token_timeout (1.0) passed
    # without progress, and not again before another token_timeout.
    assert {e for _, e in resent} == {eid}
    times = sorted({at for at, _ in resent})
    assert len(resent) == 4 and times[0] == 0.0 and 1.0 <= times[1] < 1.1


def test_no_retransmission_while_messages_get_sequenced() -> None:
    procs = _ring()
    net = Net(procs)
    sent = []
    for i in range(30):
        sent.append(procs[3].broadcast(b"m%d" % i, net.t))
        net.run(net.t + 0.1)
    net.run(net.t + 2.0)
    data = [m for s, d, m in net.sent if s == 3 and d == 1 and isinstance(m, Data | DataBatch)]
    assert len(data) == 30
    assert net.delivered[1] == sent


def _ev(source: int, seq: int) -> Event:
    return Event(source=source, seq=seq, ts=0, payload=b"p")


def test_order_book_learns_a_batch_once_and_forgets_on_truncate() -> None:
    book = OrderBook(log_retention=100)
    batch = Batch(first=0, ids=((1, 0), (2, 0)), holders=frozenset({1}))
    book.learn_batches([batch], stable=0)
    book.learn_batches([batch], stable=0)  # the same batch again: skipped
    assert book.assignment(0) == (1, 0) and book.assignment(1) == (2, 0)
    assert not book.holds_through(2)
    book.add_event(_ev(1, 0))
    book.add_event(_ev(2, 0))
    assert book.holds_through(2)
    book.truncate(0)  # a decided configuration dropped them
    assert book.assignment(0) is None and not book.holds_through(2)
    book.learn_batches([batch], stable=2)  # learned again, not skipped
    assert book.holds_through(2)
    assert [e.id for e in book.deliver()] == [(1, 0), (2, 0)]
    other = Batch(first=0, ids=((3, 0), (2, 0)), holders=frozenset({1}))
    try:
        book.learn_batches([other], stable=2)
    except Exception as exc:  # a delivered position holding another event
        assert type(exc).__name__ == "Divergence"
    else:
        raise AssertionError("divergence not detected")


def test_order_book_learns_a_batch_as_it_learns_its_assignments_one_by_one() -> None:
    # Every case an assignment can meet: its payload in the pool or not here,
    # its position free or taken by another id, its id assigned elsewhere,
    # its position already delivered. learn_batches and learn agree on all.
    def book() -> OrderBook:
        b = OrderBook(log_retention=100)
        for source, seq in [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]:
            b.add_event(_ev(source, seq))
        b.learn([(0, (1, 0)), (1, (2, 0))], stable=2)
        assert [e.id for e in b.deliver()] == [(1, 0), (2, 0)]
        b.learn([(3, (3, 0)), (7, (3, 1))], stable=0)  # tentative
        return b

    # From position 1: delivered; in the pool; in the pool, its position
    # taken by (3, 0); assigned at 7; not here; back in the pool.
    ids = ((2, 0), (1, 1), (2, 1), (3, 1), (4, 0), (3, 0))
    batched, single = book(), book()
    batched.learn_batches([Batch(first=1, ids=ids, holders=frozenset({1}))], stable=7)
    single.learn(list(enumerate(ids, 1)), stable=7)
    for b in (batched, single):
        b.add_event(_ev(4, 0))
    assert batched.sizes() == single.sizes()
    assert [batched.assignment(s) for s in range(9)] == [single.assignment(s) for s in range(9)]
    assert [e.id for e in batched.deliver()] == [e.id for e in single.deliver()]
    assert batched.next_deliver == single.next_deliver == 7
    assert batched.digest == single.digest
    # A payload in the pool at a delivered position: a divergence either way.
    for learn in (
        lambda b: b.learn_batches([Batch(first=0, ids=((1, 1),), holders=frozenset({1}))], 0),
        lambda b: b.learn([(0, (1, 1))], 0),
    ):
        with pytest.raises(Divergence, match="delivered"):
            learn(book())


def _data_events(out: list[tuple[int, Message]], dest: int) -> list[list[int]]:
    """The seqs of each Data or DataBatch message to ``dest``, in order."""
    found = []
    for d, m in out:
        if d == dest and isinstance(m, Data):
            found.append([m.event.seq])
        elif d == dest and isinstance(m, DataBatch):
            found.append([e.seq for e in m.events])
    return found


def test_broadcasts_leave_at_most_once_per_broadcast_hold() -> None:
    # The fixed hold (max_hold 0: it does not grow with broadcasts in flight).
    proc = _ring(broadcast_hold=0.004, max_hold=0.0)[2]  # not the holder
    proc.handle_timer(0.0)  # the first heartbeats; the next are due at 0.05
    proc.messages_to_send()
    proc.broadcast(b"a", 0.0)  # after a quiet period: at the next pull
    assert proc.output_ready()
    assert _data_events(proc.messages_to_send(), 1) == [[0]]
    proc.broadcast(b"b", 0.001)  # sooner than the hold after that send: held
    proc.broadcast(b"c", 0.0015)
    assert not proc.output_ready()
    assert _data_events(proc.messages_to_send(), 1) == []
    assert proc.get_timer() == 0.004  # when the held ones leave
    proc.handle_timer(0.004)
    assert _data_events(proc.messages_to_send(), 1) == [[1, 2]]
    proc.broadcast(b"d", 0.0085)  # the hold after that send is over: at once
    assert _data_events(proc.messages_to_send(), 1) == [[3]]
    proc.broadcast(b"e", 0.009)  # held...
    assert not proc.output_ready()
    proc.broadcast(b"f", 0.0105)  # ... until a broadcast in the second half of the hold
    assert _data_events(proc.messages_to_send(), 1) == [[4, 5]]


def test_held_broadcasts_leave_before_anything_sent_after_them() -> None:
    procs = _ring(broadcast_hold=0.004)
    proc = procs[2]
    proc.broadcast(b"a", 0.0)
    proc.messages_to_send()
    proc.broadcast(b"b", 0.001)
    # A heartbeat to the others is due at once: the held broadcast goes first.
    proc.handle_timer(0.05)
    out = [(d, type(m).__name__) for d, m in proc.messages_to_send()]
    assert out.index((1, "Data")) < out.index((1, "Heartbeat"))


def test_the_holder_holds_its_broadcasts_until_it_passes_the_token() -> None:
    procs = _ring(broadcast_hold=0.001)
    holder = procs[1]
    assert holder.holds_token()
    holder.handle_timer(0.0)  # the first heartbeats (a send takes held broadcasts along)
    holder.messages_to_send()
    holder.broadcast(b"a", 0.0)
    holder.broadcast(b"b", 0.0)
    # Sequenced when the token leaves (token_hold, 5 ms), so they leave with it.
    out = holder.messages_to_send()
    assert _data_events(out, 2) == []
    while holder.holds_token():
        t = holder.get_timer()
        assert t <= 0.005
        holder.handle_timer(t)
        if holder.holds_token():
            assert _data_events(holder.messages_to_send(), 2) == []
    out = holder.messages_to_send()
    kinds = [(d, type(m).__name__) for d, m in out]
    assert _data_events(out, 2) == [[0, 1]]
    assert kinds.index((2, "DataBatch")) < kinds.index((2, "Token"))


def test_a_payload_that_only_joins_the_pool_asks_for_no_turn() -> None:
    procs = _ring()
    procs[3].broadcast(b"x", 0.0)
    [(_, message)] = [(d, m) for d, m in procs[3].messages_to_send() if d == 2]
    procs[2].receive(3, message, 0.0001)  # not the holder: nothing to answer
    assert not procs[2].output_ready()
    procs[1].receive(3, message, 0.0001)  # the holder: it sequences later, by its timer
    assert not procs[1].output_ready()


def test_with_no_hold_broadcasts_leave_at_the_next_pull() -> None:
    proc = _ring(broadcast_hold=0.0)[2]
    for i in range(3):
        proc.broadcast(b"m%d" % i, 0.001 * i)
    assert proc.output_ready()
    assert _data_events(proc.messages_to_send(), 1) == [[0, 1, 2]]
    proc.broadcast(b"m3", 0.003)
    assert _data_events(proc.messages_to_send(), 1) == [[3]]


class TimedNet(Net):
    """A :class:`Net` that also records when each message was sent."""

    def __init__(self, procs: dict[int, TokenRingProcess]) -> None:
        super().__init__(procs)
        self.times: list[float] = []

    def _collect(self, proc: TokenRingProcess) -> None:
        before = len(self.sent)
        super()._collect(proc)
        self.times += [self.t] * (len(self.sent) - before)


def test_an_idle_token_is_held_and_leaves_token_hold_after_a_message() -> None:
    cfg = TokenRingConfig()
    procs = _ring()
    net = Net(procs)
    net.run(3.0)
    moves = [m for _, _, m in net.sent if isinstance(m, Token)]
    # Idle: a move per token_timeout / (2 x 3) at most, not one per token_hold
    # (600 in 3 s); every member still sees it well within token_timeout.
    assert 3 * 3 <= len(moves) <= 3.0 / (cfg.token_timeout / 6) + 2
    assert all(
        p.statistics().light_changes == p.statistics().full_changes == 0 for p in procs.values()
    )
    # A broadcast reaches the idle holder, which passes token_hold later: the
    # next member's acceptance makes it deliverable (k = 2 of 3).
    sender = next(p for p in procs.values() if not p.holds_token())
    eid = sender.broadcast(b"x", net.t)
    net.run(net.t + cfg.token_hold + 0.001)
    assert sum(eid in seq for seq in net.delivered.values()) >= 2


def test_heartbeats_skip_members_that_other_messages_reached() -> None:
    cfg = TokenRingConfig()
    procs = _ring()
    net = TimedNet(procs)
    for i in range(100):  # a broadcast every 10 ms for 1 s
        procs[3].broadcast(b"m%d" % i, net.t)
        net.run(net.t + 0.01)
    busy_until = net.t
    net.run(busy_until + 1.0)  # then quiet
    to_1 = [(t, m) for t, (s, d, m) in zip(net.times, net.sent, strict=True) if (s, d) == (3, 1)]
    busy = [m for t, m in to_1 if 0.1 <= t < busy_until and isinstance(m, Heartbeat)]
    quiet = [m for t, m in to_1 if t > busy_until + 0.2 and isinstance(m, Heartbeat)]
    refresh = max(cfg.fetch_timeout, cfg.suspect_timeout / 2)
    # Busy: one per refresh period (the link counters), not one per interval.
    assert len(busy) <= (busy_until - 0.1) / refresh + 2
    assert len(busy) >= (busy_until - 0.1) / refresh / 2
    # Quiet (the token idle too): one per heartbeat interval.
    assert len(quiet) >= (1.0 - 0.2) / cfg.heartbeat_interval - 2
    # Member 1 never goes two heartbeat intervals without a message from 3.
    times = [t for t, _ in to_1]
    assert max(b - a for a, b in itertools.pairwise(times)) <= 2 * cfg.heartbeat_interval + 1e-9
    assert all(p.statistics().light_changes == 0 for p in procs.values())


# -- adaptive holds (max_hold) ------------------------------------------------

ADAPTIVE = 0.1
"""A ``max_hold`` that lets the holds grow (the default, 0, keeps them fixed)."""


def _sequential(net: Net, caller: TokenRingProcess, commands: int, step: float) -> list[float]:
    """One command in flight at a time: broadcast, wait for its delivery at
    the caller, broadcast the next. Returns each command's latency."""
    latencies = []
    for i in range(commands):
        start = net.t
        eid = caller.broadcast(b"s%d" % i, start)
        while eid not in net.delivered[caller.pid]:
            net.run(net.t + step)
            assert net.t - start < 1.0
        latencies.append(net.t - start)
    return latencies


def _stream(net: TimedNet, rate: float, seconds: float) -> None:
    """Every member broadcasts ``rate`` times a second for ``seconds``."""
    procs = list(net.procs.values())
    for i in range(round(rate * seconds)):
        for proc in procs:
            proc.broadcast(b"p%d" % i, net.t)
        net.run(net.t + 1 / rate)


def _gaps(times: list[float], since: float, until: float) -> list[float]:
    kept = [t for t in times if since <= t < until]
    return [b - a for a, b in itertools.pairwise(kept)]


def test_a_sequential_callers_holds_stay_at_the_floor() -> None:
    """One command in flight: the same latencies, command for command, as with
    the fixed holds (``max_hold`` 0), and each within a token hold of its
    broadcast (zero-delay links)."""
    for caller in (1, 2, 3):
        runs = []
        for max_hold in (0.0, ADAPTIVE):
            procs = _ring(max_hold=max_hold)
            net = Net(procs)
            net.run(0.3)
            runs.append(_sequential(net, procs[caller], 60, 0.0005))
        assert runs[0] == runs[1]
        assert max(runs[1]) <= TokenRingConfig().token_hold + 0.001


def test_a_streams_holds_grow_to_max_hold_and_shrink_back() -> None:
    cfg = TokenRingConfig(max_hold=ADAPTIVE)
    procs = _ring(max_hold=ADAPTIVE)
    net = TimedNet(procs)
    net.run(0.3)
    start = net.t
    _stream(net, 500, 1.0)  # 3 x 500/s
    end = net.t
    sends = list(zip(net.times, net.sent, strict=True))
    moves = [t for t, (_, _, m) in sends if isinstance(m, Token)]
    flushes = [t for t, (s, d, m) in sends if (s, d) == (2, 1) and isinstance(m, Data | DataBatch)]
    # Busy (after the first 0.2 s): the token moves about every max_hold, not
    # every token_hold, and never holds longer; broadcasts leave less often
    # than every broadcast_hold, and wait at most max_hold.
    moving = _gaps(moves, start + 0.2, end)
    assert max(moving) <= cfg.max_hold + 1e-9
    assert sorted(moving)[len(moving) // 2] >= cfg.max_hold / 2
    flushing = _gaps(flushes, start + 0.2, end)
    assert max(flushing) <= cfg.max_hold + 0.002 + 1e-9
    assert sorted(flushing)[len(flushing) // 2] >= 2 * cfg.broadcast_hold
    # Fewer messages than with the fixed holds.
    fixed = _ring(max_hold=0.0)
    fixed_net = TimedNet(fixed)
    fixed_net.run(0.3)
    _stream(fixed_net, 500, 1.0)
    streamed = sum(1 for t in net.times if t >= start)
    assert streamed < len(fixed_net.sent) / 2
    # Everything delivered everywhere, in one order.
    net.run(end + 0.5)
    orders = list(net.delivered.values())
    assert all(len(o) == 3 * 500 for o in orders) and orders[0] == orders[1] == orders[2]
    # Then the holds are back at the floors: a sequential caller waits at most
    # one broadcast_hold (its previous broadcast left just before) and one
    # token_hold, far from max_hold.
    for caller in procs.values():
        later = _sequential(net, caller, 30, 0.0005)
        assert max(later) <= cfg.broadcast_hold + cfg.token_hold + 0.001
    assert all(
        p.statistics().light_changes == p.statistics().full_changes == 0 for p in procs.values()
    )


def test_longer_holds_keep_the_failure_detection_bounds() -> None:
    """With a token_timeout short against max_hold, a stream's token still
    reaches every member within token_timeout / 2 (no view change), and a
    member that goes silent mid-stream is still moved out of the core."""
    cfg = TokenRingConfig(token_timeout=0.06, max_hold=ADAPTIVE)
    procs = _ring(token_timeout=0.06, max_hold=ADAPTIVE)
    net = TimedNet(procs)
    net.run(0.3)
    start = net.t
    _stream(net, 500, 0.6)
    end = net.t
    for pid in procs:
        got = [t for t, (_, d, m) in zip(net.times, net.sent, strict=True) if d == pid]
        tokens = [
            t
            for t, (_, d, m) in zip(net.times, net.sent, strict=True)
            if d == pid and isinstance(m, Token)
        ]
        assert got
        assert max(_gaps(tokens, start, end)) <= cfg.token_timeout / 2 + 1e-9
    assert all(
        p.statistics().light_changes == p.statistics().full_changes == 0 for p in procs.values()
    )
    # Member 3 goes silent mid-stream: suspected and moved out as before.
    net.drop = lambda src, dst, m: 3 in (src, dst)
    for i in range(200):
        procs[1].broadcast(b"q%d" % i, net.t)
        net.run(net.t + 0.002)
    net.run(net.t + cfg.suspect_timeout + cfg.token_timeout)
    assert procs[1].statistics().light_changes >= 1
    last = procs[1].broadcast(b"after", net.t)
    net.run(net.t + 0.1)
    assert last in net.delivered[1] and last in net.delivered[2]


def test_max_hold_is_validated_and_scaled() -> None:
    with pytest.raises(ConfigurationError):
        TokenRingConfig(max_hold=-0.001)
    assert TokenRingConfig(max_hold=ADAPTIVE).scaled(1000).max_hold == ADAPTIVE * 1000
    assert TokenRingConfig().max_hold == 0.0  # fixed holds by default
    # A floor at or above max_hold does not adapt: the fixed hold.
    procs = _ring(broadcast_hold=0.004, max_hold=0.002)
    proc = procs[2]
    proc.handle_timer(0.0)
    proc.messages_to_send()
    proc.broadcast(b"a", 0.0)
    proc.messages_to_send()
    proc.broadcast(b"b", 0.001)
    proc.broadcast(b"c", 0.0015)
    assert proc.get_timer() == 0.004
