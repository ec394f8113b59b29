"""A full view change never needs a frame larger than the links carry: the
unstable window (what a Promise, an Accept and a Decided carry) stays within
``TokenRingConfig.max_unstable_bytes`` and ``max_unstable_messages``."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from epto.transports.virtual import TokenRingCluster

from epto import FrameCodec, Limits, LocalProtocolError, ProcessId
from epto.tokenring import TokenRingConfig, TokenRingProcess, token_ring_registry
from epto.tokenring._messages import Accept, Decided, Promise

STREAM = Limits.for_frame_size(1 << 20, max_events_per_ball=4096)
"""The TCP driver's default limits: 1 MiB frames."""
CONSENSUS = (Promise, Accept, Decided)


class FrameAudit:
    """Encodes every consensus message a process sends, as a driver would."""

    def __init__(self, limits: Limits) -> None:
        self.codec = FrameCodec(group=0, limits=limits, registry=token_ring_registry())
        self.encoded: dict[str, int] = {}
        self.failed: list[tuple[str, str]] = []
        self.largest = 0

    def wrap(self, pid: ProcessId, proc: TokenRingProcess) -> None:
        inner: Callable[[], list[tuple[ProcessId, object]]] = proc.messages_to_send  # type: ignore[assignment]

        def messages_to_send() -> list[tuple[ProcessId, object]]:
            out = inner()
            for _, message in out:
                if isinstance(message, CONSENSUS):
                    name = type(message).__name__
                    try:
                        frames = self.codec.encode(pid, message)
                    except LocalProtocolError as exc:
                        self.failed.append((name, str(exc)))
                        continue
                    self.encoded[name] = self.encoded.get(name, 0) + 1
                    self.largest = max(self.largest, max(len(f) for f in frames))
            return out

        proc.messages_to_send = messages_to_send  # type: ignore[method-assign]


def _crash_under_large_bursts(
    config: TokenRingConfig, *, members: int = 5, per_burst: int = 200
) -> tuple[TokenRingCluster, FrameAudit]:
    """``members`` members; the last crashes at 0.5 s and is excluded by a
    full view change about ``exclude_timeout`` later, while bursts of 4 KiB
    messages (``per_burst`` every 10 ms) keep the token's window large."""
    cluster = TokenRingCluster(members, config, seed=7, delay=(0.001, 0.003))
    audit = FrameAudit(STREAM)
    for pid, proc in cluster.procs.items():
        audit.wrap(pid, proc)
    payload = bytes(4096)
    t = 1.2
    n = 0
    while t < 1.8:
        for i in range(per_burst):
            cluster.broadcast_at(t, i % (members - 1), payload[:-8] + n.to_bytes(8, "big"))
            n += 1
        t += 0.01
    cluster.at(0.5, lambda: cluster.crash(members - 1))
    cluster.run_until(4.0)
    return cluster, audit


CRASH = TokenRingConfig(exclude_timeout=1.0, suspect_timeout=0.2)


def test_unbounded_window_makes_the_full_change_unencodable() -> None:
    """The defect the budgets fix: with budgets beyond the frame, a window of
    4 KiB messages exceeds 1 MiB and the full change's Promise and Accept
    cannot be encoded, so over TCP the change would never complete."""
    unbounded = attrs.evolve(CRASH, max_unstable_bytes=1 << 40, max_unstable_messages=1 << 20)
    _, audit = _crash_under_large_bursts(unbounded)
    failed = {name for name, _ in audit.failed}
    assert "Promise" in failed and "Accept" in failed, audit.encoded
    assert all("exceeds the frame budget" in why for _, why in audit.failed)


def test_full_change_under_large_payloads_fits_the_frame_and_completes() -> None:
    cluster, audit = _crash_under_large_bursts(CRASH)
    assert not audit.failed, audit.failed[:3]
    assert audit.encoded.get("Promise", 0) >= 1 and audit.encoded.get("Decided", 0) >= 1
    assert audit.largest <= STREAM.max_frame_size
    survivors = [cluster.procs[p] for p in range(4)]
    assert all(p.statistics().full_changes == 1 for p in survivors)
    assert all(4 not in p.config.members for p in survivors)
    report = cluster.check()
    assert report.ok, report.summary()
    sequences = [cluster.delivered[p] for p in range(4)]
    assert all(s == sequences[0] for s in sequences)
    assert len(sequences[0]) == len(cluster.broadcasts)
