"""Presence datagrams are hostile until checked: only the replicas a server
exchanges presence with move cursors; anything else is counted and changes
nothing, so the network cannot make the cursors (and the message every page
gets) grow. Under a group key the datagrams are sealed with a key derived
from it: unsealed, forged, replayed or foreign ones are refused. A caret is
anchored in the confirmed text, so the others draw it where it is right
after its author typed. Replicas learn each other's presence addresses
(bounded, expiring), so one that joins later sees and is seen."""

from __future__ import annotations

import json
import random

import pytest

from epto.apps._ot import Insert
from epto.apps._presence import (
    MAX_GOSSIP,
    PRESENCE_CODE,
    Presence,
    PresenceNote,
    presence_codec,
    presence_key,
)
from epto.apps.text import TextDocument
from epto.keys import generate_group_key
from epto.wire import GroupSealer
from epto.wire._frames import pack_header


def _presence(
    own: int, authors: object, *, group: int = 0, key: object = None, **kw: object
) -> Presence:
    sealer = None
    if key is not None:
        sealer = GroupSealer(
            presence_key(key),  # type: ignore[arg-type]
            counter_start=own << 32,
            rng=random.Random(own),
        )
    return Presence(own, authors, codec=presence_codec(group, sealer), **kw)  # type: ignore[arg-type]


def _datagram(author: int = 2, *, pos: int = 3, end: int = 3, name: str = "Brian") -> bytes:
    return _presence(author, []).datagram(name, "red", 0, pos, end)


def test_a_known_replica_moves_its_cursor_within_the_text() -> None:
    presence = _presence(1, {1: "a", 2: "b", 3: "c"})
    assert presence.heard(_datagram(pos=99, end=4, name="x" * 100), 0.0)
    cursor = presence.cursors[2]
    assert (cursor.pos, cursor.end, cursor.name, cursor.color) == (99, 4, "x" * 40, "red")
    doc = TextDocument(1)
    doc.local_edit((Insert(0, "0123456789"),))
    presence.locate = doc.locate
    # Anchored at version 0, moved through this replica's pending insert, clamped.
    [shown] = presence.message()["cursors"]
    assert (shown["pos"], shown["end"]) == (10, 10)
    assert presence.refused == 0


def test_a_caret_is_drawn_where_it_is_right_after_its_author_typed() -> None:
    # After typing "ab" at the start, the others drew that author's caret
    # at 3 instead of 2: the datagram held the author's view (with "b", not
    # yet sent), and "a" moved it again when it arrived.
    from epto import Delivery, Event
    from epto.rsm import JsonCodec, Replica

    codec = JsonCodec()
    author, other = TextDocument(1), TextDocument(2)
    seen = _presence(2, [1])
    seen.locate = other.locate
    sender = _presence(1, [2])
    order = 0

    def deliver(commands: list[tuple[object, ...]]) -> None:
        nonlocal order
        for args in commands:
            order += 1
            event = Event(source=1, seq=order, ts=order, payload=codec.encode("edit", args))
            for doc in (author, other):
                Replica(doc).deliver(Delivery(event=event))

    def caret_there() -> int:
        assert seen.heard(sender.datagram("A", "red", *author.anchor(2), author.anchor(2)[1]), 0.0)
        return int(seen.message()["cursors"][0]["pos"])

    author.local_edit((Insert(0, "a"),))
    first = author.take_outgoing()
    author.local_edit((Insert(1, "b"),))  # waits for "a"
    assert caret_there() == 0  # the other has neither yet: before them
    deliver(first)
    assert other.view == "a" and seen.message()["cursors"][0]["pos"] == 1
    deliver(author.take_outgoing())
    assert other.view == "ab" and seen.message()["cursors"][0]["pos"] == 2
    assert caret_there() == 2  # and a datagram sent now says the same


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
        pack_header(PRESENCE_CODE, 2, 0) + bytes(24) + bytes((1, 0xFF, 3)) + b"red" + bytes(1),
        # Too many addresses, or one that is not IPv4:port:
        pack_header(PRESENCE_CODE, 2, 0) + bytes(24) + bytes((0, 0, MAX_GOSSIP + 1)),
        pack_header(PRESENCE_CODE, 2, 0)
        + bytes(24)
        + bytes((0, 0, 1))
        + bytes(8)
        + b"\x09evil.test",
        _presence(2, [], group=7).datagram("B", "red", 0, 1, 1),  # another group
        pack_header(PRESENCE_CODE + 1, 2, 0),  # another kind
    ]
    for data in hostile:
        assert not presence.heard(data, 0.0, ("127.0.0.9", 9))
    assert presence.cursors == {} and presence.refused == len(hostile)
    assert presence.learned == {}
    assert presence.message() == {"type": "presence", "cursors": []}
    faults = {"truncated", "trailing", "bad-value", "wrong-group", "unknown-kind", "bad-magic"}
    faults.add("oversized")
    assert set(presence.codec.rejected) <= faults
    assert {"trailing", "bad-value", "wrong-group", "unknown-kind", "oversized"} <= set(
        presence.codec.rejected
    )
    assert presence.heard(good, 0.0)


def test_cursors_not_heard_for_the_ttl_are_forgotten() -> None:
    presence = _presence(1, [2])
    assert presence.heard(_datagram(), 0.0)
    assert not presence.expire(5.0)
    assert presence.expire(5.1) and presence.cursors == {}


def test_under_a_group_key_only_sealed_datagrams_of_the_group_are_heard() -> None:
    pytest.importorskip("cryptography")
    key = generate_group_key()
    receiver = _presence(1, [2], key=key)
    sender = _presence(2, [1], key=key)
    sealed = sender.datagram("Brian", "red", 0, 3, 4)
    hostile = [
        _datagram(),  # unsealed, from a known replica
        _presence(2, [1], key=generate_group_key()).datagram("Mallory", "red", 0, 1, 1),
        sealed[:-1] + bytes((sealed[-1] ^ 1,)),  # tampered
    ]
    for data in hostile:
        assert not receiver.heard(data, 0.0)
    assert receiver.cursors == {}
    assert receiver.heard(sealed, 0.0)
    assert (receiver.cursors[2].name, receiver.cursors[2].pos) == ("Brian", 3)
    # The same datagram again is a replay: refused, the cursor stays.
    assert not receiver.heard(sealed, 0.0)
    assert receiver.refused == len(hostile) + 1
    assert set(receiver.codec.rejected) == {"unsealed", "bad-tag", "replay"}
    # The presence key is not the group key: a group frame's seal never opens here.
    assert presence_key(key).secret != key.secret
    assert presence_key(key) == presence_key(key)


def test_replicas_learn_each_others_addresses_from_what_they_hear() -> None:
    # A replica that joins later (4) knows one presence address (1's); 1
    # learns 4's from its datagram and tells 2 of it; 4 learns 2's from 1.
    one = _presence(1, [2, 3, 4], peers={2: "127.0.0.2:2000"})
    two = _presence(2, [1, 3, 4], peers={1: "127.0.0.1:1000"})
    late = _presence(4, [1, 2, 3], peers={1: "127.0.0.1:1000"})
    assert one.addresses() == [("127.0.0.2", 2000)]
    assert one.heard(late.datagram("D", "red", 0, 0, 0), 0.0, ("127.0.0.4", 4000))
    assert set(one.addresses()) == {("127.0.0.2", 2000), ("127.0.0.4", 4000)}
    assert two.heard(one.datagram("A", "red", 0, 0, 0), 0.0, ("127.0.0.1", 1000))
    assert ("127.0.0.4", 4000) in two.addresses()  # told by 1
    assert late.heard(one.datagram("A", "red", 0, 0, 0), 0.0, ("127.0.0.1", 1000))
    assert ("127.0.0.2", 2000) in late.addresses()
    # Addresses not heard from again expire; configured ones stay.
    two.expire(10.0)  # the cursors go after 5 s
    assert ("127.0.0.4", 4000) in two.addresses()
    two.expire(31.0)
    one.expire(31.0)
    assert two.addresses() == [("127.0.0.1", 1000)]
    assert one.addresses() == [("127.0.0.2", 2000)]


def test_learned_addresses_and_open_cursors_are_bounded() -> None:
    pytest.importorskip("cryptography")
    key = generate_group_key()
    receiver = _presence(1, [], key=key, sealed=True, max_cursors=5, max_peers=3)
    for author in range(2, 40):
        sender = _presence(author, [], key=key)
        receiver.heard(sender.datagram("x", "red", 0, 0, 0), 0.0, ("127.0.0.5", author))
    assert len(receiver.cursors) == 5 and len(receiver.learned) == 3
    assert receiver.refused == 38 - 5
    # Addresses told by a datagram are checked: IPv4 literals only, no
    # broadcast, multicast or unspecified address, no port 0.
    note = PresenceNote(
        "x", "red", 0, 0, 0, ((7, "0.0.0.0:1"), (8, "224.0.0.1:1"), (9, "127.0.0.1:0"))
    )
    codec = presence_codec(0)
    plain = _presence(1, [2, 7, 8, 9])
    assert not plain.heard(codec.encode(2, note)[0], 0.0)
    assert plain.learned == {} and plain.codec.rejected["bad-value"] == 1


def test_every_address_is_told_however_many_there_are() -> None:
    peers = {p: f"127.0.0.{p}:{1000 + p}" for p in range(2, 22)}  # 20 of them
    sender = _presence(1, peers, peers=peers)
    receiver = _presence(30, range(1, 22), max_peers=64)
    for _ in range(3):
        assert receiver.heard(sender.datagram("A", "red", 0, 0, 0), 0.0, ("127.0.0.1", 1001))
    assert set(receiver.addresses()) >= {(f"127.0.0.{p}", 1000 + p) for p in peers}


def test_a_configured_name_is_sent_to_but_not_told() -> None:
    sender = _presence(1, [2, 3], peers={2: "localhost:2002", 3: "127.0.0.3:2003", 4: "bad"})
    assert set(sender.addresses()) == {("localhost", 2002), ("127.0.0.3", 2003)}
    receiver = _presence(5, [1, 2, 3])
    assert receiver.heard(sender.datagram("A", "red", 0, 0, 0), 0.0)
    assert receiver.addresses() == [("127.0.0.3", 2003)]
