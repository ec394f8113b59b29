"""Figures of the replicated editor (docs/editor.md). Not a test: it prints.

``latency``: three ``epto editor`` replicas on loopback (child processes),
one WebSocket page each (this process, ``PageModel``, what the browser page
does). Page 1 types one character every ``--interval`` seconds at the end of
the text; the time from the keystroke to its appearance in pages 2 and 3 is
recorded (p50, p99, max), for each engine.

    python scripts/bench_editor.py latency [--keys 300] [--interval 0.05]
        [--round-interval 0.125] [--modes token-ring,epto]

``memory``: one replica's document after ``--ops`` operations of three
authors (each written on a version a few operations old, as concurrent
authors do) and of a fourth that edits once at the start and goes silent,
applied in order as deliveries are; the bytes it holds (``tracemalloc``),
with history collection (the default ``--horizon``: the silent author is
forgotten after that many operations) and without (a horizon larger than
the run: the silent author's ref keeps every operation).

    python scripts/bench_editor.py memory [--ops 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import time
import tracemalloc

import trio
from epto.services._websocket import connect_page
from epto.transports._ports import free_ports

from epto.apps._editor import PageModel
from epto.apps._ot import Insert
from epto.apps.text import TextDocument


def start(mode: str, round_interval: float) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    kind = socket.SOCK_STREAM if mode == "token-ring" else socket.SOCK_DGRAM
    nodes = free_ports(3, kind)
    procs, urls = [], []
    for i in range(3):
        args = [sys.executable, "-m", "epto.cli", "editor", "--id", str(i + 1), "--mode", mode]
        args += ["--bind", f"127.0.0.1:{nodes[i]}", "--round-interval", str(round_interval)]
        args += [f"--peer={j + 1}=127.0.0.1:{nodes[j]}" for j in range(3) if j != i]
        procs.append(subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL))
    for proc in procs:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        if not line.startswith("ready "):
            raise SystemExit(f"an editor did not start: {line!r}")
        urls.append(line.split()[2])
    return procs, urls


async def measure(urls: list[str], keys: int, interval: float) -> list[float]:
    pages = []
    for url in urls:
        pages.append((await connect_page(url), PageModel()))
    sent: list[float] = []
    latencies: list[float] = []

    async def reader(index: int) -> None:
        ws, page = pages[index]
        seen = 0
        while True:
            reply = page.receive(json.loads(await ws.receive()))
            if reply is not None:
                await ws.send(json.dumps(reply))
            if index:
                now = time.perf_counter()
                while seen < len(page.text) and seen < len(sent):
                    latencies.append(now - sent[seen])
                    seen += 1

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(reader, i)
        with trio.fail_after(10):
            while not all(page.rev for _, page in pages):
                await trio.sleep(0.01)
        ws, page = pages[0]
        for _ in range(keys):
            sent.append(time.perf_counter())
            message = page.local((Insert(len(page.text), "x"),))
            if message is not None:
                await ws.send(json.dumps(message))
            await trio.sleep(interval)
        with trio.fail_after(60):
            while len(latencies) < 2 * keys:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    for ws, _ in pages:
        await ws.aclose()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(args: argparse.Namespace) -> None:
    for mode in args.modes.split(","):
        procs, urls = start(mode, args.round_interval)
        try:
            values = trio.run(measure, urls, args.keys, args.interval)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait()
        ms = [v * 1000 for v in values]
        print(
            f"{mode:10s} round {args.round_interval:g} s, {args.keys} keys every "
            f"{args.interval * 1000:g} ms: p50 {percentile(ms, 0.5):.1f} ms, "
            f"p99 {percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms"
        )


def document_bytes(ops: int, horizon: int, seed: int = 1) -> tuple[int, int, int]:
    rng = random.Random(seed)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    doc = TextDocument(author=0, horizon=horizon)
    # An author that edits once and goes silent (a closed laptop): its ref
    # holds the floor at 0 until ``horizon`` operations have gone by.
    assert doc.edit(9, 0, 0, [["i", 0, "hi"]]) == "ok"
    for n in range(ops - 1):
        author = n % 3 + 1
        ref = max(doc.floor, doc.version - rng.randint(0, 3))
        length = len(doc.text)  # positions written on ref: kept inside the text either way
        if length > 2000 and rng.random() < 0.5:
            pos = rng.randrange(length - 10)
            raw = [["d", min(pos, 1000), rng.randint(1, 5)]]
        else:
            raw = [["i", rng.randint(0, min(length, 1000)), rng.choice(["a", "bc", "word "])]]
        assert doc.edit(author, n, ref, raw) == "ok"
        doc.take_changes()  # what the server pushes to its pages
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used, doc.history_size(), len(doc.text)


def memory(args: argparse.Namespace) -> None:
    for label, horizon in (
        (f"with collection (horizon {args.horizon})", args.horizon),
        ("without (horizon > run)", args.ops + 1),
    ):
        used, history, length = document_bytes(args.ops, horizon)
        print(
            f"{args.ops} operations, {label}: {used / 1e6:.1f} MB "
            f"({history} operations of history, a text of {length} characters)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("latency")
    p.add_argument("--keys", type=int, default=300)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--round-interval", type=float, default=0.125)
    p.add_argument("--modes", default="token-ring,epto")
    p.set_defaults(func=latency)
    m = sub.add_parser("memory")
    m.add_argument("--ops", type=int, default=100_000)
    m.add_argument("--horizon", type=int, default=10_000)
    m.set_defaults(func=memory)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
