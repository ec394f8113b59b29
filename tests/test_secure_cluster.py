"""Simulated clusters: every ball is signed, encoded, sealed and decoded through the codec.

An outsider (no group key) injects frames every round; a member forges and
alters events of others when it relays. Correct processes deliver every
genuine event, in total order, and nothing else.
"""

from __future__ import annotations

import random
from collections import Counter

import attrs
import pytest

from epto import Event, GroupKey
from epto.check import check
from epto.wire import FrameCodec, GroupSealer

pytest.importorskip("cryptography")

from _wire_sim import GROUP, Cluster, ed25519_keys

from epto import EventSigner

KEY = GroupKey(key_id=1, secret=random.Random(1).randbytes(32))
ROUNDS = 34
BROADCAST_ROUNDS = 8


def assert_delivered_exactly_the_genuine_events(
    cluster: Cluster, correct: range | list[int]
) -> None:
    sequences = {pid: cluster.sequences()[pid] for pid in correct}
    report = check(sequences, expected=set(cluster.broadcast))
    assert report.ok and report.total_holes == 0, report.summary()
    for pid in correct:
        assert len(cluster.delivered[pid]) == len(cluster.broadcast)
        for event in cluster.delivered[pid]:
            assert event.payload == cluster.broadcast[event.id].payload


def test_outsider_injecting_every_round_never_gets_an_event_delivered() -> None:
    cluster = Cluster(n=8, seed=3, key=KEY)
    outsider_key = GroupKey(key_id=1, secret=random.Random(2).randbytes(32))
    outsider = FrameCodec(
        group=GROUP, sealer=GroupSealer(outsider_key, counter_start=0, prefix=b"evil")
    )
    plain = FrameCodec(group=GROUP)
    rng = random.Random(5)
    injected = Counter[str]()

    def adversary(r: int, captured: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        for dest in range(cluster.n):
            evil = {
                (99, r): (Event(source=99, seq=r, ts=r, payload=b"evil-own"), 0),
                (0, 500 + r): (Event(source=0, seq=500 + r, ts=r, payload=b"evil-as-0"), 0),
            }
            for raw in outsider.encode(99, evil, to=dest):
                out.append((dest, raw))
                injected["wrong-key"] += 1
            for raw in plain.encode(0, evil):
                out.append((dest, raw))
                injected["plain"] += 1
        for dest, raw in rng.sample(captured, min(10, len(captured))):
            out.append((dest, raw))  # replayed to its receiver
            injected["replay"] += 1
            out.append(((dest + 1) % cluster.n, raw))  # replayed to another member
            injected["redirected"] += 1
            flipped = bytearray(raw)
            flipped[rng.randrange(24, len(raw))] ^= 1 << rng.randrange(8)
            out.append((dest, bytes(flipped)))  # tampered
            injected["tampered"] += 1
        return out

    cluster.run(ROUNDS, broadcast_rounds=BROADCAST_ROUNDS, adversary=adversary)

    assert_delivered_exactly_the_genuine_events(cluster, range(cluster.n))
    rejected = Counter[str]()
    for codec in cluster.codecs.values():
        rejected.update(codec.rejected)
    # Every injected frame was rejected, and counted under its reason.
    assert sum(rejected.values()) == sum(injected.values())
    assert rejected["unsealed"] == injected["plain"]
    # A bit flip in the nonce counter may turn a tampered frame into a replay.
    assert rejected["replay"] >= injected["replay"]
    assert rejected["replay"] + rejected["bad-tag"] == (
        injected["wrong-key"] + injected["replay"] + injected["redirected"] + injected["tampered"]
    )
    assert injected["wrong-key"] == cluster.n * ROUNDS


@attrs.define
class Forger:
    """A member that alters and forges events of others in the balls it relays."""

    pid: int
    seed: int
    forged: int = 0

    def __call__(self, r: int, ball: dict) -> dict:
        out = {}
        own_key = EventSigner(self.pid, ed25519_keys(self.seed, self.pid)[0])
        for key, (event, ttl) in ball.items():
            if event.source != self.pid:
                # Altered payload, original signature: must be rejected.
                event = attrs.evolve(event, payload=event.payload + b"!")
                self.forged += 1
            out[key] = (event, ttl)
        # A new event in the name of process 0, signed with the forger's key.
        fake = Event(source=0, seq=900 + r, ts=r, payload=b"forged")
        fake = attrs.evolve(fake, signature=own_key.signature(fake))
        out[fake.id] = (fake, 1)
        # An unsigned event in the name of process 1.
        out[(1, 900 + r)] = (Event(source=1, seq=900 + r, ts=r, payload=b"unsigned"), 1)
        self.forged += 2
        return out


def test_forged_and_altered_events_are_rejected_by_every_correct_process() -> None:
    n, forger_pid = 8, 7
    baseline = Cluster(n=n, seed=4, key=KEY, signed=True)
    baseline.run(ROUNDS, broadcast_rounds=BROADCAST_ROUNDS)
    assert_delivered_exactly_the_genuine_events(baseline, range(n))

    cluster = Cluster(n=n, seed=4, key=KEY, signed=True)
    forger = Forger(pid=forger_pid, seed=4)
    cluster.relays[forger_pid] = forger
    cluster.run(ROUNDS, broadcast_rounds=BROADCAST_ROUNDS)

    correct = [pid for pid in range(n) if pid != forger_pid]
    assert forger.forged > 0
    assert_delivered_exactly_the_genuine_events(cluster, correct)
    # Deliveries unaffected: the same events as without the forger.
    for pid in correct:
        assert {e.id for e in cluster.delivered[pid]} == {e.id for e in baseline.delivered[pid]}
    for pid in correct:
        stats = cluster.verifiers[pid].statistics()
        assert stats.rejected.get("bad-signature", 0) > 0, (pid, stats)
        assert stats.rejected.get("unsigned", 0) > 0, (pid, stats)
        assert stats.rejected.get("altered", 0) + stats.rejected.get("bad-signature", 0) > 0
        # Verified once per event id: copies after the first are cache hits.
        assert stats.passed == len(cluster.broadcast)
        assert stats.checks == stats.passed + stats.rejected["bad-signature"]
        assert stats.cache_hits > 10 * stats.passed


def test_without_signatures_the_forger_succeeds() -> None:
    """The control: the same forger in a group that only seals frames gets its
    altered events delivered, which shows the signed test above can fail."""
    cluster = Cluster(n=8, seed=4, key=KEY, signed=False)
    cluster.relays[7] = Forger(pid=7, seed=4)
    cluster.run(ROUNDS, broadcast_rounds=BROADCAST_ROUNDS)
    bad = [
        e
        for pid in range(7)
        for e in cluster.delivered[pid]
        if e.id not in cluster.broadcast or e.payload != cluster.broadcast[e.id].payload
    ]
    assert bad
