"""The same scripted, non-conflicting concurrent edits give the same text in
epto's replicated document and in pycrdt (Yjs's port: a CRDT, no order)."""

from __future__ import annotations

import random

import pytest

from epto import Delivery, Event
from epto.apps._ot import Delete, Insert
from epto.apps.text import TextDocument
from epto.rsm import JsonCodec, Replica

pycrdt = pytest.importorskip("pycrdt")

CODEC = JsonCodec()


@pytest.mark.parametrize("seed", range(5))
def test_non_conflicting_concurrent_edits_match_yjs(seed: int) -> None:
    rng = random.Random(seed)
    docs = [TextDocument(1), TextDocument(2), TextDocument(3)]
    replicas = [Replica(doc) for doc in docs]
    ydocs = [pycrdt.Doc(client_id=i + 1) for i in range(3)]
    ytexts = [pycrdt.Text() for _ in ydocs]
    for ydoc, ytext in zip(ydocs, ytexts, strict=True):
        ydoc["t"] = ytext
    ts = 0

    def deliver(commands: list[tuple[int, int, int, object]]) -> None:
        nonlocal ts
        for args in commands:
            ts += 1
            event = Event(source=args[0], seq=args[1], ts=ts, payload=CODEC.encode("edit", args))
            for replica in replicas:
                replica.deliver(Delivery(event=event))

    def sync() -> None:
        updates = [ydoc.get_update() for ydoc in ydocs]
        for ydoc in ydocs:
            for update in updates:
                ydoc.apply_update(update)

    docs[0].local_edit((Insert(0, "0123456789" * 3),))
    ytexts[0].insert(0, "0123456789" * 3)
    deliver(docs[0].take_outgoing())
    sync()
    for _ in range(30):
        # Each author edits its own third of the text, concurrently.
        commands = []
        for author, (doc, ytext) in enumerate(zip(docs, ytexts, strict=True)):
            third = len(doc.view) // 3
            start = author * third
            if rng.random() < 0.6 or third < 3:
                pos = start + rng.randint(0, max(0, third - 1))
                word = rng.choice(["ab", "X", "yz!"])
                doc.local_edit((Insert(pos, word),))
                ytext.insert(pos, word)
            else:
                pos = start + rng.randint(1, third - 2)
                doc.local_edit((Delete(pos, 1),))
                del ytext[pos : pos + 1]
            commands += doc.take_outgoing()
        rng.shuffle(commands)  # any total order
        deliver(commands)
        sync()
    texts = {doc.text for doc in docs} | {str(ytext) for ytext in ytexts}
    assert len(texts) == 1, texts
    assert all(doc.view == doc.text for doc in docs)
