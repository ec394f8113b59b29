"""The majority commit rule (``epto.rsm._commit.CommitTracker``), a
replica's test of a peer's prefix (``Replica.reaches``), and the ``state``
request of the transfer protocol under hostile input (its decoder and the
server's parser are fuzzed: they return or raise ``TransferError``, never
anything else)."""

from __future__ import annotations

import json

import pytest
import trio
from epto.services._rsm_transfer import (
    MAX_CUTS,
    PeerState,
    TransferError,
    TransferServer,
    decode_state,
    fetch_state,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from epto import Delivery, Event
from epto.rsm import Replica, Snapshot
from epto.rsm._commit import CommitTracker

from .machines import KV


def _deliver(replica: Replica, ts: int, source: int = 1) -> None:
    event = Event(source=source, seq=ts, ts=ts, payload=b'["incr","n",1]')
    replica.deliver(Delivery(event=event))


def _replica(n: int) -> Replica:
    r = Replica(KV())
    for ts in range(1, n + 1):
        _deliver(r, ts)
    return r


def test_a_command_is_released_once_a_majority_holds_its_prefix() -> None:
    mine = _replica(5)
    peer = _replica(5)
    tracker = CommitTracker(["a", "b", "c", "d"])  # five replicas: three make a majority
    key = mine.cut
    assert key is not None
    tracker.add((1, 5), key, mine.digest)
    assert tracker.released(mine) == []
    # A peer at our cut with our digest there confirms it ...
    assert tracker.record("a", mine, [key], peer.cut, peer.digest, [peer.digest_at(key)]) is True
    assert tracker.released(mine) == []
    # ... and one behind is a verdict, not a confirmation: it did not see the
    # match, so it made no promise to keep that prefix. Asked at the cut it
    # holds (our digest sent), it confirms up to there.
    behind = _replica(3)
    assert tracker.record("b", mine, [key], behind.cut, behind.digest, [None]) is True
    assert tracker.confirmed(mine) is None
    at = [behind.digest]
    assert tracker.record("b", mine, [behind.cut], behind.cut, behind.digest, at) is True
    assert tracker.released(mine) == [] and tracker.confirmed(mine) == behind.cut
    assert tracker.record("c", mine, [key], peer.cut, peer.digest, [peer.digest]) is True
    assert tracker.released(mine) == [(1, 5)] and len(tracker) == 0
    assert tracker.confirmed(mine) == key


def test_a_contradiction_releases_nothing_and_is_reported() -> None:
    mine = _replica(4)
    other = Replica(KV())
    for ts in (1, 3, 4):  # the same cut, without the second command
        _deliver(other, ts)
    tracker = CommitTracker(["a", "b"])
    assert mine.cut is not None
    tracker.add((1, 4), mine.cut, mine.digest)
    at = other.digest_at(mine.cut)
    assert tracker.record("a", mine, [mine.cut], other.cut, other.digest, [at]) is False
    assert tracker.record("b", mine, [mine.cut], other.cut, other.digest, [at]) is False
    assert tracker.released(mine) == []


def test_an_orphan_is_released_only_by_peers_confirming_its_own_prefix() -> None:
    mine = _replica(4)
    key, digest = mine.cut, mine.digest
    assert key is not None
    tracker = CommitTracker(["a", "b"])
    tracker.add((1, 4), key, digest)
    # A fetched state replaces the chain: the command is an orphan now.
    group = _replica(6)
    snapshot = group.snapshot()
    mine.restore(
        Snapshot(cut=snapshot.cut, applied=6, digest=snapshot.digest, state=snapshot.state)
    )
    tracker.reset()
    assert tracker.orphans(mine, MAX_CUTS) == [key]
    # The peer holds this replica's new chain, not the orphan's prefix (yet).
    assert tracker.record("a", mine, [mine.cut, key], group.cut, group.digest, [None, None])
    assert tracker.released(mine) == []
    tracker.record("a", mine, [mine.cut, key], group.cut, group.digest, [group.digest, digest])
    assert tracker.released(mine) == []  # one of three: not a majority
    tracker.record("b", mine, [mine.cut, key], group.cut, group.digest, [group.digest, digest])
    assert tracker.released(mine) == [(1, 4)]


def test_reaches_counts_what_is_buffered_and_checks_digests() -> None:
    ahead = _replica(6)
    mine = _replica(3)
    mine.suspend()
    for ts in (4, 5, 6):
        _deliver(mine, ts)
    assert mine.reaches(ahead.cut, ahead.digest)
    assert not mine.reaches(ahead.cut, bytes(16))
    assert not _replica(3).reaches(ahead.cut, ahead.digest)
    assert mine.reaches(None, None)
    assert [a.cut[0] for a in mine.resume()] == [4, 5, 6] and mine.digest == ahead.digest


def test_an_empty_token_ring_replica_applies_only_the_first_position() -> None:
    ring = Replica(KV(), contiguous=True)
    _deliver(ring, 7)
    assert ring.hole and not ring.ready and ring.applied == 0


# -- the state request, hostile ---------------------------------------------------------


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    answer=st.dictionaries(
        st.sampled_from(["ready", "cut", "digest", "at", "view", "error"]), _json
    ),
    asked=st.integers(0, MAX_CUTS),
)
def test_the_state_decoder_returns_a_state_or_raises_transfer_error(
    answer: dict[str, object], asked: int
) -> None:
    try:
        state = decode_state(answer, asked)
    except TransferError:
        return
    assert isinstance(state, PeerState) and len(state.at) == asked
    assert state.digest is None or len(state.digest) == 16


def _server(ready: bool) -> TransferServer:
    replica = _replica(3)

    async def snapshot() -> Snapshot:
        return replica.snapshot()

    return TransferServer(
        snapshot=snapshot,
        ready=lambda: ready,
        cut=lambda: replica.cut,
        digest_at=replica.digest_at,
        wait=0.5,
    )


async def _serve_once(server: TransferServer, data: bytes) -> bytes:
    """Run the server's handler on one connection fed ``data``; what it sent."""
    left, right = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.handle, right)
        await left.send_all(data)
        await left.send_eof()
        out = b""
        with trio.fail_after(5):
            while chunk := await left.receive_some():
                out += chunk
    return out


@settings(max_examples=200, deadline=None)
@given(request=st.dictionaries(st.sampled_from(["op", "cuts", "wait"]), _json))
def test_the_server_answers_or_refuses_any_state_request(request: dict[str, object]) -> None:
    request = {**request, "op": "state"}
    server = _server(ready=True)
    data = json.dumps(request).encode()
    out = trio.run(_serve_once, server, len(data).to_bytes(4, "big") + data)
    if out:
        answer = json.loads(out[4:])
        assert set(answer) == {"ready", "cut", "digest", "at"}
    else:
        assert server.refused == {"bad-request": 1}


@pytest.mark.trio
async def test_a_replica_that_is_not_ready_answers_at_once() -> None:
    # It used to hold a snapshot or digest request up to 30 s.
    server = _server(ready=False)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, server.handle, 0)
        address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        with trio.fail_after(2):
            state = await fetch_state(address, [(1, 1, 1)], wait=1.0, timeout=5)
        assert not state.ready and state.cut == (3, 1, 3) and state.at == (None,)
        nursery.cancel_scope.cancel()
