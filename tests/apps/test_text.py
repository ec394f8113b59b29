"""The replicated text document: random concurrent edit schedules of 2 to 10
authors converge on both engines in the virtual-time network, local edits
show at once, and each author's intention holds in the classic cases."""

from __future__ import annotations

import random

import pytest
from epto.transports.simulation import Cluster, SimulationObserver, TokenRingCluster

from epto import Config, Delivery, Event, ProcessId
from epto.apps._ot import Delete, Insert
from epto.apps.text import MAX_PARTS, TextDocument, transform_position
from epto.rsm import JsonCodec, Replica
from epto.tokenring import TokenRingConfig

CODEC = JsonCodec()


class Authors(SimulationObserver):
    """One document per process; what a document wants to send is broadcast
    by its process at once."""

    def __init__(self, cluster: Cluster, n: int) -> None:
        self.cluster = cluster
        self.docs = {p: TextDocument(p, horizon=50) for p in range(n)}
        self.replicas = {p: Replica(doc) for p, doc in self.docs.items()}

    def on_delivery(self, pid: ProcessId, delivery: Delivery, now: float) -> None:
        applied = self.replicas[pid].deliver(delivery)
        assert applied is None or applied.result == "ok", applied
        self.flush(pid)

    def flush(self, pid: ProcessId) -> None:
        for args in self.docs[pid].take_outgoing():
            self.cluster.broadcast(pid, CODEC.encode("edit", args))


def _random_edit(rng: random.Random, text: str) -> tuple[Insert | Delete, ...]:
    if text and rng.random() < 0.4:
        pos = rng.randrange(len(text))
        return (Delete(pos, rng.randint(1, min(4, len(text) - pos))),)
    pos = rng.randint(0, len(text))
    return (Insert(pos, rng.choice(["a", "bc", "def", "Z", " "])),)


def _cases() -> list[tuple[str, int, int]]:
    rng = random.Random(7)
    return [
        (engine, rng.randint(2, 10), seed) for seed in range(6) for engine in ("token-ring", "epto")
    ]


@pytest.mark.parametrize(("engine", "n", "seed"), _cases())
def test_random_concurrent_edits_converge(engine: str, n: int, seed: int) -> None:
    rng = random.Random(seed)
    if engine == "token-ring":
        cluster: Cluster = TokenRingCluster(n, TokenRingConfig(), seed=seed, delay=(0.001, 0.02))
        unit = 1.0
    else:
        cluster = Cluster(n, seed=seed, config=Config.for_group(n))
        unit = cluster.round_interval * 10
    authors = Authors(cluster, n)
    cluster.add_observer(authors)
    t = 0.0
    for _ in range(40 * n):
        t += rng.expovariate(60.0 / unit)
        pid = rng.randrange(n)

        def type_one(pid: ProcessId = pid, draw: float = rng.random()) -> None:
            edit_rng = random.Random(draw)
            doc = authors.docs[pid]
            before = doc.view
            op = _random_edit(edit_rng, before)
            doc.local_edit(op)
            assert doc.view != before or not op  # shown at once
            authors.flush(pid)

        cluster.call_at(t, type_one)
    cluster.run_until(t + 10 * unit)
    texts = {doc.text for doc in authors.docs.values()}
    assert len(texts) == 1, texts
    for doc in authors.docs.values():
        assert doc.pending() == 0 and doc.view == doc.text
        assert doc.version == authors.docs[0].version
        assert doc.history_size() <= 50 + n


def _deliver(docs: list[TextDocument], commands: list[tuple[int, int, int, object]]) -> None:
    replicas = [Replica(doc) for doc in docs]
    for i, args in enumerate(commands):
        delivery = Delivery(
            event=Event(source=args[0], seq=args[1], ts=i + 1, payload=CODEC.encode("edit", args))
        )
        for replica in replicas:
            assert replica.deliver(delivery) is not None


def _two(text: str) -> list[TextDocument]:
    docs = [TextDocument(1), TextDocument(2)]
    setup = docs[0]
    setup.local_edit((Insert(0, text),))
    _deliver(docs, setup.take_outgoing())
    return docs


def test_concurrent_inserts_at_one_position_follow_the_order() -> None:
    a, b = _two("xxxx")
    a.local_edit((Insert(2, "AA"),))
    b.local_edit((Insert(2, "BB"),))
    assert (a.view, b.view) == ("xxAAxx", "xxBBxx")  # each sees its own at once
    _deliver([a, b], a.take_outgoing() + b.take_outgoing())
    assert a.text == b.text == a.view == b.view == "xxAABBxx"


def test_an_insert_inside_a_range_deleted_concurrently_survives() -> None:
    a, b = _two("abcdefg")
    a.local_edit((Delete(1, 4),))
    b.local_edit((Insert(3, "NEW"),))
    _deliver([a, b], a.take_outgoing() + b.take_outgoing())
    assert a.text == b.text == "aNEWfg"


def test_overlapping_deletes_delete_the_overlap_once() -> None:
    a, b = _two("abcdefghij")
    a.local_edit((Delete(1, 4),))
    b.local_edit((Delete(3, 4),))
    _deliver([a, b], b.take_outgoing() + a.take_outgoing())
    assert a.text == b.text == "ahij"


def test_pending_edits_are_rebased_over_remote_ones_and_sent_in_turn() -> None:
    a, b = _two("hello")
    a.local_edit((Insert(5, " world"),))
    a.local_edit((Insert(0, ">"),))  # waits: one operation of a's in the order at a time
    first = a.take_outgoing()
    assert len(first) == 1
    b.local_edit((Insert(0, "[b]"),))
    _deliver([a, b], b.take_outgoing())
    assert a.view == "[b]>hello world"  # a's pending edits rebased over b's
    _deliver([a, b], first)
    second = a.take_outgoing()
    assert len(second) == 1
    _deliver([a, b], second)
    assert a.text == b.text == a.view == "[b]>hello world"


def test_a_stale_operation_is_refused_alike_and_cursors_move_with_edits() -> None:
    a, b = _two("abc")
    _deliver([a, b], [(2, 99, 7, [["i", 0, "x"]])])  # ref 7 is ahead of version 1
    assert a.refused == b.refused == 1 and a.text == b.text == "abc"
    assert transform_position(2, (Insert(0, "xy"),)) == 4
    assert transform_position(2, (Delete(0, 1),)) == 1
    assert transform_position(2, (Insert(2, "q"),), stick_left=True) == 2


def _outrun(docs: list[TextDocument]) -> list[tuple[int, int, int, object]]:
    """The third author's first operation, sent on the first text and held
    back while the other two apply three operations each."""
    a, b, c = docs
    a.local_edit((Insert(0, "hello"),))
    _deliver(docs, a.take_outgoing())
    c.local_edit((Insert(5, "!"),))
    first = c.take_outgoing()
    for _ in range(3):
        a.local_edit((Insert(0, "a"),))
        _deliver(docs, a.take_outgoing())
        b.local_edit((Insert(0, "b"),))
        _deliver(docs, b.take_outgoing())
    return first


def test_a_first_operation_the_others_outran_is_applied() -> None:
    docs = [TextDocument(1), TextDocument(2), TextDocument(3)]
    _deliver(docs, _outrun(docs))
    assert {doc.text for doc in docs} == {"bababahello!"}
    assert all(doc.refused == 0 for doc in docs)
    assert docs[2].pending() == 0 and docs[2].view == docs[2].text


def test_an_author_whose_operation_is_refused_as_stale_sends_its_edits_again() -> None:
    # A horizon of 8 keeps 2 operations for an author not heard yet: the
    # six operations of the others take the floor past the third's ref.
    docs = [TextDocument(p, horizon=8) for p in (1, 2, 3)]
    a, b, c = docs
    _deliver(docs, _outrun(docs))
    assert a.refused == b.refused == c.refused == 1
    assert a.text == b.text == "bababahello" and c.view == "bababahello!"
    again = c.take_outgoing()
    assert len(again) == 1 and again[0][2] == c.version  # against the present version
    _deliver(docs, again)
    assert a.text == b.text == c.text == c.view == "bababahello!"
    assert c.pending() == 0
    c.local_edit((Insert(0, ">"),))
    assert len(c.take_outgoing()) == 1  # and it goes on editing


def test_an_author_whose_operation_is_too_long_drops_its_pending_edits_and_goes_on() -> None:
    docs = [TextDocument(p, max_length=8) for p in (1, 2)]
    a, b = docs
    a.local_edit((Insert(0, "hello"),))
    _deliver(docs, a.take_outgoing())
    with pytest.raises(ValueError, match="above 8"):
        a.local_edit((Insert(5, " world"),))  # refused at once: 11 characters
    assert a.view == "hello" and a.pending() == 0
    # Within the limit at each author, over it together:
    a.local_edit((Insert(5, "!!!"),))
    b.local_edit((Insert(0, "abc"),))
    b.local_edit((Delete(0, 1),))  # built on it, pending behind it
    _deliver(docs, a.take_outgoing() + b.take_outgoing())
    assert a.refused == b.refused == 1 and a.text == b.text == "hello!!!"
    assert b.pending() == 0 and b.view == "hello!!!"
    assert b.take_changes()[-1].op == ()  # the view is reset to the text
    b.local_edit((Delete(0, 1),))
    _deliver(docs, b.take_outgoing())
    assert a.text == b.text == b.view == "ello!!!"


@pytest.mark.parametrize(
    "op",
    [
        (Insert(10**8, "X"),),  # beyond the text: every replica refused it
        (Insert(-1, "X"),),
        (Delete(3, 10),),
        (Delete(-1, 1),),
        (Insert(0, "x" * 101),),  # above max_length
        (Insert(0, "ab"), Insert(8, "c")),  # the second beyond the text after the first
    ],
)
def test_an_edit_outside_the_view_is_refused_at_once_and_the_author_goes_on(
    op: tuple[Insert | Delete, ...],
) -> None:
    # Before, the author's view took it (positions clamped) and every
    # replica refused it at delivery: the author waited for ever for it.
    docs = [TextDocument(p, max_length=100) for p in (1, 2)]
    a, b = docs
    a.local_edit((Insert(0, "hello"),))
    _deliver(docs, a.take_outgoing())
    with pytest.raises(ValueError):
        a.local_edit(op)
    assert a.view == "hello" and a.pending() == 0 and a.take_outgoing() == []
    a.local_edit((Insert(5, "!"),))
    _deliver(docs, a.take_outgoing())
    assert a.text == b.text == "hello!"


def _command_size(args: tuple[object, ...]) -> int:
    return len(CODEC.encode("edit", args))


@pytest.mark.parametrize("text", ["x" * 2000, 'é"\n😀ab' * 700, "y" * 100_000])
def test_an_edit_larger_than_a_payload_travels_in_parts_and_is_applied_once(text: str) -> None:
    # A 2,000-character paste stopped an EpTO replica (payload above
    # limits.max_payload_size=1024). The document sends it in parts that
    # each fit, the others apply it whole at the place of its last part.
    docs = [TextDocument(p, max_part_size=900) for p in (1, 2, 3)]
    a, b = docs[:2]
    a.local_edit((Insert(0, "[]"),))
    _deliver(docs, a.take_outgoing())
    a.local_edit((Insert(1, text),))
    a.local_edit((Insert(0, ">"),))  # pending behind the operation in parts
    parts = a.take_outgoing()
    assert len(parts) > 1 and all(_command_size(p) <= 1000 for p in parts)
    assert [p[4:] for p in parts] == [(i, len(parts)) for i in range(len(parts))]
    # b edits concurrently; its operation is ordered between a's parts.
    b.local_edit((Insert(2, "B"),))
    half = len(parts) // 2
    _deliver(docs, parts[:half] + b.take_outgoing() + parts[half:])
    assert len({d.text for d in docs}) == 1 and a.view == ">[" + text + "]B"
    if len(parts) < MAX_PARTS:
        assert a.text == "[" + text + "]B"
    # What did not fit in MAX_PARTS parts follows in the next operations.
    while outgoing := a.take_outgoing():
        _deliver(docs, outgoing)
    assert {d.text for d in docs} | {a.view} == {">[" + text + "]B"}
    assert a.pending() == 0 and a.refused == 0


def test_a_part_out_of_place_drops_the_operation_alike_and_its_author_goes_on() -> None:
    docs = [TextDocument(p, max_part_size=100) for p in (1, 2)]
    a, b = docs
    a.local_edit((Insert(0, "z" * 500),))
    parts = a.take_outgoing()
    assert len(parts) > 2
    _deliver(docs, [parts[0], parts[2]])  # the second part lost
    assert a.text == b.text == "" and a.refused == b.refused == 1
    assert a.view == "" and a.pending() == 0  # its author shows the group's text
    a.local_edit((Insert(0, "ok"),))
    _deliver(docs, a.take_outgoing())
    assert a.text == b.text == "ok"


def test_a_snapshot_between_parts_holds_them() -> None:
    docs = [TextDocument(p, max_part_size=100) for p in (1, 2)]
    a, b = docs
    a.local_edit((Insert(0, "w" * 300),))
    parts = a.take_outgoing()
    _deliver(docs, parts[:1])
    late = TextDocument(3, max_part_size=100)
    late.restore(b.snapshot())
    _deliver([a, b, late], parts[1:])
    assert a.text == b.text == late.text == "w" * 300


def test_a_caret_sent_before_its_edits_arrive_is_moved_by_them_once() -> None:
    # After typing "ab" at the start, the others drew the author's caret at
    # 3 (its view's 2, moved again by "a" when it arrived).
    a, b = _two("xyz")
    a.local_edit((Insert(0, "a"),))
    first = a.take_outgoing()  # "a" in the order, "b" pending behind it
    a.local_edit((Insert(1, "b"),))
    anchor = a.anchor(2)  # the caret after "ab", as a's presence says it
    assert anchor == (1, 0)
    assert b.locate(*anchor, author=1) == 0  # b has neither yet
    b.local_edit((Insert(0, "Q"),))  # b types at the caret (pending)
    assert b.locate(*anchor, author=1) == 0  # b's own edit leaves it on the left
    _deliver([a, b], first)
    assert b.view == "aQxyz" and b.locate(*anchor, author=1) == 1  # after "a", once
    _deliver([a, b], a.take_outgoing() + b.take_outgoing())
    assert a.text == b.text == "abQxyz" and b.locate(*anchor, author=1) == 2
    # An anchor made now lands at the same place.
    assert b.locate(*a.anchor(2), author=1) == b.locate(*anchor, author=1)
    # Out of the history or ahead of this replica: clamped to the view.
    assert b.locate(99, 1000, author=1) == len(b.view)


@pytest.mark.parametrize(
    "state",
    [
        b"{}",
        b"[]",
        b"not json",
        b'{"text": 5, "version": 0, "floor": 0, "history": [], "refs": {}}',
        b'{"text": "", "version": 0, "floor": 0, "history": [], "refs": {}, "partial": {"1": 5}}',
        b'{"text": "", "version": 0, "floor": 0, "history": [[]], "refs": {}, "authors": []}',
        b'{"text": "", "version": 0, "floor": 3, "history": [], "refs": {}}',
    ],
)
def test_a_state_that_is_not_a_documents_is_refused_and_changes_nothing(state: bytes) -> None:
    doc = TextDocument(1)
    doc.local_edit((Insert(0, "kept"),))
    _deliver([doc], doc.take_outgoing())
    with pytest.raises(ValueError):
        doc.restore(state)
    assert (doc.text, doc.version, doc.history_size()) == ("kept", 1, 1)


def test_an_operation_left_in_parts_by_an_earlier_start_is_forgotten() -> None:
    docs = [TextDocument(p, max_part_size=100) for p in (1, 2)]
    a, b = docs
    a.local_edit((Insert(0, "q" * 300),))
    _deliver(docs, a.take_outgoing()[:1])  # then its process died
    again = TextDocument(1, max_part_size=100)
    again.restore(b.snapshot())
    again.number_from(1 << 32)
    again.local_edit((Insert(0, "new"),))
    _deliver([again, b], again.take_outgoing())
    assert again.text == b.text == "new"
    assert b"qqq" not in b.snapshot()
