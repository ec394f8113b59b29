"""CPU one wake-up of a sleeping process costs, by how it sleeps.

    python scripts/wakeup_cost.py

Each loop sleeps ``--count`` times ``--period`` seconds and does nothing
else; printed: ``time.process_time()`` spent per wake-up (the kernel's share
included). A thread's ``time.sleep`` is how PySyncObj's threads wait, trio
is how the trio nodes wait: a timeout (``trio.sleep``, a cancelled scope) or
a socket that becomes readable (written by another thread, whose own cost,
measured alone, is taken off).
"""

from __future__ import annotations

import argparse
import asyncio
import select
import socket
import threading
import time

import trio


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--period", type=float, default=0.02)
    args = p.parse_args()
    n, period = args.count, args.period

    def report(name: str, spent: float) -> None:
        print(f"{name:44} {1e6 * spent / n:6.0f} us per wake-up")

    start = time.process_time()
    for _ in range(n):
        time.sleep(period)
    report("time.sleep", time.process_time() - start)

    poller = select.epoll()
    start = time.process_time()
    for _ in range(n):
        poller.poll(period)
    report("select.epoll.poll", time.process_time() - start)
    poller.close()

    async def asyncio_loop() -> float:
        start = time.process_time()
        for _ in range(n):
            await asyncio.sleep(period)
        return time.process_time() - start

    report("asyncio.sleep", asyncio.run(asyncio_loop()))

    a, b = socket.socketpair()
    start = time.process_time()
    for _ in range(n):
        time.sleep(period)
        b.send(b"x")
        a.recv(1)
    writer_alone = time.process_time() - start

    def writer() -> None:
        for _ in range(n):
            time.sleep(period)
            b.send(b"x")

    async def trio_loop() -> tuple[float, float]:
        start = time.process_time()
        for _ in range(n):
            await trio.sleep(period)
        timeouts = time.process_time() - start
        sock = trio.socket.from_stdlib_socket(a)
        thread = threading.Thread(target=writer)
        start = time.process_time()
        thread.start()
        for _ in range(n):
            await sock.recv(1)
        thread.join()
        return timeouts, time.process_time() - start - writer_alone

    timeouts, readable = trio.run(trio_loop)
    report("trio.sleep (a timeout)", timeouts)
    report("trio, woken by a readable socket", readable)
    a.close()
    b.close()


if __name__ == "__main__":
    main()
