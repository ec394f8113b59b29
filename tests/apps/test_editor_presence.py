"""Presence datagrams are hostile until checked: only the replicas a server
exchanges presence with move cursors; anything else is counted and changes
nothing, so the network cannot make the cursors (and the message every page
gets) grow. Under a group key the datagrams are sealed with a key derived
from it: unsealed, forged, replayed or foreign ones are refused."""

from __future__ import annotations

import json
import random

import pytest

from epto._frames import pack_header
from epto.apps._editor import PRESENCE_CODE, Presence, presence_codec, presence_key
from epto.apps._ot import Insert
from epto.keys import generate_group_key
from epto.wire import GroupSealer


def _presence(own: int, authors: object, *, group: int = 0, key: object = None) -> Presence:
    sealer = None
    if key is not None:
        sealer = GroupSealer(
            presence_key(key),  # type: ignore[arg-type]
            counter_start=own << 32,
            rng=random.Random(own),
        )
    return Presence(own, authors, codec=presence_codec(group, sealer))  # type: ignore[arg-type]


def _datagram(author: int = 2, *, pos: int = 3, end: int = 3, name: str = "Brian") -> bytes:
    return _presence(author, []).datagram(name, "red", pos, end)


def test_a_known_replica_moves_its_cursor_within_the_text() -> None:
    presence = _presence(1, {1: "a", 2: "b", 3: "c"})
    assert presence.heard(_datagram(pos=99, end=4, name="x" * 100), 0.0, 10)
    cursor = presence.cursors[2]
    assert (cursor.pos, cursor.end, cursor.name, cursor.color) == (10, 4, "x" * 40, "red")
    presence.moved((Insert(0, "ab"),))
    assert presence.cursors[2].pos == 12
    assert presence.refused == 0


def test_unknown_authors_own_id_and_malformed_datagrams_are_refused_and_counted() -> None:
    presence = _presence(1, {1: "a", 2: "b"})
    good = _datagram()
    hostile = [
        *(_datagram(a) for a in range(3, 1003)),  # replicas nobody configured
        _datagram(1),  # this replica's own id
        json.dumps({"author": 2, "name": "B", "color": "red", "pos": 3, "end": 3}).encode(),
        b"\xff not a frame",
        good[:-1],  # truncated
        good + b"x",  # trailing bytes
        # A name that is not UTF-8:
        pack_header(PRESENCE_CODE, 2, 0) + bytes(16) + bytes((1, 0xFF, 3)) + b"red",
        _presence(2, [], group=7).datagram("B", "red", 1, 1),  # another group
        pack_header(PRESENCE_CODE + 1, 2, 0),  # another kind
    ]
    for data in hostile:
        assert not presence.heard(data, 0.0, 10)
    assert presence.cursors == {} and presence.refused == len(hostile)
    assert presence.message() == {"type": "presence", "cursors": []}
    faults = {"truncated", "trailing", "bad-value", "wrong-group", "unknown-kind", "bad-magic"}
    assert set(presence.codec.rejected) <= faults
    assert {"trailing", "bad-value", "wrong-group", "unknown-kind"} <= set(presence.codec.rejected)
    assert presence.heard(good, 0.0, 10)


def test_cursors_not_heard_for_the_ttl_are_forgotten() -> None:
    presence = _presence(1, [2])
    assert presence.heard(_datagram(), 0.0, 10)
    assert not presence.expire(5.0)
    assert presence.expire(5.1) and presence.cursors == {}


def test_under_a_group_key_only_sealed_datagrams_of_the_group_are_heard() -> None:
    pytest.importorskip("cryptography")
    key = generate_group_key()
    receiver = _presence(1, [2], key=key)
    sender = _presence(2, [1], key=key)
    sealed = sender.datagram("Brian", "red", 3, 4)
    hostile = [
        _datagram(),  # unsealed, from a known replica
        _presence(2, [1], key=generate_group_key()).datagram("Mallory", "red", 1, 1),
        sealed[:-1] + bytes((sealed[-1] ^ 1,)),  # tampered
    ]
    for data in hostile:
        assert not receiver.heard(data, 0.0, 10)
    assert receiver.cursors == {}
    assert receiver.heard(sealed, 0.0, 10)
    assert (receiver.cursors[2].name, receiver.cursors[2].pos) == ("Brian", 3)
    # The same datagram again is a replay: refused, the cursor stays.
    assert not receiver.heard(sealed, 0.0, 10)
    assert receiver.refused == len(hostile) + 1
    assert set(receiver.codec.rejected) == {"unsealed", "bad-tag", "replay"}
    # The presence key is not the group key: a group frame's seal never opens here.
    assert presence_key(key).secret != key.secret
    assert presence_key(key) == presence_key(key)
