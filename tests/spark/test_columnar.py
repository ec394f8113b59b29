"""The columnar read path without a Spark session: bulk decoding equals the
Python reader record for record, errors are the same, and partitions are
planned as documented."""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

import pytest

from epto import ConfigurationError, EptoError
from epto.log import (
    DeliveryLogWriter,
    LogCorruptError,
    iter_raw,
    list_segments,
    log_extent,
    read_log,
)
from epto.spark._columnar import COLUMN_TYPES, extent, first_at_or_after, scan_frames
from epto.spark._source import EptoStreamReader, pack, read_ranges

Row = tuple[Any, ...]


def write_mixed(root: Path, node: int, count: int, *, seed: int = 1, **options: Any) -> None:
    """Records with every shape the format allows: empty and long payloads, with
    and without signatures and broadcast times, out-of-order tags, several segments."""
    rng = random.Random(seed)
    with DeliveryLogWriter(root, node, segment_bytes=4096, **options) as w:
        for i in range(count):
            w.append_fields(
                source=rng.randrange(2**63),
                seq=rng.randrange(2**63),
                ts=rng.randrange(-(2**63), 2**63),
                payload=rng.randbytes(rng.choice([0, 1, 4, 5, 300])),
                delivered_at=10**15 + i * 7,
                broadcast_at=None if i % 3 == 0 else rng.randrange(10**15),
                out_of_order=i % 5 == 0,
                signature=rng.randbytes(rng.choice([0, 0, 64])),
            )


def expected(root: Path, node: int, start: int = 0, end: int | None = None) -> list[Row]:
    return [
        (
            r.node,
            r.index,
            r.source,
            r.seq,
            r.ts,
            r.tag.value,
            r.payload,
            r.delivered_at,
            r.broadcast_at,
            r.signature or None,
        )
        for r in read_log(root / str(node), start, end)
    ]


def columnar(
    ranges: list[tuple[str, int, int, int]],
    columns: tuple[str, ...] = tuple(COLUMN_TYPES),
    **kw: Any,
) -> list[Row]:
    out: list[Row] = []
    for batch in read_ranges(ranges, columns=columns, **kw):
        assert batch.num_rows > 0 and batch.schema.names == list(columns)
        cols = []
        for name in columns:
            col = batch.column(name)
            if name.endswith("_at"):
                col = col.cast("int64")
            cols.append(col.to_pylist())
        out += list(zip(*cols, strict=True))
    return out


@pytest.mark.parametrize(("start", "end"), [(0, 400), (0, 1), (37, 38), (5, 333), (399, 400)])
def test_bulk_decoding_equals_the_python_reader(tmp_path: Path, start: int, end: int) -> None:
    write_mixed(tmp_path, 7, 400)
    assert len(list_segments(tmp_path / "7")) > 10
    want = expected(tmp_path, 7, start, end)
    assert columnar([(str(tmp_path / "7"), 7, start, end)]) == want
    some = ("ts", "signature", "offset")
    picked = [(r[4], r[9], r[1]) for r in want]
    assert columnar([(str(tmp_path / "7"), 7, start, end)], some) == picked


def test_torn_tail_of_the_open_segment_is_not_read(tmp_path: Path) -> None:
    write_mixed(tmp_path, 1, 50)
    last = list_segments(tmp_path / "1")[-1]
    data = last.path.read_bytes()
    last.path.unlink()  # as if the writer were killed in the middle of its last record
    last.path.with_suffix(".open").write_bytes(data[:-3])
    (tmp_path / "1" / "MANIFEST").unlink()  # which it had not made durable
    want = expected(tmp_path, 1)
    assert len(want) == 49
    assert columnar([(str(tmp_path / "1"), 1, 0, 49)]) == want


@pytest.mark.parametrize("damage", ["middle segment gone", "closed segment flipped", "tail gone"])
@pytest.mark.parametrize("skip", [False, True])
def test_errors_and_skips_match_iter_raw(tmp_path: Path, damage: str, skip: bool) -> None:
    write_mixed(tmp_path, 0, 200)
    segments = list_segments(tmp_path / "0")
    if damage == "middle segment gone":
        segments[3].path.unlink()
    elif damage == "tail gone":
        segments[-1].path.unlink()
    else:
        data = bytearray(segments[2].path.read_bytes())
        data[100] ^= 0xFF
        segments[2].path.write_bytes(bytes(data))
    node_dir = tmp_path / "0"

    def outcome(read: Any) -> Any:
        try:
            return read()
        except LogCorruptError as exc:  # LogGapError and LogTailLostError included
            return type(exc), str(exc)

    python = outcome(lambda: [r[0] for r in iter_raw(node_dir, 0, 200, skip_missing=skip)])

    def bulk() -> list[int]:
        out: list[int] = []
        for data, positions in scan_frames(node_dir, 0, 200, skip_missing=skip):
            out += [int.from_bytes(data[p + 8 : p + 16], "little") for p in positions]
        return out

    assert outcome(bulk) == python
    assert outcome(lambda: extent(node_dir)) == outcome(lambda: log_extent(node_dir))


@pytest.mark.parametrize("state", ["closed", "open", "torn open", "empty open", "no segments"])
def test_extent_equals_log_extent(tmp_path: Path, state: str) -> None:
    write_mixed(tmp_path, 5, 120)
    node_dir = tmp_path / "5"
    last = list_segments(node_dir)[-1]
    if state != "closed":
        data = last.path.read_bytes()
        last.path.unlink()
        cut = {"open": len(data), "torn open": len(data) - 2, "empty open": 10}.get(state)
        if cut is not None:
            last.path.with_suffix(".open").write_bytes(data[:cut])
    held = extent(node_dir)
    assert held == log_extent(node_dir)
    assert held.end == {"closed": 120, "open": 120, "torn open": 119}.get(state, last.first_index)


def test_first_record_at_or_after_a_time(tmp_path: Path) -> None:
    write_mixed(tmp_path, 2, 100)  # delivered_at = 10**15 + 7 i
    node_dir = tmp_path / "2"
    assert first_at_or_after(node_dir, 0) == 0
    assert first_at_or_after(node_dir, 10**15 + 7 * 40) == 40
    assert first_at_or_after(node_dir, 10**15 + 7 * 40 + 1) == 41
    assert first_at_or_after(node_dir, 10**15 + 7 * 99 + 1) is None


def test_executors_that_cannot_see_the_logs_say_where_and_who(tmp_path: Path) -> None:
    gone = str(tmp_path / "elsewhere" / "3")
    with pytest.raises(EptoError, match=f"{gone} is not visible on host {socket.gethostname()}"):
        list(read_ranges([(gone, 3, 0, 10)]))


def test_large_logs_are_split_by_default_and_min_partitions_splits_more() -> None:
    sizes = lambda parts: [sum(hi - lo for _, _, lo, hi in p.ranges) for p in parts]  # noqa: E731
    # One node of a million records: four partitions of 250,000 by default.
    default = pack("/logs", {0: 0}, {0: 1_000_000}, 250_000)
    assert sizes(default) == [250_000] * 4
    # minPartitions divides evenly, also one small node (Kafka's "divvy up").
    assert sizes(pack("/logs", {0: 0}, {0: 10}, 250_000, 3)) == [4, 4, 2]
    # Small nodes share a partition; no partition is above the maximum.
    parts = pack("/logs", {n: 0 for n in range(5)}, {n: 30 for n in range(5)}, 40)
    assert sizes(parts) == [38, 38, 38, 36]
    assert [r[:2] for r in parts[0].ranges] == [("/logs/0", 0), ("/logs/1", 1)]


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(tmp_path: Path) -> None:
    from epto.spark._options import parse_options

    now = [100.0]
    for node in (0, 1):
        with DeliveryLogWriter(tmp_path, node) as w:
            for i in range(3):
                w.append_fields(source=node, seq=i, ts=i, payload=b"", delivered_at=i)
    opts = {
        "path": str(tmp_path),
        "rows": "per-node",
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "30s",
    }
    reader = EptoStreamReader(parse_options(opts, streaming=True), clock=lambda: now[0])
    start = reader.initialOffset()
    assert start == {"0": 0, "1": 0}
    # The first trigger is never held back (as Kafka's: no trigger happened yet).
    first = reader.latestOffset(start, None)
    assert first == {"0": 3, "1": 3}
    with DeliveryLogWriter(tmp_path, 0) as w:
        for i in range(4):
            w.append_fields(source=0, seq=9 + i, ts=9 + i, payload=b"", delivered_at=9)
    now[0] += 29  # 4 < 10 records and 29 s < 30 s: no micro-batch
    assert reader.latestOffset(first, None) == first
    now[0] += 1  # the delay has passed: whatever is there
    assert reader.latestOffset(first, None) == {"0": 7, "1": 3}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"startingOffset": "earliest"}, False, "did you mean startingOffsets"),
        ({"kafka.bootstrap.servers": "x"}, False, "unknown option"),
        ({"endingOffsets": "latest"}, True, "batch reads only"),
        ({"minOffsetsPerTrigger": "3"}, False, "streaming reads only"),
        ({"maxTriggerDelay": "soon"}, True, "duration"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"}, True, "above"),
        ({"startingOffsets": '{"a": {"1": 2}, "b": {"1": 2}}'}, False, "one log directory"),
        ({"startingOffsets": '{"1": -1}'}, False, "latest"),
        ({"endingOffsets": '{"1": -2}'}, False, "earliest"),
        ({"endingOffsets": "earliest"}, False, "batch"),
        ({"startingTimestamp": "yesterday"}, False, "milliseconds"),
        ({"startingOffsetsByTimestamp": '{"1": -5}'}, False, ">= 0"),
        ({"startingOffsetsByTimestampStrategy": "guess"}, False, "error or latest"),
        ({"minPartitions": "0"}, False, ">= 1"),
    ],
)
def test_bad_options_are_named(
    tmp_path: Path, options: dict[str, str], streaming: bool, message: str
) -> None:
    from epto.spark._options import parse_options

    with pytest.raises(ConfigurationError, match=message):
        parse_options({"path": str(tmp_path), "rows": "per-node", **options}, streaming=streaming)


def test_offsets_json_flat_or_nested_and_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epto.spark._options import ByTimestamp, duration_ms, parse_options

    (tmp_path / "logs").mkdir()
    monkeypatch.chdir(tmp_path)
    flat = parse_options(
        {"path": "logs", "rows": "per-node", "startingOffsets": '{"3": 120}'}, streaming=False
    )
    nested = parse_options(
        {"path": "logs", "rows": "per-node", "startingOffsets": '{"logs": {"3": 120}}'},
        streaming=False,
    )
    assert flat.starting == nested.starting == {3: 120}
    assert flat.path == nested.path == str(tmp_path / "logs")
    by_time = parse_options(
        {
            "path": "logs",
            "rows": "per-node",
            "startingOffsetsByTimestamp": '{"t": {"2": 5}}',
            "startingTimestamp": "9",
        },
        streaming=True,
    )
    assert by_time.starting == ByTimestamp(every=9)  # Kafka's precedence
    assert [duration_ms("d", t) for t in ("15m", "30s", "500", "2h")] == [
        900_000,
        30_000,
        500,
        7_200_000,
    ]
    with pytest.raises(ConfigurationError, match=f"{tmp_path / 'nope'} does not exist"):
        parse_options({"path": "nope"}, streaming=False)


def test_a_stream_starts_at_a_time(tmp_path: Path) -> None:
    from epto.spark._options import parse_options

    write_mixed(tmp_path, 2, 400)  # delivered_at = 10**15 + 7 i microseconds
    millis = 10**12 + 1  # 10**15 + 1000 microseconds: record 143 (7 * 143 = 1001) is first
    opts = {"path": str(tmp_path), "rows": "per-node", "startingTimestamp": str(millis)}
    reader = EptoStreamReader(parse_options(opts, streaming=True))
    assert reader.initialOffset() == {"2": 143}
