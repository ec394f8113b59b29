"""Sink events: their encoding, bounded decoding, and de-duplication by row identity."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epto.spark import SinkRows
from epto.spark._rows import SinkFormatError, decode_event, encode_event


def test_round_trip() -> None:
    payload = encode_event("q-1", 5, 2, 100, [b"a", b"", b"ccc"])
    event = decode_event(payload)
    assert (event.stream, event.batch, event.partition, event.first) == ("q-1", 5, 2, 100)
    assert event.values == (b"a", b"", b"ccc")


@pytest.mark.parametrize(
    "payload",
    [
        b"ESNK",
        b"ESNK\x02\x00" + b"\0" * 24,  # another version
        b"ESNK\x01\xff" + b"\0" * 24,  # a stream id longer than allowed
        encode_event("s", 0, 0, 0, [b"abc"])[:-1],  # a row cut short
        encode_event("s", 0, 0, 0, [b"abc"]) + b"!",  # trailing bytes
        encode_event("s", 0, 0, 0, [])[:-4] + b"\xff\xff\xff\xff",  # a count that lies
        b"ESNK\x01\x02\xff\xfe" + b"\0" * 24,  # a stream id that is not UTF-8
    ],
)
def test_hostile_payloads_are_refused(payload: bytes) -> None:
    with pytest.raises(SinkFormatError):
        decode_event(payload)
    rows = SinkRows()
    assert rows.feed(payload) == []
    assert rows.statistics.malformed == 1


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_sink_format_error(data: bytes) -> None:
    with contextlib.suppress(SinkFormatError):
        decode_event(b"ESNK\x01" + data)


def test_other_payloads_are_not_sink_events() -> None:
    assert SinkRows().feed(b"hello") is None


def test_each_identity_once_whatever_the_overlap() -> None:
    rows = SinkRows()
    got = rows.feed_all(
        [
            encode_event("s", 1, 0, 10, [b"%d" % i for i in range(10, 20)]),
            encode_event("s", 1, 0, 0, [b"%d" % i for i in range(0, 12)]),  # a retry, re-chunked
            encode_event("s", 1, 0, 15, [b"%d" % i for i in range(15, 30)]),
            encode_event("s", 1, 1, 0, [b"p1"]),  # another partition
            encode_event("t", 1, 0, 0, [b"t0"]),  # another stream
        ]
    )
    assert [(r.stream, r.partition, r.row) for r in got] == (
        [("s", 0, i) for i in range(10, 20)]
        + [("s", 0, i) for i in range(0, 10)]
        + [("s", 0, i) for i in range(20, 30)]
        + [("s", 1, 0), ("t", 0, 0)]
    )
    assert all(r.value == b"%d" % r.row for r in got if r.partition == 0 and r.stream == "s")
    assert rows.statistics.rows == 32 and rows.statistics.duplicates == 7


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=30))
def test_rows_out_are_the_union_of_rows_in(runs: list[tuple[int, int]]) -> None:
    rows = SinkRows()
    seen: list[int] = []
    for first, count in runs:
        seen += [
            r.row for r in rows.accept(decode_event(encode_event("s", 0, 0, first, [b""] * count)))
        ]
    assert sorted(seen) == sorted({i for first, count in runs for i in range(first, first + count)})
    assert len(seen) == len(set(seen))


def test_old_batches_are_forgotten_and_their_rows_dropped() -> None:
    rows = SinkRows(keep_batches=2)
    for batch in (1, 2, 3):
        assert len(rows.feed(encode_event("s", batch, 0, 0, [b"x"])) or []) == 1
    assert rows.feed(encode_event("s", 1, 0, 0, [b"x"])) == []  # older than the batches kept
    assert rows.statistics.too_old == 1
    assert rows.feed(encode_event("s", 3, 0, 0, [b"x"])) == []  # kept: a duplicate
    assert rows.statistics.duplicates == 1
