"""A process signs its own events at broadcast when given a signer."""

from __future__ import annotations

import random

import attrs

import epto
import epto.epidemic


def _key(seed: int) -> bytes:
    return random.Random(seed).randbytes(32)


def test_broadcast_events_carry_a_signature_that_verifies() -> None:
    signer = epto.EventSigner(1, _key(1))
    members = epto.epidemic.Membership([1, 2])
    config = epto.Config(fanout=1, ttl=2, round_interval=1.0)
    proc = epto.epidemic.Process(
        1,
        config,
        peers=epto.epidemic.FullView(1, members),
        rng=random.Random(1),
        now=0.0,
        signer=signer.signature,
    )
    proc.broadcast(b"hello", 0.0)
    proc.handle_timer(1.0)
    [(dest, ball)] = proc.messages_to_send()
    assert dest == 2
    verifier = epto.SignatureVerifier({1: signer.public_key})
    assert dict(verifier.filter_ball(ball)) == dict(ball)
    [(event, ttl)] = ball.values()
    assert event.signature
    forged = {event.id: (attrs.evolve(event, payload=b"altered"), ttl)}
    assert verifier.filter_ball(forged) == {}


def test_node_passes_the_signer_to_its_process() -> None:
    signer = epto.EventSigner(3, _key(3))
    node = epto.epidemic.Node(
        3,
        epto.Config(fanout=1, ttl=2),
        rng=random.Random(3),
        now=0.0,
        members=[3, 4],
        signer=signer.signature,
    )
    node.broadcast(b"x", 0.0)
    node.handle_timer(node.get_timer())
    [(_, ball)] = node.messages_to_send()
    [(event, _)] = ball.values()  # type: ignore[union-attr]
    assert epto.SignatureVerifier({3: signer.public_key}).check(event) is None
