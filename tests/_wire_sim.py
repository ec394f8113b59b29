"""A small deterministic cluster whose every ball goes through the wire codec.

Each step is one round: processes broadcast, run their round, and every ball
is signed (optionally), encoded, sealed, bound to its receiver and handed to
the receiver's codec, which opens, decodes and verifies it before
``Process.receive``. Adversaries see every frame on the wire and add frames
of their own through hooks.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs

from epto import Config, Event, EventSigner, GroupKey, SignatureVerifier
from epto.epidemic import FullView, Membership, Process
from epto.wire import FrameCodec, GroupSealer

GROUP = 0x5EED
INTERVAL = 1.0


def ed25519_keys(seed: int, pid: int) -> tuple[bytes, bytes]:
    """A deterministic key pair (tests only)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = random.Random(seed * 7919 + pid).randbytes(32)
    return private, Ed25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


# An adversary hook gets (round, captured frames of this round as (dest, raw))
# and returns frames to inject as (dest, raw).
Adversary = Callable[[int, list[tuple[int, bytes]]], list[tuple[int, bytes]]]
# A relay hook lets a member rewrite the balls it sends: (round, ball) -> ball.
Relay = Callable[[int, dict[Any, Any]], dict[Any, Any]]


@attrs.define
class Cluster:
    n: int
    seed: int
    key: GroupKey
    signed: bool = False
    processes: dict[int, Process] = attrs.field(factory=dict)
    codecs: dict[int, FrameCodec] = attrs.field(factory=dict)
    signers: dict[int, EventSigner] = attrs.field(factory=dict)
    verifiers: dict[int, SignatureVerifier] = attrs.field(factory=dict)
    delivered: dict[int, list[Event]] = attrs.field(factory=dict)
    broadcast: dict[tuple[int, int], Event] = attrs.field(factory=dict)
    relays: dict[int, Relay] = attrs.field(factory=dict)
    frames_sent: int = 0

    def __attrs_post_init__(self) -> None:
        membership = Membership(range(self.n))
        config = Config.for_group(self.n, round_interval=INTERVAL)
        roster = {pid: ed25519_keys(self.seed, pid)[1] for pid in range(self.n)}
        for pid in range(self.n):
            rng = random.Random(self.seed * 1000 + pid)
            self.processes[pid] = Process(
                pid, config, peers=FullView(pid, membership), rng=rng, now=0.0
            )
            sealer = GroupSealer(self.key, counter_start=0, rng=rng)
            ball_filter = None
            if self.signed:
                self.signers[pid] = EventSigner(pid, ed25519_keys(self.seed, pid)[0])
                self.verifiers[pid] = SignatureVerifier(roster)
                ball_filter = self.verifiers[pid].filter_ball
            self.codecs[pid] = FrameCodec(
                group=GROUP, sealer=sealer, ball_filter=ball_filter, me=pid
            )
            self.delivered[pid] = []

    def run(
        self,
        rounds: int,
        *,
        broadcast_rounds: int,
        adversary: Adversary | None = None,
    ) -> None:
        rng = random.Random(self.seed)
        for r in range(1, rounds + 1):
            now = r * INTERVAL
            if r <= broadcast_rounds:
                for pid in rng.sample(range(self.n), max(1, self.n // 4)):
                    payload = b"m%d.%d" % (pid, r)
                    eid = self.processes[pid].broadcast(payload, now)
                    self.broadcast[eid] = Event(source=pid, seq=eid[1], ts=0, payload=payload)
            wire: list[tuple[int, bytes]] = []
            for pid, process in self.processes.items():
                process.handle_timer(now)
                for dest, ball in process.messages_to_send():
                    if self.signed:
                        ball = self.signers[pid].sign_ball(ball)
                    if pid in self.relays:
                        ball = self.relays[pid](r, dict(ball))
                    for raw in self.codecs[pid].encode(pid, ball, to=dest):
                        wire.append((dest, raw))
            self.frames_sent += len(wire)
            if adversary is not None:
                wire += adversary(r, list(wire))
            for dest, raw in wire:
                if dest not in self.processes:
                    continue
                frame = self.codecs[dest].receive(raw, now + 0.5)
                if frame is not None:
                    self.processes[dest].receive(frame.sender, frame.message, now + 0.5)
            for pid, process in self.processes.items():
                self.delivered[pid].extend(d.event for d in process.deliveries())

    def sequences(self) -> dict[int, list[tuple[int, int]]]:
        return {pid: [e.id for e in events] for pid, events in self.delivered.items()}
