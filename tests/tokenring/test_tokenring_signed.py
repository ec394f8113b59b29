"""Signed token-ring groups: broadcasts are signed by their source, and events
whose signature does not verify never enter a member (docs/security.md)."""

from __future__ import annotations

import random

import attrs

from epto import Event, EventSigner, SignatureVerifier, keys
from epto.tokenring import TokenRingConfig, TokenRingProcess
from epto.tokenring._messages import Catchup, Data, DataBatch

PIDS = (1, 2, 3)


def _keys() -> dict[int, tuple[bytes, bytes]]:
    return {pid: keys.generate_signing_key() for pid in PIDS}


def _process(pid: int, pairs: dict[int, tuple[bytes, bytes]]) -> TokenRingProcess:
    roster = {p: public for p, (_, public) in pairs.items()}
    return TokenRingProcess(
        pid,
        TokenRingConfig(),
        rng=random.Random(pid),
        now=0.0,
        members=PIDS,
        signer=EventSigner(pid, pairs[pid][0]).signature,
        verifier=SignatureVerifier(roster).check,
    )


def _run(procs: dict[int, TokenRingProcess], until: float) -> None:
    now = 0.0
    while now < until:
        for pid, proc in procs.items():
            proc.handle_timer(now)
            for dest, message in proc.messages_to_send():
                procs[dest].receive(pid, message, now)
        now += 0.001


def test_signed_group_delivers_signed_events_and_refuses_forgeries() -> None:
    pairs = _keys()
    procs = {pid: _process(pid, pairs) for pid in PIDS}
    eid = procs[2].broadcast(b"genuine", 0.0)
    # An outsider (or a member) forges an event of member 3 and an unsigned one.
    forged = Event(source=3, seq=0, ts=0, payload=b"forged", signature=b"\x01" * 64)
    unsigned = Event(source=3, seq=1, ts=0, payload=b"unsigned")
    procs[1].receive(3, Data(event=forged), 0.0)
    procs[1].receive(3, DataBatch(events=(unsigned,)), 0.0)
    procs[1].receive(3, Catchup(entries=((0, forged),), stable=1, oldest=0), 0.0)
    _run(procs, 1.0)
    for proc in procs.values():
        got = [d.event for d in proc.deliveries()]
        assert [e.id for e in got] == [eid]
        assert got[0].signature == EventSigner(2, pairs[2][0]).signature(attrs.evolve(got[0], ts=0))
    assert procs[1].rejected == {"bad-signature": 2, "unsigned": 1}
    assert procs[1].statistics().delivered == 1
