"""``epto analyze`` reports data loss as ``epto check`` does: the same exit
status (2) and the same one line, never a verdict with the counts of what is
left (it said "1628 deliveries of 600 events" and exited 0 on logs whose one
node had lost its first segment). A lost first segment or tail is found from
the logs' extents before Spark starts; a missing middle segment by Spark's
reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epto.cli import main
from epto.log import DeliveryLogWriter, LogGapError, LogTailLostError, check_logs, list_segments
from epto.spark._analyze import analyze

NODES, EVENTS = 3, 600


def write_logs(root: Path) -> None:
    """Three nodes that each delivered the same 600 events, in small segments."""
    for node in range(NODES):
        with DeliveryLogWriter(root, node, segment_bytes=4096) as w:
            for i in range(EVENTS):
                w.append_fields(
                    source=i % 3,
                    seq=i // 3,
                    ts=i,
                    payload=b"p%d" % i,
                    delivered_at=10**12 + 1000 * i,
                    broadcast_at=10**12,
                )


def lose(root: Path, which: str) -> None:
    segments = list_segments(root / "1")
    assert len(segments) > 4
    {"first": segments[0], "middle": segments[2], "last": segments[-1]}[which].path.unlink()


def lines(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, [line for line in captured.err.splitlines() if line.startswith("epto ")] + [
        line for line in captured.out.splitlines() if line
    ]


@pytest.mark.parametrize("which", ["first", "last"])
def test_a_lost_first_segment_or_tail_is_said_as_epto_check_says_it_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    write_logs(tmp_path)
    lose(tmp_path, which)
    status, said = lines(["check", str(tmp_path)], capsys)
    assert status == 2 and len(said) == 1 and said[0].startswith("epto check: "), said
    what = said[0].removeprefix("epto check: ")
    assert f"{tmp_path / '1'}: " in what and "data loss" in what
    if which == "first":
        assert (
            what
            == f"data loss: {tmp_path / '1'}: delivery indices 0..{_second(tmp_path)} are missing"
        )
    # The library function raises rather than count what is left.
    expected = LogGapError if which == "first" else LogTailLostError
    with pytest.raises(expected) as caught:
        analyze(tmp_path, master="local[1]", plot=False)
    assert str(caught.value) in what
    with pytest.raises(expected):
        check_logs(tmp_path)
    # Found from the extents: no Spark session was started (master
    # "invalid" would fail if one were).
    status, said = lines(["analyze", str(tmp_path), "--master", "invalid://nowhere"], capsys)
    assert (status, said) == (2, [f"epto analyze: {what}"])


def _second(root: Path) -> int:
    return list_segments(root / "1")[0].first_index - 1


@pytest.mark.spark
def test_a_missing_middle_segment_is_said_as_epto_check_says_it(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_logs(tmp_path)
    lose(tmp_path, "middle")
    status, said = lines(["check", str(tmp_path)], capsys)
    assert status == 2 and len(said) == 1, said
    what = said[0].removeprefix("epto check: ")
    assert what.startswith(f"data loss: {tmp_path / '1'}: delivery indices ")
    # The command line uses the active session (the test's).
    status, said = lines(["analyze", str(tmp_path)], capsys)
    assert (status, said) == (2, [f"epto analyze: {what}"])
