"""Presence datagrams are hostile until checked: only the replicas a server
exchanges presence with move cursors; anything else is counted and changes
nothing, so the network cannot make the cursors (and the message every page
gets) grow."""

from __future__ import annotations

import json

from epto.apps._editor import Presence
from epto.apps._ot import Insert


def _datagram(**fields: object) -> bytes:
    message = {"author": 2, "name": "Brian", "color": "red", "pos": 3, "end": 3}
    message.update(fields)
    return json.dumps(message).encode()


def test_a_known_replica_moves_its_cursor_within_the_text() -> None:
    presence = Presence(1, {1: "a", 2: "b", 3: "c"})
    assert presence.heard(_datagram(pos=99, end=-4, name="x" * 100), 0.0, 10)
    cursor = presence.cursors[2]
    assert (cursor.pos, cursor.end, cursor.name) == (10, 0, "x" * 40)
    presence.moved((Insert(0, "ab"),))
    assert presence.cursors[2].pos == 12
    assert presence.refused == 0


def test_unknown_authors_own_id_and_malformed_datagrams_are_refused_and_counted() -> None:
    presence = Presence(1, {1: "a", 2: "b"})
    hostile = [
        *(_datagram(author=a) for a in range(3, 1003)),  # replicas nobody configured
        _datagram(author=1),  # this replica's own id
        _datagram(author=True),
        _datagram(pos="3"),
        _datagram(name=None),
        b"\xff not json",
        b"[1, 2]",
    ]
    for data in hostile:
        assert not presence.heard(data, 0.0, 10)
    assert presence.cursors == {} and presence.refused == len(hostile)
    assert presence.message() == {"type": "presence", "cursors": []}


def test_cursors_not_heard_for_the_ttl_are_forgotten() -> None:
    presence = Presence(1, [2], ttl=5.0)
    assert presence.heard(_datagram(), 0.0, 10)
    assert not presence.expire(5.0)
    assert presence.expire(5.1) and presence.cursors == {}
