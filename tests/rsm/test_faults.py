"""The fault suite (``epto bench faults``, docs/faults.md): its proxy cuts and
heals links, its verdicts on hand-made histories, and a short slice of runs
over real worker processes with the library's verdicts asserted: no safety
violation (linearizable, no acknowledged write lost, no divergent final
state) and progress once the faults are healed."""

from __future__ import annotations

import contextlib
import socket
import struct
from pathlib import Path

import pytest
import trio

import epto.wire
from epto.benchmarks._fault_proxy import Links, ProxyNet, frame_sender
from epto.benchmarks._fault_run import RunReport, RunSpec, run_once
from epto.benchmarks._fault_verdicts import (
    FaultRecord,
    Op,
    divergence,
    longest_outage,
    lost_acknowledged,
    unavailability,
)
from epto.benchmarks.faults import judge, load, save

# -- the proxy -------------------------------------------------------------------------


def _frame(sender: int, body: bytes = b"") -> bytes:
    """A frame header naming ``sender`` (docs/wire-format.md), then ``body``."""
    return b"\xe7\x70\x01\x01\x00\x00\x00\x00" + struct.pack(">QQ", sender, 0) + body


def test_frame_sender_reads_real_frames_and_refuses_garbage() -> None:
    (frame,) = epto.wire.FrameCodec(group=0).encode(7, {})
    assert frame_sender(frame) == 7
    assert frame_sender(_frame(2**64 - 1)) == 2**64 - 1
    assert frame_sender(b"\xe7\x70" + bytes(10)) is None  # too short
    assert frame_sender(b"xx" + bytes(30)) is None  # not the magic


async def _udp_receiver() -> tuple[trio.socket.SocketType, int]:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


async def _received(sock: trio.socket.SocketType, wait: float = 0.3) -> list[bytes]:
    got = []
    with trio.move_on_after(wait):
        while True:
            data, _ = await sock.recvfrom(65536)
            got.append(data)
    return got


@pytest.mark.trio
async def test_udp_proxy_forwards_drops_while_cut_and_heals() -> None:
    links = Links()
    net = ProxyNet(links, [1, 2, 3], gossip="udp")
    receiver, port = await _udp_receiver()
    sender = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    async with trio.open_nursery() as nursery:
        await net.start(nursery)
        proxy = ("127.0.0.1", net.gossip[2].port)
        await sender.sendto(_frame(1, b"before"), proxy)
        assert await _received(receiver) == []  # no target yet: member 2 is down
        net.set_target(2, ("127.0.0.1", port), None)
        await sender.sendto(_frame(1, b"up"), proxy)
        assert await _received(receiver) == [_frame(1, b"up")]
        links.cut([(1, 2)])
        await sender.sendto(_frame(1, b"cut"), proxy)
        await sender.sendto(_frame(3, b"other"), proxy)  # 3 -> 2 is not cut
        await sender.sendto(b"garbage", proxy)
        assert await _received(receiver) == [_frame(3, b"other")]
        links.heal()
        await sender.sendto(_frame(1, b"healed"), proxy)
        assert await _received(receiver) == [_frame(1, b"healed")]
        counts = net.counts()
        assert counts["dropped"] == 2 and counts["bad-header"] == 1
        assert counts["forwarded"] == 3
        nursery.cancel_scope.cancel()
    receiver.close()
    sender.close()


async def _echo_server(nursery: trio.Nursery) -> int:
    async def echo(stream: trio.SocketStream) -> None:
        try:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    listeners = await nursery.start(trio.serve_tcp, echo, 0)
    port: int = listeners[0].socket.getsockname()[1]
    return port


async def _round_trip(port: int, payload: bytes) -> bytes | None:
    """Send ``payload`` through the proxy at ``port``; what came back (None:
    the proxy reset or closed the stream)."""
    with trio.move_on_after(2.0):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            try:
                await stream.send_all(payload)
                got = b""
                while len(got) < len(payload):
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return None
                    got += chunk
                return got
            except (trio.BrokenResourceError, OSError):
                return None
    raise AssertionError("the proxy neither answered nor closed")


@pytest.mark.trio
async def test_tcp_proxies_pipe_reset_while_cut_and_heal() -> None:
    links = Links()
    net = ProxyNet(links, [1, 2], gossip="tcp")
    async with trio.open_nursery() as nursery:
        await net.start(nursery)
        target = ("127.0.0.1", await _echo_server(nursery))
        gossip, transfer = net.gossip[2].port, net.transfer[1, 2].port
        stream_frame = struct.pack(">I", 28) + _frame(1, b"abcd")
        assert await _round_trip(gossip, stream_frame) is None  # member 2 down
        net.set_target(2, target, target)
        assert await _round_trip(gossip, stream_frame) == stream_frame
        assert await _round_trip(transfer, b'{"op": "latest"}\n') == b'{"op": "latest"}\n'
        # A stream piped on a link is reset when the link is cut.
        live = await trio.open_tcp_stream("127.0.0.1", gossip)
        await live.send_all(stream_frame)
        echoed = b""
        with trio.fail_after(2):
            while len(echoed) < len(stream_frame):
                echoed += await live.receive_some(100)
        assert echoed == stream_frame
        links.cut([(1, 2)])
        with trio.fail_after(2), contextlib.suppress(trio.BrokenResourceError):  # reset
            assert await live.receive_some(100) == b""
        await live.aclose()
        assert await _round_trip(gossip, stream_frame) is None
        assert await _round_trip(transfer, b"x\n") is None
        # The other direction, 2 -> 1, is not cut.
        net.set_target(1, target, target)
        back = struct.pack(">I", 28) + _frame(2, b"back")
        assert await _round_trip(net.gossip[1].port, back) == back
        links.heal()
        assert await _round_trip(gossip, stream_frame) == stream_frame
        assert await _round_trip(transfer, b"y\n") == b"y\n"
        assert (
            await _round_trip(gossip, struct.pack(">I", 28) + b"not a frame header at all..")
            is None
        )
        counts = net.counts()
        assert counts["severed"] >= 1 and counts["bad-header"] == 1
        nursery.cancel_scope.cancel()


# -- verdicts on hand-made histories ----------------------------------------------------


def _op(
    client: int,
    op: str,
    arg: object,
    result: object,
    status: str,
    t0: float,
    t1: float,
    key: str = "k",
) -> Op:
    return Op(
        client=client,
        key=key,
        op=op,
        arg=arg,
        result=result,
        status=status,
        invoked=t0,
        completed=t1,
    )


def test_lost_acknowledged_writes_register() -> None:
    history = [
        _op(1, "write", 10, None, "ok", 0.0, 1.0),  # overwritten by 20: not lost
        _op(2, "write", 20, None, "ok", 2.0, 3.0),  # final value: not lost
        _op(1, "write", 30, None, "ok", 0.0, 1.0, key="j"),  # absent, nothing after it: lost
        _op(1, "write", 40, None, "ok", 0.0, 1.0, key="m"),  # absent, but an info write
        _op(2, "write", 41, None, "info", 5.0, 6.0, key="m"),  #   may have overwritten it
        _op(1, "cas", [None, 50], True, "ok", 0.0, 1.0, key="c"),  # acked cas: lost
        _op(2, "cas", [7, 51], False, "ok", 2.0, 3.0, key="c"),  # a failed cas writes nothing
        _op(1, "write", 60, None, "fail", 0.0, 1.0, key="f"),  # not acknowledged
        _op(1, "write", 70, None, "ok", 5.0, 6.0, key="o"),  # overwritten by a write that
        _op(2, "write", 71, None, "ok", 4.0, 5.5, key="o"),  #   overlaps it: not lost
        _op(1, "write", 80, None, "ok", 5.0, 6.0, key="p"),  # a write that completed before
        _op(2, "write", 81, None, "ok", 1.0, 2.0, key="p"),  #   it was invoked cannot hide it
    ]
    finals = {
        1: {"k": 20, "j": None, "m": 41, "c": None, "o": 71, "p": 81},
        2: {"k": 20, "j": 30, "m": 41, "c": 50, "o": 71, "p": 81},
    }
    lost = {
        (op.key, op.arg if op.op != "cas" else tuple(op.arg)): where
        for op, where in lost_acknowledged(history, finals, model="register")
    }
    assert lost == {("j", 30): (1,), ("c", (None, 50)): (1,), ("p", 80): (1, 2)}


def test_lost_acknowledged_adds_set() -> None:
    history = [
        _op(1, "add", 1, None, "ok", 0.0, 1.0, key="set"),
        _op(1, "add", 2, None, "ok", 1.0, 2.0, key="set"),
        _op(2, "add", 3, None, "info", 1.0, 2.0, key="set"),  # not acknowledged
        _op(2, "read", None, [1], "ok", 1.0, 2.0, key="set"),
    ]
    lost = lost_acknowledged(history, {1: [1, 2], 2: [1], 3: [1, 3]}, model="set")
    assert [(op.arg, where) for op, where in lost] == [(2, (2, 3))]


def test_unavailability_windows() -> None:
    ok = [0.5, 1.0, 2.0, 2.2, 6.0, 6.5, 9.0]
    history = [_op(1, "read", None, None, "ok", t - 0.1, t) for t in ok]
    history.append(_op(2, "read", None, None, "info", 2.0, 4.0))  # not a success
    faults = [
        FaultRecord(kind="pause", start=1.5, healed=3.5),  # until 5.0: 2.2 -> 5.0 = 2.8
        FaultRecord(kind="kill", start=5.0, healed=7.0),  # until 8.0: 5.0 -> 6.0 = 1.0
        FaultRecord(kind="partition-minority", start=8.0, healed=8.5),  # until 10: 8 -> 9
    ]
    windows = unavailability(history, faults, end=10.0)
    assert [round(w.gap, 6) for w in windows] == [2.8, 1.5, 1.0]
    assert [w.recovery for w in windows] == [None, None, 0.5]
    # The run's longest outage spans faults: 2.2 -> 6.0.
    assert longest_outage(history, 0.0, 10.0) == (2.2, 6.0)
    assert longest_outage([], 0.0, 3.0) == (0.0, 3.0)
    # A fault with no success at all until the end: the whole window.
    (alone,) = unavailability([], [FaultRecord(kind="kill", start=1.0, healed=2.0)], end=4.0)
    assert alone.gap == 3.0 and alone.recovery is None


def test_divergence_groups_replicas_and_sets_stuck_ones_apart() -> None:
    same = {"ready": True, "cut": [5, 1, 0], "digest": "aa", "state": {"k": 1}}
    assert not divergence({1: same, 2: dict(same)}).divergent
    other = {**same, "digest": "bb"}
    verdict = divergence({1: same, 2: other, 3: dict(same), 4: {"ready": False}})
    assert verdict.divergent and verdict.groups == ((1, 3), (2,)) and verdict.stuck == (4,)


def test_a_saved_run_is_judged_again_alike(tmp_path: Path) -> None:
    spec = RunSpec(engine="token-ring", replicas=3, seed=1, faults=("pause",), duration=1.0)
    history = [
        _op(1, "write", 1, None, "ok", 0.0, 1.0),
        _op(2, "read", None, 2, "ok", 1.5, 2.0),  # 2 was never written: not linearizable
        _op(3, "cas", [1, 3], None, "info", 0.5, 0.9),
    ]
    finals = {
        p: {"ready": True, "cut": [1, 1, 0], "digest": "x", "state": {"k": 1}} for p in (1, 2)
    }
    report = RunReport(
        spec=spec, history=history, faults=[], finals=finals, load_end=3.0, last_heal=0.0
    )
    judge(report, max_states=1000)
    assert report.linearizable is False and not report.safe
    save(report, tmp_path)
    again = load(tmp_path)
    judge(again, max_states=1000)
    assert again.history == history and again.linearizable is False
    assert (tmp_path / "history.jsonl").read_text().count("\n") == 3


# -- the slice: real processes ------------------------------------------------------------

_SLICE = dict(
    replicas=3,
    duration=1.0,
    clients=2,
    keys=2,
    rate=8.0,
    op_timeout=2.0,
    fault_duration=1.5,
    gap=1.0,
    warmup=1.0,
    quiesce=2.5,
    settle=15.0,
    round_interval=0.05,
    max_joins=0,
    start_timeout=30.0,
)


def _run(tmp_path: Path, engine: str, schedule: tuple[str, ...], seed: int) -> RunReport:
    spec = RunSpec(engine=engine, seed=seed, faults=schedule, schedule=schedule, **_SLICE)  # type: ignore[arg-type]
    report = trio.run(run_once, spec, tmp_path / "run")
    judge(report, max_states=200_000)
    save(report, tmp_path / "run")
    return report


def _assert_safe_and_live(report: RunReport) -> None:
    counts = report.counts()
    detail = f"history and logs in {report.spec}; events {report.events}; {report.lin_detail}"
    assert [f.kind for f in report.faults] == list(report.spec.schedule), detail
    assert report.linearizable is True, detail
    assert report.lost == [], detail
    assert report.diverged is not None and not report.diverged.divergent, detail
    assert not report.diverged.stuck, detail
    assert counts["ok"] > 0 and report.ok_after_heal() > 0, detail
    assert not [e for e in report.events if "exited by itself" in e], detail


@pytest.mark.slow
def test_token_ring_survives_a_kill_and_a_pause(tmp_path: Path) -> None:
    _assert_safe_and_live(_run(tmp_path, "token-ring", ("kill", "pause"), seed=3))


@pytest.mark.slow
def test_epto_survives_a_pause(tmp_path: Path) -> None:
    _assert_safe_and_live(_run(tmp_path, "epto", ("pause",), seed=2))


@pytest.mark.slow
def test_epto_cut_off_replica_acknowledges_nothing(tmp_path: Path) -> None:
    """DESIGN.md section 12: a call returns once a majority confirmed its
    command; a replica cut off from the others times out instead."""
    report = _run(tmp_path, "epto", ("partition-minority",), seed=1)
    (cut,) = report.faults
    minority = set(cut.targets)
    acked_while_cut = [
        op
        for op in report.history
        if op.status == "ok"
        and op.replica in minority
        and op.invoked >= cut.start
        and op.completed <= cut.healed
    ]
    assert acked_while_cut == [], f"{len(acked_while_cut)} acknowledged while cut off"
    _assert_safe_and_live(report)


@pytest.mark.slow
def test_epto_replicas_agree_again_after_a_three_way_partition(tmp_path: Path) -> None:
    """docs/rsm.md, *A partition with no majority*: each of three replicas
    cut off from both others delivers its own commands (acknowledging none);
    after the heal they follow one branch (the lowest id's, the protected
    prefix of every replica being the one they shared before the split), end
    on one cut and digest, and serve again."""
    report = _run(tmp_path, "epto", ("partition-majority",), seed=5)
    assert sorted(report.faults[0].note.split(" | ")) == ["1", "2", "3"]
    _assert_safe_and_live(report)


@pytest.mark.slow
def test_token_ring_two_of_three_killed_at_once_lose_nothing(tmp_path: Path) -> None:
    """A majority restarted at once (docs/token-ring.md, *A majority restarted
    at once*: a member restarted on its data directory votes as itself):
    nothing acknowledged is lost or reordered, and no replica ends on
    another state. (Whether the group serves again afterwards is the token
    ring's own liveness, asserted with the ring's tests, not here.)"""
    spec = RunSpec(
        engine="token-ring",
        seed=103,
        faults=("several",),
        schedule=("several",),
        **{**_SLICE, "settle": 8.0},  # type: ignore[arg-type]
    )
    report = trio.run(run_once, spec, tmp_path / "run")
    judge(report, max_states=200_000)
    detail = f"events {report.events}; {report.lin_detail}; finals {report.finals}"
    assert report.faults[0].note == "1:kill 2:kill", detail
    assert report.linearizable is True and report.lost == [], detail
    assert report.diverged is not None and not report.diverged.divergent, detail
