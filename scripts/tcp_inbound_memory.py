"""Resident memory of a TCP token-ring node under connections that never
authenticate. Not a test: it prints figures.

Starts one sealed single-member node in a child process, then from this
process opens ``--idle`` connections that send nothing, then ``--frames``
connections that each announce a 1 MiB frame and send all of it but its last
byte, and prints the node's VmRSS (``/proc/PID/status``) at each step with the
node's own counters when it has them.

    .venv/bin/python scripts/tcp_inbound_memory.py [--idle 500] [--frames 150]
        [--max-connections N --per-address N --handshake-timeout S]

Against the code before the change (``git archive`` of it in /tmp/old):
``cd /tmp/old && PYTHONPATH=/tmp/old python /path/to/this/script``; options
the old configuration does not know are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time

import trio

MIB = 1 << 20


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def serve(options: dict[str, float], out: str) -> None:
    import attrs
    from epto.transports.trio_tcp import TcpNodeConfig, TokenRingNode

    from epto import GroupKey
    from epto.endpoint import NodeConfig

    known = attrs.fields_dict(TcpNodeConfig)
    config = NodeConfig(
        pid=1,
        members={1: "127.0.0.1:1"},
        mode="token-ring",
        group=7,
        group_key=GroupKey(key_id=1, secret=bytes(range(32))),
    )
    tcp = TcpNodeConfig(**{k: v for k, v in options.items() if k in known})
    async with TokenRingNode(config, tcp=tcp) as node:
        while True:
            stats = node.statistics()
            extra = {
                k: getattr(stats, k)
                for k in ("connections_refused", "inbound_streams", "inbound_buffered")
                if hasattr(stats, k)
            }
            with open(out + ".tmp", "w") as f:
                json.dump({"address": node.address, **extra}, f)
            os.replace(out + ".tmp", out)
            await trio.sleep(0.2)


async def attack(args: argparse.Namespace) -> None:
    options = {}
    if args.max_connections:
        options["max_connections"] = args.max_connections
    if args.per_address:
        options["max_connections_per_address"] = args.per_address
    if args.handshake_timeout:
        options["handshake_timeout"] = args.handshake_timeout
    out = f"/tmp/tcp_inbound_memory.{os.getpid()}.json"
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", json.dumps(options), "--out", out]
    )
    try:
        while not os.path.exists(out):
            await trio.sleep(0.05)
        await trio.sleep(1.0)

        def state() -> dict[str, object]:
            with open(out) as f:
                return dict(json.load(f))

        host, port = state()["address"].rsplit(":", 1)  # type: ignore[union-attr]
        print(f"baseline: {rss_kib(child.pid) / 1024:.1f} MiB")
        streams = []
        for _ in range(args.idle):
            streams.append(await trio.open_tcp_stream(host, int(port)))
        await trio.sleep(2.0)
        info = {k: v for k, v in state().items() if k != "address"}
        print(f"after {args.idle} idle: {rss_kib(child.pid) / 1024:.1f} MiB {info}")
        body = bytes(MIB - 1)
        for _ in range(args.frames):
            stream = await trio.open_tcp_stream(host, int(port))
            streams.append(stream)
            try:
                with trio.move_on_after(2.0):
                    await stream.send_all(struct.pack(">I", MIB) + body)
            except trio.BrokenResourceError:
                pass  # refused
        await trio.sleep(2.0)
        info = {k: v for k, v in state().items() if k != "address"}
        print(
            f"after {args.frames} unfinished 1 MiB frames: "
            f"{rss_kib(child.pid) / 1024:.1f} MiB {info}"
        )
        for stream in streams:
            stream.socket.close()
    finally:
        child.terminate()
        child.wait()
        if os.path.exists(out):
            os.remove(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--max-connections", type=int, default=0)
    parser.add_argument("--per-address", type=int, default=0)
    parser.add_argument("--handshake-timeout", type=float, default=0.0)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        trio.run(serve, json.loads(args.serve), args.out)
    else:
        started = time.monotonic()
        trio.run(attack, args)
        print(f"({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
