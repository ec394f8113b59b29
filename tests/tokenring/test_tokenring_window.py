"""A full view change never needs a frame larger than the links carry: the
unstable window (what a Promise, an Accept and a Decided carry) stays within
``TokenRingConfig.max_unstable_bytes`` and ``max_unstable_messages``."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from epto.transports.simulation import TokenRingCluster

from epto import ConfigurationError, Event, Limits, LocalProtocolError, ProcessId
from epto.tokenring import (
    RingConfig,
    TokenRingConfig,
    TokenRingProcess,
    TokenState,
    token_ring_registry,
)
from epto.tokenring._messages import Accept, Batch, Decided, Prepare, Promise, Report, Token
from epto.tokenring._sequencer import pick, relabel
from epto.tokenring._tokenpath import batch_bytes
from epto.wire import FrameCodec

STREAM = Limits.for_frame_size(1 << 20, max_events_per_ball=4096)
"""1 MiB frames, as the TCP driver's (their default payload bound aside)."""
STREAM_DEFAULT = Limits.for_frame_size(1 << 20, max_events_per_ball=4096, max_payload_size=524_224)
"""The TCP driver's default limits."""
CONSENSUS = (Promise, Accept, Decided)


class FrameAudit:
    """Encodes every consensus message a process sends, as a driver would."""

    def __init__(self, limits: Limits) -> None:
        self.codec = FrameCodec(group=0, limits=limits, registry=token_ring_registry())
        self.encoded: dict[str, int] = {}
        self.failed: list[tuple[str, str]] = []
        self.largest = 0
        self.token_window = 0
        """Most messages any token state carried."""

    def wrap(self, pid: ProcessId, proc: TokenRingProcess) -> None:
        inner: Callable[[], list[tuple[ProcessId, object]]] = proc.messages_to_send  # type: ignore[assignment]

        def messages_to_send() -> list[tuple[ProcessId, object]]:
            out = inner()
            for _, message in out:
                if isinstance(message, Token):
                    window = sum(len(b.ids) for b in message.state.batches)
                    self.token_window = max(self.token_window, window)
                if isinstance(message, CONSENSUS):
                    name = type(message).__name__
                    try:
                        frames = self.codec.encode(pid, message)
                    except LocalProtocolError as exc:
                        self.failed.append((name, str(exc)))
                        continue
                    self.encoded[name] = self.encoded.get(name, 0) + 1
                    self.largest = max(self.largest, max(len(f) for f in frames))
            return out

        proc.messages_to_send = messages_to_send  # type: ignore[method-assign]


def _crash_under_large_bursts(
    config: TokenRingConfig, *, members: int = 5, per_burst: int = 200
) -> tuple[TokenRingCluster, FrameAudit]:
    """``members`` members; the last crashes at 0.5 s and is excluded by a
    full view change about ``exclude_timeout`` later, while bursts of 4 KiB
    messages (``per_burst`` every 10 ms) keep the token's window large."""
    cluster = TokenRingCluster(members, config, seed=7, delay=(0.001, 0.003))
    audit = FrameAudit(STREAM)
    # The run loop drains each process through its endpoint adapter, whose
    # messages_to_send is the process's own bound method: wrap it there.
    for pid, adapter in cluster.endpoints.items():
        audit.wrap(pid, adapter)  # type: ignore[arg-type]
    payload = bytes(4096)
    t = 1.2
    n = 0
    while t < 1.8:
        for i in range(per_burst):
            cluster.broadcast_at(t, i % (members - 1), payload[:-8] + n.to_bytes(8, "big"))
            n += 1
        t += 0.01
    cluster.at(0.5, lambda: cluster.crash(members - 1))
    cluster.run_until(4.0)
    return cluster, audit


CRASH = TokenRingConfig(exclude_timeout=1.0, suspect_timeout=0.2)


def test_unbounded_window_makes_the_full_change_unencodable() -> None:
    """The defect the budgets fix: with budgets beyond the frame, a window of
    4 KiB messages exceeds 1 MiB and the full change's Promise and Accept
    cannot be encoded, so over TCP the change would never complete."""
    unbounded = attrs.evolve(
        CRASH, max_unstable_bytes=1 << 40, max_unstable_messages=1 << 20, log_retention=1 << 20
    )
    # Bursts of 400: the window at the change is well past the frame (at 200
    # it is near 1 MiB, and which side it falls on depends on when the change
    # starts relative to the bursts).
    _, audit = _crash_under_large_bursts(unbounded, per_burst=400)
    failed = {name for name, _ in audit.failed}
    assert "Promise" in failed and "Accept" in failed, audit.encoded
    assert all("exceeds the frame budget" in why for _, why in audit.failed)


def test_full_change_under_large_payloads_fits_the_frame_and_completes() -> None:
    cluster, audit = _crash_under_large_bursts(CRASH)
    assert not audit.failed, audit.failed[:3]
    assert audit.encoded.get("Promise", 0) >= 1 and audit.encoded.get("Decided", 0) >= 1
    assert audit.largest <= STREAM.max_frame_size
    # Every token carried at most the budget's worth of 4 KiB messages (the
    # batches' own bytes count too), and the budget did bind (the bursts would
    # have filled more).
    most = CRASH.max_unstable_bytes // 4096
    assert most - 4 <= audit.token_window < most
    survivors = [cluster.procs[p] for p in range(4)]
    assert all(p.statistics().full_changes == 1 for p in survivors)
    assert all(4 not in p.config.members for p in survivors)
    report = cluster.check()
    assert report.ok, report.summary()
    sequences = [cluster.delivered[p] for p in range(4)]
    assert all(s == sequences[0] for s in sequences)
    assert len(sequences[0]) == len(cluster.broadcasts)


def test_the_default_budgets_fit_the_tcp_frame_and_the_relation_is_checked() -> None:
    cfg = TokenRingConfig()
    cfg.check_limits(STREAM_DEFAULT)
    assert cfg.consensus_bytes() < STREAM_DEFAULT.max_frame_size
    with pytest.raises(ConfigurationError, match="needs consensus frames"):
        TokenRingConfig(max_unstable_bytes=1 << 20).check_limits(STREAM_DEFAULT)
    with pytest.raises(ConfigurationError, match="max_events_per_ball"):
        TokenRingConfig(max_unstable_messages=5000).check_limits(STREAM_DEFAULT)
    with pytest.raises(ConfigurationError, match="max_payload_size"):
        TokenRingConfig(max_unstable_bytes=1024).check_limits(STREAM_DEFAULT)
    with pytest.raises(ConfigurationError, match="must be >= 1"):
        TokenRingConfig(max_unstable_messages=0)


def test_the_tcp_node_refuses_a_budget_beyond_its_frames() -> None:
    from epto.transports.trio_tcp import TokenRingNode

    from epto.endpoint import NodeConfig

    def node(**fields: Any) -> TokenRingNode:
        return TokenRingNode(
            NodeConfig(pid=1, members={1: "127.0.0.1:9000"}, mode="token-ring", **fields)
        )

    node()
    with pytest.raises(ConfigurationError, match="max_unstable_bytes"):
        node(tokenring=TokenRingConfig(max_unstable_bytes=2 << 20))
    small = Limits.for_frame_size(8192, max_payload_size=2000, max_events_per_ball=16)
    fitting = TokenRingConfig(max_unstable_bytes=4096, max_unstable_messages=16)
    node(limits=small, tokenring=fitting)
    with pytest.raises(ConfigurationError):
        node(limits=small)


def test_pick_stops_at_the_byte_budget_and_an_empty_window_admits_one() -> None:
    state = TokenState(instance=0, hop=0, next_seq=0, low=0, stable=0, batches=())
    pool = [(1, 0), (1, 1), (2, 0), (1, 2)]
    size = {(1, 0): 40, (1, 1): 40, (2, 0): 30, (1, 2): 1}

    def cost(eid: tuple[int, int]) -> int:
        return size[eid]

    assert pick(state, pool, 10, room=100, cost=cost) == [(1, 0), (1, 1)]
    # The first that does not fit stops the choice (arrival order is kept).
    assert pick(state, pool, 10, room=79, cost=cost) == [(1, 0)]
    assert pick(state, pool, 10, room=10, cost=cost) == [(1, 0)]
    assert pick(state, pool, 10, room=10, cost=cost, first_free=False) == []
    assert pick(state, pool, 0, room=1000, cost=cost) == []


def _three(**fields: object) -> dict[int, TokenRingProcess]:
    cfg = TokenRingConfig(**fields)  # type: ignore[arg-type]
    return {
        p: TokenRingProcess(p, cfg, rng=random.Random(p), now=0.0, members=[1, 2, 3])
        for p in (1, 2, 3)
    }


def _run(
    procs: dict[int, TokenRingProcess],
    until: float,
    sent: list[object],
    *,
    start: float = 0.0,
    max_messages: int = 1_000_000,
) -> None:
    """Zero-delay FIFO links between ``procs``, timers in order; stops after
    ``max_messages`` sends (a token going round without pause)."""
    queue: deque[tuple[int, int, object]] = deque()
    t = start

    def collect(proc: TokenRingProcess) -> None:
        proc.deliveries()
        for dest, message in proc.messages_to_send():
            sent.append(message)
            queue.append((proc.pid, dest, message))

    for proc in procs.values():
        collect(proc)
    while True:
        if len(sent) >= max_messages:
            return
        if queue:
            src, dest, message = queue.popleft()
            if dest not in procs:
                continue  # a member that is not simulated
            procs[dest].receive(src, message, t)  # type: ignore[arg-type]
            collect(procs[dest])
            continue
        due = min(p.get_timer() for p in procs.values())
        if due > until:
            return
        t = max(t, due)
        for proc in procs.values():
            if proc.get_timer() <= t:
                proc.handle_timer(t)
                collect(proc)


def test_the_holder_pauses_while_the_window_is_full_and_everything_is_delivered() -> None:
    procs = _three(max_unstable_bytes=1000)
    ids = [procs[2].broadcast(bytes(300), 0.0) for _ in range(20)]
    big = procs[3].broadcast(bytes(5000), 0.0)  # larger than the budget
    sent: list[object] = []
    _run(procs, 3.0, sent)
    windows = [sum(len(b.ids) for b in m.state.batches) for m in sent if isinstance(m, Token)]
    lone = [
        m.state.batches
        for m in sent
        if isinstance(m, Token) and any(big in b.ids for b in m.state.batches)
    ]
    # 300-byte messages: at most three in a 1000-byte window; the 5000-byte
    # one went through an empty window, alone.
    assert max(windows) == 3
    assert lone and all(len(batches) == 1 and batches[0].ids == (big,) for batches in lone)
    sequences = [[d for d in p._s.book.log.values()] for p in procs.values()]
    assert all(len(s) == 21 for s in sequences)
    assert {e.id for e in sequences[0]} == set(ids) | {big}


def test_a_promise_with_an_accepted_value_leaves_the_window_out() -> None:
    procs = _three()
    for i in range(5):
        procs[1].broadcast(b"p%d" % i, 0.0)
    proc = procs[1]
    passed: list[Token] = []
    while not passed:  # until it sequences the five and passes the token
        proc.handle_timer(proc.get_timer())
        passed += [m for _, m in proc.messages_to_send() if isinstance(m, Token)]
    assert passed[0].state.next_seq == 5
    first = Prepare(instance=0, ballot=(1, 1), full=True)
    proc.receive(2, first, 0.01)
    promise = next(m for _, m in proc.messages_to_send() if isinstance(m, Promise))
    assert promise.accepted is None and len(promise.report.events) == 5
    value = proc.config
    proc.receive(2, Accept(instance=0, ballot=(1, 1), value=value), 0.02)
    proc.receive(2, Prepare(instance=0, ballot=(2, 1), full=True), 0.03)
    again = next(m for _, m in proc.messages_to_send() if isinstance(m, Promise))
    assert again.accepted == ((1, 1), value)
    assert again.report.events == () and again.report.state.batches == ()
    assert promise.report.state.batches


def test_a_full_window_that_cannot_drain_does_not_send_the_token_round_at_link_speed() -> None:
    """Core of two in a view of five (k = 3): nothing becomes stable, so the
    window stays full; with a full batch waiting the holders still hold the
    token ``token_hold`` instead of passing it at once, again and again."""
    # The fixed token_hold (max_hold 0: a window of four would hold it longer).
    cfg = TokenRingConfig(max_unstable_messages=4, max_batch=4, max_hold=0.0)
    members = [1, 2, 3, 4, 5]
    procs = {
        p: TokenRingProcess(p, cfg, rng=random.Random(p), now=0.0, members=members) for p in (1, 2)
    }
    core = (1, 2)
    for proc in procs.values():
        state = relabel(proc._tokens.snap, 1, core, cfg.effective_k(5, 2))
        config = RingConfig(instance=1, view=0, members=tuple(members), core=core, state=state)
        proc._change.install(config, 0.0)
        proc.messages_to_send()
    for i in range(40):
        procs[1 + i % 2].broadcast(b"w%d" % i, 0.0)
    sent: list[object] = []
    # Members 3-5 are silent: stop before they are suspected (0.3 s).
    _run(procs, 0.25, sent, max_messages=20_000)
    tokens = [m for m in sent if isinstance(m, Token)]
    assert max(sum(len(b.ids) for b in m.state.batches) for m in tokens) == 4
    assert all(m.state.stable == 0 for m in tokens)
    # About one pass per token_hold (5 ms), not thousands.
    assert 20 <= len(tokens) <= 80


def test_a_window_at_the_budgets_fits_the_default_frame_in_the_worst_layout() -> None:
    """4096 messages in 4096 batches of one (ids in runs of one, every batch
    held by all five members), with payloads filling the byte budget once the
    batches' own bytes are charged: the Promise, Accept and Decided of a full
    change still fit a 1 MiB frame, within ``consensus_bytes()``."""
    cfg = TokenRingConfig()
    members = (1, 2, 3, 4, 5)
    n = cfg.max_unstable_messages
    per_batch = batch_bytes(len(members))
    payload = bytes(cfg.max_unstable_bytes // n - per_batch)
    events = [Event(source=1 + i % 5, seq=2 * i, ts=0, payload=payload) for i in range(n)]
    batches = tuple(
        Batch(first=i, ids=(e.id,), holders=frozenset(members)) for i, e in enumerate(events)
    )
    assert len(payload) * n + per_batch * n <= cfg.max_unstable_bytes
    state = TokenState(
        instance=3, hop=9, next_seq=n, low=0, stable=0, batches=batches,
        sources=tuple((s, 2 * n) for s in members),
    )  # fmt: skip
    entries = tuple(enumerate(events))
    report = Report(state=state, events=entries, delivered=0)
    promise = Promise(instance=3, ballot=(2, 1), accepted=None, report=report)
    empty = TokenState(instance=4, hop=0, next_seq=0, low=0, stable=0, batches=())
    ring = RingConfig(
        instance=4, view=1, members=members, core=members, state=empty, events=entries, full=True
    )
    bare = Report(state=attrs.evolve(state, batches=()), events=(), delivered=0)
    with_accepted = Promise(instance=3, ballot=(3, 1), accepted=((2, 1), ring), report=bare)
    codec = FrameCodec(group=0, limits=STREAM_DEFAULT, registry=token_ring_registry())
    for message in (promise, with_accepted, Accept(instance=3, ballot=(2, 1), value=ring)):
        (frame,) = codec.encode(1, message)
        assert len(frame) <= cfg.consensus_bytes() + 1024  # lists of five members
    assert cfg.consensus_bytes() + 1024 < STREAM_DEFAULT.max_frame_size
