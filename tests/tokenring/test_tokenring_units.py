"""Unit tests of the token-ring parts: token arithmetic, the order book,
Paxos rules, the role table, the configuration."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from epto import ConfigurationError, Event, LocalProtocolError
from epto.tokenring import TokenRingConfig, TokenRingProcess, choose_mode
from epto.tokenring._consensus import Acceptor, Proposer
from epto.tokenring._membership import TRANSITIONS, Input, Role, mermaid_diagram, transition
from epto.tokenring._messages import Promise, Report, TokenState
from epto.tokenring._sequencer import Divergence, OrderBook, accept, pick, sequence
from epto.tokenring._viewchange import bootstrap

EMPTY = TokenState(instance=0, hop=0, next_seq=0, low=0, stable=0, batches=())


def ev(source: int, seq: int) -> Event:
    return Event(source=source, seq=seq, ts=0, payload=b"%d/%d" % (source, seq))


def test_k_resiliency_counts_distinct_core_holders() -> None:
    core = (0, 1, 2, 3)
    s = sequence(EMPTY, 0, [(0, 0), (0, 1)], core, k=3)
    assert (s.next_seq, s.stable) == (2, 0)
    s = accept(s, 1, core, k=3)
    assert s.stable == 0
    s = accept(s, 1, core, k=3)  # one member accepting twice counts once
    assert s.stable == 0
    s = accept(s, 2, core, k=3)
    assert s.stable == 2
    assert s.low == 0  # member 3 has not seen it yet: the token keeps it
    s = accept(s, 3, core, k=3)
    assert s.low == 2 and s.batches == ()
    assert s.low_digest != 0
    assert s.hop == 5


def test_pick_keeps_each_source_in_seq_order_and_never_twice() -> None:
    state = TokenState(
        instance=0, hop=0, next_seq=3, low=3, stable=3, batches=(), sources=((1, 2),)
    )
    pool = [(1, 0), (2, 1), (1, 2), (2, 0), (1, 3)]
    # Chosen in arrival order, listed source by source (runs of consecutive ids).
    assert pick(state, pool, limit=10) == [(1, 2), (1, 3), (2, 0)]
    assert pick(state, pool, limit=2) == [(1, 2), (2, 0)]
    assert pick(state, pool, limit=1) == [(1, 2)]
    assert state.already_sequenced((1, 1)) and not state.already_sequenced((1, 2))


def test_order_book_delivers_in_sequence_when_stable_and_held() -> None:
    book = OrderBook(log_retention=10)
    book.add_event(ev(1, 0))
    book.learn([(0, (1, 0)), (1, (2, 0))], stable=1)
    assert [e.id for e in book.deliver()] == [(1, 0)]
    book.learn([], stable=2)
    assert list(book.deliver()) == []  # payload of (2, 0) missing
    assert book.missing(2) == ([], [(2, 0)])
    assert book.add_event(ev(2, 0))
    delivered = list(book.deliver())
    assert [(e.id, e.ts) for e in delivered] == [((2, 0), 1)]
    assert not book.add_event(ev(2, 0))  # duplicate of a delivered message


def test_order_book_detects_divergence() -> None:
    book = OrderBook(log_retention=10)
    book.add_event(ev(1, 0))
    book.learn([(0, (1, 0))], stable=1)
    list(book.deliver())
    with pytest.raises(Divergence):
        book.learn([(0, (2, 0))], stable=1)
    with pytest.raises(Divergence):
        book.check_digest(1, 12345)


def test_order_book_log_retention_bounds_memory() -> None:
    book = OrderBook(log_retention=5)
    for i in range(20):
        book.add_event(ev(1, i))
    book.learn([(i, (1, i)) for i in range(20)], stable=20)
    book.keep_from(12)
    assert len(list(book.deliver())) == 20
    # Retention evicts only below the token's low (a full view change may
    # still ask for what lies above it).
    assert len(book.log) == 8 and book.log_start == 12
    book.keep_from(20)
    book.add_event(ev(1, 20))
    book.learn([(20, (1, 20))], stable=21)
    assert len(list(book.deliver())) == 1
    assert len(book.log) == 5 and book.log_start == 16


def test_paxos_acceptor_rules() -> None:
    a = Acceptor(0)
    value = bootstrap((1, 2, 3))
    assert a.prepare((1, 0))
    assert a.prepare((1, 0))  # a copy (sent again by a link session): same answer
    assert not a.prepare((0, 2))
    assert a.accept((1, 0), value)
    assert a.prepare((2, 1))
    assert not a.accept((1, 0), value)
    assert a.accepted == ((1, 0), value)


def test_paxos_proposer_adopts_highest_accepted_value() -> None:
    p = Proposer(0, (3, 0), (1, 2, 3), started=0.0)
    report = Report(state=EMPTY, events=(), delivered=0)
    old = bootstrap((1, 2))
    newer = bootstrap((1, 3))
    p.promised(1, Promise(instance=0, ballot=(3, 0), accepted=((1, 1), old), report=report))
    assert not p.has_quorum()
    p.promised(2, Promise(instance=0, ballot=(3, 0), accepted=((2, 2), newer), report=report))
    p.promised(9, Promise(instance=0, ballot=(3, 0), accepted=None, report=report))  # not a voter
    assert p.has_quorum()
    chosen = p.choose(lambda promises: pytest.fail("must adopt the accepted value"))
    assert chosen is newer
    assert not p.accepted(1)
    assert p.accepted(3)


def test_role_table_and_diagram_in_docs() -> None:
    assert transition(Role.CORE, Input.INSTALL_EXTERNAL) is Role.EXTERNAL
    assert transition(Role.EXTERNAL, Input.INSTALL_CORE) is Role.CORE
    with pytest.raises(LocalProtocolError):
        transition(Role.EXCLUDED, Input.INSTALL_CORE)
    # Only a bootstrap member that finds the group beyond its bootstrap view
    # (restarted under its id) becomes joining again.
    assert all(
        dst is not Role.JOINING or src is Role.JOINING or event is Input.RESTARTED
        for (src, event), dst in TRANSITIONS.items()
    )
    page = Path(__file__).resolve().parents[2] / "docs" / "token-ring.md"
    assert mermaid_diagram() in page.read_text(encoding="utf-8")


def test_config_validation_and_mode_choice() -> None:
    with pytest.raises(ConfigurationError, match="k"):
        TokenRingConfig(k=0)
    with pytest.raises(ConfigurationError, match="exclude_timeout"):
        TokenRingConfig(suspect_timeout=2.0, exclude_timeout=1.0)
    cfg = TokenRingConfig()
    assert cfg.effective_k(5, 5) == 3 and cfg.effective_k(10, 4) == 6
    assert TokenRingConfig(k=4).effective_k(5, 2) == 2
    assert choose_mode(5) == "token-ring" and choose_mode(31) == "epto"
    assert choose_mode(1000, "token-ring") == "token-ring"
    with pytest.raises(ConfigurationError):
        choose_mode(5, "ring")


def test_scaled_multiplies_every_time_and_nothing_else() -> None:
    cfg = TokenRingConfig(max_hold=0.1, k=2, max_batch=7)
    scaled = cfg.scaled(1000)
    times = {
        "token_hold": 5.0,
        "broadcast_hold": 5.0,
        "max_hold": 100.0,
        "heartbeat_interval": 50.0,
        "suspect_timeout": 300.0,
        "exclude_timeout": 5000.0,
        "readmit_after": 1000.0,
        "token_timeout": 1000.0,
        "change_timeout": 400.0,
        "fetch_timeout": 100.0,
    }
    for name, value in times.items():
        assert getattr(scaled, name) == pytest.approx(value), name
    assert scaled.k == 2 and scaled.max_batch == 7
    assert scaled.log_retention == cfg.log_retention


def test_process_api_errors() -> None:
    with pytest.raises(LocalProtocolError):
        TokenRingProcess(1, TokenRingConfig(), rng=random.Random(1), now=0.0, members=[2, 3])
    joiner = TokenRingProcess(7, TokenRingConfig(), rng=random.Random(1), now=0.0, contacts=[1])
    with pytest.raises(LocalProtocolError):
        joiner.broadcast(b"x", 0.0)
    joiner.handle_timer(0.0)
    assert [type(m).__name__ for _, m in joiner.messages_to_send()] == ["Join"]


def test_single_member_group_delivers_its_own_broadcasts() -> None:
    proc = TokenRingProcess(1, TokenRingConfig(), rng=random.Random(1), now=0.0, members=[1])
    ids = [proc.broadcast(b"a", 0.0), proc.broadcast(b"b", 0.001)]
    t = 0.0
    while t < 0.2:
        t = max(t, proc.get_timer())
        proc.handle_timer(t)
    assert [d.event.id for d in proc.deliveries()] == ids


def test_statistics_change_nothing() -> None:
    """Reading the counters has no effect: the same outputs follow with or
    without calls to statistics() in between."""

    def run(read: bool) -> list[object]:
        procs = {
            p: TokenRingProcess(
                p, TokenRingConfig(), rng=random.Random(p), now=0.0, members=[1, 2, 3]
            )
            for p in (1, 2, 3)
        }
        seen: list[object] = []
        t = 0.0
        for step in range(300):
            if step % 10 == 0:
                procs[1 + step % 3].broadcast(b"m%d" % step, t)
            for pid, proc in procs.items():
                if read:
                    before = proc.statistics()
                    assert proc.statistics() == before
                proc.handle_timer(t)
                for dest, msg in proc.messages_to_send():
                    seen.append((pid, dest, msg))
                    procs[dest].receive(pid, msg, t + 0.001)
                seen.extend(d.event.id for d in proc.deliveries())
                seen.append((proc.get_timer(), proc.holds_token(), proc.memory_sizes()))
            t += 0.002
        seen.extend(proc.statistics() for proc in procs.values())
        return seen

    assert run(read=True) == run(read=False)
