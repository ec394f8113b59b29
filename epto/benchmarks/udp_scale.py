"""Many trio nodes on UDP loopback sockets, in worker processes: every event everywhere, one order.

Each node binds its own UDP socket on 127.0.0.1 and runs its own round timer.
``--workers W`` spawns W processes, each hosting a contiguous block of the
nodes in one trio event loop (``--workers 1``: every node in one loop, in a
thread of this process). The workers bind their sockets (port 0), send their
addresses here, get the whole table back, then start together. ``--senders``
nodes broadcast ``--events`` events each; the run ends when every node
delivered every event (or at ``--timeout``), and the delivered sequences go
through ``epto.check``. Protocol parameters default to
``epto.Config.for_group(nodes)`` (the logical clock, c = 2).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

from epto import Config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=200, help="group size")
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 2,
        help="OS processes hosting the nodes (default: the machine's cores; 1: this process)",
    )
    p.add_argument("--events", type=int, default=1, help="broadcasts per broadcasting node")
    p.add_argument("--senders", type=int, help="nodes that broadcast (default: all)")
    p.add_argument("--round-interval", type=float, default=1.0, help="seconds")
    p.add_argument("--fanout", type=int, help="K (default: Config.for_group(nodes))")
    p.add_argument("--ttl", type=int, help="TTL (default: Config.for_group(nodes))")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds after the broadcasts")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=run)


def protocol(args: argparse.Namespace) -> Config:
    """``Config.for_group(nodes)`` at ``--round-interval``, with ``--fanout``/``--ttl``."""
    import attrs

    config = Config.for_group(args.nodes, round_interval=args.round_interval)
    return attrs.evolve(config, fanout=args.fanout or config.fanout, ttl=args.ttl or config.ttl)


def run(args: argparse.Namespace) -> int:
    from epto import ConfigurationError

    config = protocol(args)
    n = args.nodes
    if args.workers < 1:
        raise ConfigurationError(f"--workers must be at least 1, got {args.workers}")
    if args.events < 1:
        raise ConfigurationError(f"--events must be at least 1, got {args.events}")
    workers = min(args.workers, n)
    senders = min(n, args.senders or n)
    print(
        f"nodes={n} workers={workers} fanout={config.fanout} ttl={config.ttl} "
        f"clock={config.clock} round={config.round_interval}s "
        f"senders={senders} events={senders * args.events}"
    )
    print(f"load average before: {_loadavg()}")
    result = measure(
        nodes=n,
        workers=workers,
        senders=senders,
        events=args.events,
        config=config,
        timeout=args.timeout,
        seed=args.seed,
    )
    print_report(result, config)
    print(f"load average after: {_loadavg()}")
    return 0 if result["ok"] else 1


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def blocks(n: int, parts: int) -> list[tuple[int, ...]]:
    """``range(n)`` in ``parts`` contiguous blocks whose sizes differ by one at most."""
    size, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(range(start, end)))
        start = end
    return out


def _udp_drops() -> int | None:
    """Datagrams the kernel dropped for full receive buffers (this network
    namespace, every process in it), or None where /proc/net/snmp is absent."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith("Udp:")]
    except OSError:
        return None
    if len(rows) < 2 or "RcvbufErrors" not in rows[0]:
        return None
    return int(rows[1][rows[0].index("RcvbufErrors")])


class _Workers:
    """The worker processes (or the one thread) and their pipes."""

    def __init__(self, specs: list[Any]) -> None:
        import multiprocessing as mp
        import threading

        from . import _udp_worker

        ctx = mp.get_context("spawn")
        self.inboxes: list[Any] = []  # what the parent reads
        self.outboxes: list[Any] = []  # what the parent writes
        self.runners: list[Any] = []
        for spec in specs:
            to_worker_r, to_worker_w = ctx.Pipe(duplex=False)
            from_worker_r, from_worker_w = ctx.Pipe(duplex=False)
            runner: Any
            if len(specs) == 1:
                runner = threading.Thread(
                    target=_udp_worker.main, args=(to_worker_r, from_worker_w, spec), daemon=True
                )
            else:
                runner = ctx.Process(
                    target=_udp_worker.main, args=(to_worker_r, from_worker_w, spec), daemon=True
                )
            runner.start()
            if len(specs) > 1:
                # The child holds its own copies; ours would hide its exit (no EOF).
                to_worker_r.close()
                from_worker_w.close()
            self.inboxes.append(from_worker_r)
            self.outboxes.append(to_worker_w)
            self.runners.append(runner)

    def send_all(self, kind: str, value: Any = None) -> None:
        for box in self.outboxes:
            box.send((kind, value))

    def receive(self, index: int, expected: str, deadline: float) -> Any:
        box = self.inboxes[index]
        if not box.poll(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"worker {index} sent no {expected!r} in time")
        kind, value = box.recv()
        if kind == "error":
            raise RuntimeError(f"worker {index} failed: {value}")
        if kind != expected:
            raise RuntimeError(f"worker {index} sent {kind!r}, expected {expected!r}")
        return value

    def receive_all(self, expected: str, deadline: float) -> list[Any]:
        return [self.receive(i, expected, deadline) for i in range(len(self.inboxes))]

    def wait_done(self, deadline: float) -> list[float | None]:
        """When each worker said its nodes delivered everything (None: not by ``deadline``)."""
        from multiprocessing.connection import wait

        done: list[float | None] = [None] * len(self.inboxes)
        waiting = dict(enumerate(self.inboxes))
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for box in wait(list(waiting.values()), timeout=remaining):
                index = next(i for i, b in waiting.items() if b is box)
                done[index] = self.receive(index, "done", deadline)
                del waiting[index]
        return done

    def close(self) -> None:
        # Closing our ends wakes a worker still waiting for the parent (EOF).
        for box in self.outboxes:
            with contextlib.suppress(OSError):
                box.close()
        for runner in self.runners:
            runner.join(timeout=30)
            if runner.is_alive() and hasattr(runner, "kill"):
                runner.kill()
                runner.join(timeout=5)
        for box in self.inboxes:
            box.close()


_START_DELAY = 0.5
"""Seconds between the barrier and the broadcasts."""


def measure(
    *,
    nodes: int,
    workers: int,
    senders: int,
    events: int,
    config: Config,
    timeout: float,
    seed: int,
) -> dict[str, Any]:
    """Run the group and gather what the workers report (see :func:`print_report`)."""
    from epto.check import check

    from ._udp_worker import WorkerSpec

    total = senders * events
    specs = [
        WorkerSpec(
            pids=block,
            senders=tuple(pid for pid in block if pid < senders),
            events=events,
            total=total,
            config=config,
            seed=seed,
        )
        for block in blocks(nodes, workers)
    ]
    setup_limit = 60.0 + 0.2 * nodes  # spawning, importing, binding: generous
    started = time.monotonic()
    cpu_parent = time.process_time()
    pool = _Workers(specs)
    try:
        table: dict[int, str] = {}
        for addresses in pool.receive_all("bound", started + setup_limit):
            table.update(addresses)
        pool.send_all("table", table)
        pool.receive_all("ready", time.monotonic() + setup_limit)
        setup = time.monotonic() - started
        drops_before = _udp_drops()
        # The workers are idle until then: they all hear "go" before it is due.
        go = time.time() + _START_DELAY
        go_monotonic = time.monotonic() + _START_DELAY
        pool.send_all("go", go)
        done = pool.wait_done(go_monotonic + timeout)
        elapsed = time.monotonic() - go_monotonic
        pool.send_all("stop")
        # A starved worker hears "stop" as late as its loop lags (minutes, on
        # a busy machine, while the group is still gossiping): wait long.
        results: list[dict[str, Any]] = pool.receive_all("result", time.monotonic() + 900.0)
        drops_after = _udp_drops()
    finally:
        pool.close()
    sequences: dict[int, list[tuple[int, int]]] = {}
    broadcast_at: dict[tuple[int, int], float] = {}
    digests: dict[int, str] = {}
    for r in results:
        sequences.update(r["sequences"])
        broadcast_at.update(r["broadcast_at"])
        digests.update(r["digests"])
    latencies = [
        t - broadcast_at[eid]
        for r in results
        for pid, seq in r["sequences"].items()
        for eid, t in zip(seq, r["delivered_at"][pid], strict=True)
        if eid in broadcast_at
    ]
    report = check(sequences, broadcast=set(broadcast_at), staying=range(nodes))
    complete = all(t is not None for t in done)
    counters = {
        key: sum(r[key] for r in results)
        for key in (
            "datagrams_sent",
            "datagrams_received",
            "send_failures",
            "rejected",
            "holes_detected",
            "late_rejected",
            "deliveries_dropped",
        )
    }
    return {
        "nodes": nodes,
        "events": total,
        "setup": setup,
        "complete": complete,
        "elapsed": elapsed,
        "last_done": max((t - go for t in done if t is not None), default=None),
        "deliveries": sum(len(s) for s in sequences.values()),
        "missing": nodes * total - sum(len(s) for s in sequences.values()),
        "orders": len({d for pid, d in digests.items() if len(sequences[pid]) == total}),
        "latencies": sorted(latencies),
        "lags": sorted(lag for r in results for lag in r["lags"]),
        "rounds": max(r["rounds"] for r in results),
        "rounds_min": min(r["rounds_min"] for r in results),
        "workers": [
            {"nodes": len(spec.pids), "cpu": r["cpu"], "cpu_run": r["cpu_run"]}
            for spec, r in zip(specs, results, strict=True)
        ],
        # One worker is a thread of this process: its CPU time is not the parent's.
        "cpu_parent": time.process_time()
        - cpu_parent
        - (results[0]["cpu"] if workers == 1 else 0.0),
        "wall": time.monotonic() - started,
        "udp_drops": None
        if drops_before is None or drops_after is None
        else drops_after - drops_before,
        "report": report,
        "ok": report.ok and complete and not report.validity_violations,
        **counters,
    }


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def print_report(r: dict[str, Any], config: Config) -> None:
    from ._udp_worker import LAG_PERIOD

    n, total = r["nodes"], r["events"]
    print(f"setup {r['setup']:.2f} s (spawn, bind, address table, barrier)")
    if r["complete"]:
        print(f"all delivered: True, by the last worker after {r['last_done']:.2f} s")
    else:
        print("all delivered: False, not within the timeout")
    print(
        f"deliveries {r['deliveries']} of {n * total}; missing {r['missing']}; "
        f"holes the nodes detected {r['holes_detected']}"
    )
    print(
        f"rounds run per node: {r['rounds_min']} to {r['rounds']} of {config.round_interval} s "
        "(a round later than the next one's slot is skipped)"
    )
    lat = r["latencies"]
    print(
        "latency broadcast -> delivery, s: "
        + ", ".join(f"p{int(q * 100)} {_quantile(lat, q):.2f}" for q in (0.5, 0.9, 0.99))
        + f", max {lat[-1] if lat else float('nan'):.2f} ({len(lat)} deliveries)"
    )
    lags = r["lags"]
    late = sum(lags) / (sum(lags) + len(lags) * LAG_PERIOD) if lags else float("nan")
    print(
        f"event-loop lag (a {LAG_PERIOD} s sleep wakes late by), s: p50 "
        f"{_quantile(lags, 0.5):.3f}, p99 {_quantile(lags, 0.99):.3f}, "
        f"max {lags[-1] if lags else float('nan'):.3f}; late {late:.0%} of the time"
    )
    drops = "unknown" if r["udp_drops"] is None else str(r["udp_drops"])
    print(
        f"datagrams sent {r['datagrams_sent']}, received {r['datagrams_received']}, "
        f"send failures {r['send_failures']}, rejected {r['rejected']}, "
        f"late copies {r['late_rejected']}, deliveries dropped {r['deliveries_dropped']}; "
        f"kernel receive-buffer drops (whole host) {drops}"
    )
    for i, w in enumerate(r["workers"]):
        print(
            f"worker {i}: {w['nodes']} nodes, cpu {w['cpu']:.1f} s "
            f"({w['cpu'] / w['nodes']:.3f} s/node; from the broadcasts on {w['cpu_run']:.1f} s)"
        )
    cpu = sum(w["cpu"] for w in r["workers"])
    print(
        f"cpu total {cpu:.1f} s ({cpu / n:.3f} s/node) over {r['wall']:.1f} s wall; "
        f"parent {r['cpu_parent']:.1f} s"
    )
    print(f"distinct delivery orders among complete nodes: {r['orders']}")
    print(r["report"].summary())
