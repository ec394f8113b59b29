"""Free loopback ports for local clusters (the demo, tests, benchmarks)."""

from __future__ import annotations

import socket


def free_ports(n: int, kind: int = socket.SOCK_DGRAM) -> list[int]:
    """``n`` distinct ports the kernel just handed out on 127.0.0.1.

    They are bound together (so they differ) and released before returning;
    a node binding them a moment later could in principle lose a race, which
    is acceptable for loopback clusters on one machine.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, kind)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
