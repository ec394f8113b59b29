"""Optimistic delivery over trio TCP on loopback with emulated link delays:
measured optimistic and final latency per member, next to the plan's prediction.

Three (or more) token-ring members run in one process on 127.0.0.1, each
with ``TokenRingConfig(optimistic=OptimisticConfig(planner=...))``. Every
frame to a peer is held for the one-way latency of that link
(``TcpNodeConfig.link_delays``; default seed 001's triangle, 5, 7 and
9 ms), so the members measure those latencies online (probes) and the
coordinator plans delays from them. After ``--warmup`` seconds each member
broadcasts ``--messages`` messages at ``--rate`` per second (Poisson).

Per member: the optimistic delivery latency (delivery time minus broadcast
time: one process, one clock), the plan's prediction of it (the mean over the
same messages of ``W[r][s] + X[r][s]``: the member's latency estimate for the
link and the delay it applied, as they were at that delivery), the final
delivery latency, and how often the final
delivery confirmed the optimistic one. The final sequences are checked with
``epto.check`` (total order, no holes). Latencies are wall-clock on a shared
machine: compare them with each other, not across machines.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

import attrs

from epto import DeliveryTag, EventId, ProcessId

TRIANGLE = ((0.0, 0.005, 0.007), (0.005, 0.0, 0.009), (0.007, 0.009, 0.0))
"""Seed 001's example, ``W[r][s]`` in seconds (sender ``s`` to receiver ``r``)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--latencies",
        default="5,7,9",
        help="ms: three values for the triangle (links 0-1, 0-2, 1-2), or a full "
        "row-major N x N matrix W[r][s] (default 5,7,9)",
    )
    p.add_argument("--planner", choices=("optimal", "fast-seto", "seto", "none"), default="optimal")
    p.add_argument("--messages", type=int, default=300, help="messages per member")
    p.add_argument("--rate", type=float, default=20.0, help="messages/s per member (Poisson)")
    p.add_argument("--warmup", type=float, default=4.0, help="seconds before traffic")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=run)


@attrs.frozen(kw_only=True)
class MemberFigures:
    """What one member measured (latencies in seconds)."""

    optimistic: tuple[float, ...]
    predicted: tuple[float, ...]
    final: tuple[float, ...]
    confirmed: int
    reordered: int
    delays: tuple[tuple[ProcessId, float], ...]
    latencies: tuple[tuple[ProcessId, float], ...]
    sequence: tuple[EventId, ...]


@attrs.frozen(kw_only=True)
class GroupRun:
    latencies: tuple[tuple[float, ...], ...]
    members: dict[ProcessId, MemberFigures]
    broadcast: frozenset[EventId]
    complete: bool


def parse_latencies(text: str) -> tuple[tuple[float, ...], ...]:
    """``"5,7,9"`` (the triangle's links) or a row-major N x N matrix, in ms."""
    values = [float(v) / 1000.0 for v in text.split(",")]
    if len(values) == 3:
        a, b, c = values
        return ((0.0, a, b), (a, 0.0, c), (b, c, 0.0))
    n = math.isqrt(len(values))
    if n * n != len(values) or n < 2:
        raise ValueError(f"{len(values)} values: give 3 or a square matrix")
    return tuple(tuple(values[r * n : (r + 1) * n]) for r in range(n))


async def run_group(
    latencies: Sequence[Sequence[float]],
    *,
    planner: str = "optimal",
    messages: int = 300,
    rate: float = 20.0,
    warmup: float = 4.0,
    seed: int = 1,
    timeout: float = 60.0,
) -> GroupRun:
    """Run the group and measure (see the module's docstring)."""
    import trio

    from epto.endpoint import NodeConfig
    from epto.optimistic import OptimisticConfig
    from epto.tokenring import TokenRingConfig
    from epto.transports.trio_tcp import TcpNodeConfig, TokenRingNode

    n = len(latencies)
    pids = list(range(n))
    ring = TokenRingConfig(optimistic=OptimisticConfig(planner=planner))  # type: ignore[arg-type]
    sent: dict[EventId, float] = {}
    seen: dict[ProcessId, dict[EventId, dict[str, float]]] = {p: {} for p in pids}
    sequences: dict[ProcessId, list[EventId]] = {p: [] for p in pids}
    flags: dict[ProcessId, list[bool]] = {p: [] for p in pids}
    applied: dict[ProcessId, dict[EventId, float]] = {p: {} for p in pids}
    """The plan's prediction of each optimistic delivery's latency at each
    member: the member's latency estimate for the link plus the delay it
    applied (both as they were then)."""
    total = n * messages
    placeholder = {p: "127.0.0.1:9" for p in pids}
    complete = False
    async with trio.open_nursery() as nursery:
        nodes: dict[ProcessId, Any] = {}
        for p in pids:
            config = NodeConfig(
                mode="token-ring",
                pid=p,
                members=placeholder,
                tokenring=ring,
                seed=seed * 1000 + p,
            )
            tcp = TcpNodeConfig(link_delays={q: latencies[q][p] for q in pids if q != p})
            nodes[p] = await nursery.start(_serve, TokenRingNode(config, tcp=tcp))
        for node in nodes.values():
            for q, other in nodes.items():
                if q != node.pid:
                    node.engine.set_address(q, other.address)

        async def consume(pid: ProcessId) -> None:
            node = nodes[pid]
            async for delivery in node:
                eid = delivery.event.id
                now = trio.current_time()
                if delivery.tag is DeliveryTag.REVOKED:
                    seen[pid].setdefault(eid, {})["revoked"] = now
                    continue  # not in the order: its source left the view
                if delivery.tag is DeliveryTag.OPTIMISTIC:
                    seen[pid].setdefault(eid, {})["optimistic"] = now
                    plan = node.process.statistics().optimistic
                    source = eid[0]
                    measured = 0.0 if source == pid else dict(plan.latencies).get(source, 0.0)
                    applied[pid][eid] = measured + dict(plan.delays).get(source, 0.0)
                else:
                    seen[pid].setdefault(eid, {})["final"] = now
                    sequences[pid].append(eid)
                    flags[pid].append(delivery.reordered)

        for p in pids:
            nursery.start_soon(consume, p)
        await trio.sleep(warmup)
        rng = random.Random(seed)

        async def produce(pid: ProcessId) -> None:
            node = nodes[pid]
            for _ in range(messages):
                await trio.sleep(rng.expovariate(rate))
                sent[node.broadcast(b"x" * 16)] = trio.current_time()

        with trio.move_on_after(timeout):
            async with trio.open_nursery() as producers:
                for p in pids:
                    producers.start_soon(produce, p)
            while any(len(sequences[p]) < total for p in pids):
                await trio.sleep(0.05)
            complete = True
        figures = {
            p: _figures(nodes[p], p, latencies, sent, seen, applied, sequences, flags) for p in pids
        }
        for node in nodes.values():
            node.abort()
        nursery.cancel_scope.cancel()
    return GroupRun(
        latencies=tuple(tuple(row) for row in latencies),
        members=figures,
        broadcast=frozenset(sent),
        complete=complete,
    )


async def _serve(node: Any, *, task_status: Any) -> None:
    async with node:
        task_status.started(node)
        import trio

        await trio.sleep_forever()


def _figures(
    node: Any,
    pid: ProcessId,
    latencies: Sequence[Sequence[float]],
    sent: dict[EventId, float],
    seen: dict[ProcessId, dict[EventId, dict[str, float]]],
    applied: dict[ProcessId, dict[EventId, float]],
    sequences: dict[ProcessId, list[EventId]],
    flags: dict[ProcessId, list[bool]],
) -> MemberFigures:
    optimistic, predicted, final = [], [], []
    for eid, at in seen[pid].items():
        start = sent.get(eid)
        if start is None:
            continue
        if "optimistic" in at:
            optimistic.append(at["optimistic"] - start)
            predicted.append(applied[pid][eid])
        if "final" in at:
            final.append(at["final"] - start)
    stats = node.process.statistics().optimistic
    return MemberFigures(
        optimistic=tuple(optimistic),
        predicted=tuple(predicted),
        final=tuple(final),
        confirmed=flags[pid].count(False),
        reordered=flags[pid].count(True),
        delays=stats.delays,
        latencies=stats.latencies,
        sequence=tuple(sequences[pid]),
    )


def _ms(values: Sequence[float], q: float | None = None) -> str:
    if not values:
        return "-"
    if q is None:
        return f"{1000 * statistics.fmean(values):.1f}"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


def run(args: argparse.Namespace) -> int:
    import trio

    from epto.check import check

    try:
        latencies = parse_latencies(args.latencies)
    except ValueError as exc:
        print(f"epto bench optimistic: --latencies: {exc}")
        return 2
    n = len(latencies)
    result = trio.run(
        lambda: run_group(
            latencies,
            planner=args.planner,
            messages=args.messages,
            rate=args.rate,
            warmup=args.warmup,
            seed=args.seed,
            timeout=args.timeout,
        )
    )
    links = ", ".join(
        f"{r}<-{s} {1000 * latencies[r][s]:g}" for r in range(n) for s in range(n) if r != s
    )
    print(
        f"{n} token-ring members on 127.0.0.1 (trio TCP), emulated one-way latencies (ms): "
        f"{links}; planner {args.planner}; {args.messages} messages per member at "
        f"{args.rate:g}/s after {args.warmup:g} s"
    )
    print(
        f"{'member':>6} {'measured W (ms)':>22} {'delays (ms)':>22} {'opt mean':>9} "
        f"{'plan':>6} {'opt p99':>8} {'final mean':>10} {'final p99':>9} {'confirmed':>10}"
    )
    for pid, m in result.members.items():
        measured = " ".join(f"{1000 * v:.1f}" for _, v in m.latencies)
        delays = " ".join(f"{1000 * v:.1f}" for _, v in m.delays)
        finals = m.confirmed + m.reordered
        share = f"{100 * m.confirmed / finals:.1f}%" if finals else "-"
        print(
            f"{pid:>6} {measured:>22} {delays:>22} {_ms(m.optimistic):>9} "
            f"{_ms(m.predicted):>6} {_ms(m.optimistic, 0.99):>8} {_ms(m.final):>10} "
            f"{_ms(m.final, 0.99):>9} {share:>10}"
        )
    report = check({p: m.sequence for p, m in result.members.items()}, broadcast=result.broadcast)
    delivered = sum(len(m.sequence) for m in result.members.values())
    print(
        f"final order: {len(report.order_violations)} order violations, "
        f"{report.total_holes} holes; {delivered} final deliveries of "
        f"{len(result.broadcast)} broadcasts at {n} members"
        + ("" if result.complete else " (INCOMPLETE: timed out)")
    )
    return 0 if result.complete and not report.order_violations and not report.total_holes else 1
