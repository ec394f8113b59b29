"""Pages that never read, against an editor replica (docs/security.md,
*Editor*). Not a test: it prints.

Three ``epto editor`` replicas on loopback (child processes). This process
opens ``--pages`` WebSocket pages to replica 1 that complete the handshake
and never read a byte, then one page that reads edits ``--edits`` times
(``PageModel``, what the browser page does). Before the silent pages, after
they connected and after the edits, it prints replica 1's resident memory
(``VmRSS``), the time a fresh ``GET /`` takes (median and max of
``--probes``), how many pages the replica refused or dropped (from the
answers: ``503`` on the handshake, a connection closed by the replica), and
whether the three replicas' pages end with the same text.

    python scripts/editor_silent_pages.py [--pages 2000] [--edits 290]
        [--max-pages 256] [--rcvbuf 0] [--mode epto]

``--max-pages`` is passed to the replicas (``epto editor --max-pages``);
``--rcvbuf B`` gives each silent page a receive buffer of B bytes (0: the
system's), so that the replica's queues, not the kernel's buffers, fill.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time

import trio
from epto.services._websocket import WebSocket, WebSocketClosed, connect_page
from epto.transports._ports import free_ports

from epto.apps._editor import PageModel
from epto.apps._ot import Insert
from epto.endpoint import parse_host_port


def start(mode: str, max_pages: int) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    kind = socket.SOCK_STREAM if mode == "token-ring" else socket.SOCK_DGRAM
    nodes = free_ports(3, kind)
    procs, urls = [], []
    for i in range(3):
        args = [sys.executable, "-m", "epto.cli", "editor", "--id", str(i + 1), "--mode", mode]
        args += ["--bind", f"127.0.0.1:{nodes[i]}", "--round-interval", "0.05"]
        args += ["--max-pages", str(max_pages)]
        args += [f"--peer={j + 1}=127.0.0.1:{nodes[j]}" for j in range(3) if j != i]
        procs.append(subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL))
    for proc in procs:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        if not line.startswith("ready "):
            raise SystemExit(f"an editor did not start: {line!r}")
        urls.append(line.split()[2])
    return procs, urls


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def get_page(host: str, port: int) -> float:
    """Seconds for a fresh connection to get the whole page (inf: no answer in 10 s)."""
    start = time.perf_counter()
    with trio.move_on_after(10):
        stream = await trio.open_tcp_stream(host, port)
        try:
            await stream.send_all(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            body = b""
            while chunk := await stream.receive_some(65536):
                body += chunk
        finally:
            await stream.aclose()
        if body.startswith(b"HTTP/1.1 200"):
            return time.perf_counter() - start
    return float("inf")


async def latency(host: str, port: int, probes: int) -> str:
    times = [await get_page(host, port) for _ in range(probes)]
    return f"GET / median {statistics.median(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms"


class Silent:
    """A page that handshakes and never reads."""

    def __init__(self) -> None:
        self.refused = 0
        self.opened: list[trio.SocketStream] = []

    async def open(self, url: str, rcvbuf: int) -> None:
        host, port = parse_host_port(url.split("/")[2])
        token = url.split("token=")[1]
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, rcvbuf)
        await sock.connect((host, port))
        stream = trio.SocketStream(sock)
        await stream.send_all(
            f"GET /ws?token={token} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        # Only the status line of the answer, then never read again.
        answer = await stream.receive_some(12)
        if answer.startswith(b"HTTP/1.1 101"):
            self.opened.append(stream)
        else:
            self.refused += 1
            await stream.aclose()


def established(port: int) -> int:
    """Connections of the replica's HTTP port that are open at its end
    (``/proc/net/tcp``: local port ``port``, state ESTABLISHED)."""
    count = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
                count += 1
    return count


async def typist(url: str) -> tuple[WebSocket, PageModel]:
    ws = await connect_page(url)
    return ws, PageModel()


async def read_page(ws: WebSocket, page: PageModel) -> None:
    try:
        while True:
            reply = page.receive(json.loads(await ws.receive()))
            if reply is not None:
                await ws.send(json.dumps(reply))
    except WebSocketClosed:
        pass


async def main(args: argparse.Namespace) -> None:
    procs, urls = start(args.mode, args.max_pages)
    try:
        host, port = parse_host_port(urls[0].split("/")[2])
        pid = procs[0].pid
        await trio.sleep(1)
        print(f"{args.mode}, max-pages {args.max_pages}, rcvbuf {args.rcvbuf or 'system'}")
        probe = await latency(host, port, args.probes)
        print(f"before:           RSS {rss_mib(pid):6.1f} MiB, {probe}")
        # The typist and the readers of replicas 2 and 3 first (the room is theirs).
        pages = [await typist(url) for url in urls]
        async with trio.open_nursery() as nursery:
            for ws, page in pages:
                nursery.start_soon(read_page, ws, page)
            with trio.fail_after(30):
                while not all(page.rev for _, page in pages):
                    await trio.sleep(0.01)
            silent = Silent()
            start_time = time.perf_counter()
            limiter = trio.CapacityLimiter(200)

            async def one() -> None:
                async with limiter:
                    try:
                        await silent.open(urls[0], args.rcvbuf)
                    except OSError:
                        silent.refused += 1

            async with trio.open_nursery() as openers:
                for _ in range(args.pages):
                    openers.start_soon(one)
            took = time.perf_counter() - start_time
            print(
                f"{len(silent.opened)} silent pages open, {silent.refused} refused "
                f"(in {took:.1f} s)"
            )
            probe = await latency(host, port, args.probes)
            print(f"silent pages in:  RSS {rss_mib(pid):6.1f} MiB, {probe}")
            ws, page = pages[0]
            for i in range(args.edits):
                with trio.fail_after(30):  # one edit in flight: a typist at the replica's pace
                    while not page.synced:
                        await trio.sleep(0.001)
                message = page.local((Insert(0, f"w{i} "),))
                if message is not None:
                    await ws.send(json.dumps(message))
                await trio.sleep(args.interval)
            with trio.fail_after(60):
                while True:
                    texts = {p.text for _, p in pages}
                    if len(texts) == 1 and all(p.synced for _, p in pages):
                        break
                    await trio.sleep(0.05)
            words = len(pages[1][1].text.split())
            print(
                f"after {args.edits} edits: RSS {rss_mib(pid):6.1f} MiB, "
                f"{await latency(host, port, args.probes)}"
            )
            # Both ends of every connection are in this machine's table: the
            # replica's end of a page it dropped is no longer established.
            open_pages = established(port) - 1  # the typist
            print(
                f"silent pages the replica dropped: {len(silent.opened) - open_pages} of "
                f"{len(silent.opened)}; the three pages hold the same text ({words} words, "
                f"{len(page.not_sent)} resets that dropped edits)"
            )
            for stream in silent.opened:
                await stream.aclose()
            for ws, _ in pages:
                await ws.aclose()
            nursery.cancel_scope.cancel()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.communicate(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--edits", type=int, default=290)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between edits")
    parser.add_argument("--max-pages", type=int, default=256)
    parser.add_argument("--rcvbuf", type=int, default=0)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--mode", choices=("epto", "token-ring"), default="epto")
    trio.run(main, parser.parse_args())
