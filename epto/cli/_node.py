"""``epto node``: run one EpTO node from the command line.

    epto node --transport trio --id 1 --bind 127.0.0.1:9001 \\
        --peer 2=127.0.0.1:9002 --peer 3=127.0.0.1:9003 --stdin

prints ``ready ID ADDRESS`` on stderr once bound, broadcasts each line read
from standard input (with ``--stdin``) and each ``--broadcast`` text, and
writes every delivery as one JSON line (``source``, ``seq``, ``ts``, ``tag``,
``payload`` as UTF-8 text when it decodes, else ``payload_b64``) to standard
output or ``--output``. It stops after ``--expect`` deliveries, after
``--duration`` seconds, at the end of standard input when neither is given,
or on Ctrl-C; stopping flushes this node's events (``--flush-timeout``).

``--mode token-ring`` runs a token-ring member over TCP instead (trio only;
the peers are the bootstrap members, the same list everywhere); ``--mode
auto`` picks the token ring for groups of at most 30 members.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import math
import sys
import threading
import time
from typing import Any, TextIO


def _transport(name: str) -> Any:
    # epto.transports is installed from transports/ (a package-dir mapping);
    # importing it by name keeps type checkers of epto/ from looking for it.
    return importlib.import_module(name)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "node",
        help="run one node of a group: EpTO over UDP (trio) or ZeroMQ, or the token ring over TCP",
        description="Run one node; deliveries are printed as JSON lines.",
    )
    p.add_argument("--transport", choices=("trio", "zmq"), default="trio")
    p.add_argument(
        "--mode",
        choices=("epto", "token-ring", "auto"),
        default="epto",
        help="EpTO over UDP/ZeroMQ, or the token ring over TCP (trio)",
    )
    p.add_argument(
        "--linger",
        type=float,
        default=1.0,
        help="token ring: seconds to keep serving the group after the last delivery",
    )
    p.add_argument("--id", type=int, required=True, help="this node's process id")
    p.add_argument("--bind", default="127.0.0.1:0", help="HOST:PORT to listen on")
    p.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="a member of the group (repeat for each)",
    )
    p.add_argument("--round-interval", type=float, default=0.05, help="seconds (default 0.05)")
    p.add_argument("--fanout", type=int, help="K (default: derived from the group size)")
    p.add_argument("--ttl", type=int, help="TTL (default: derived from the group size)")
    p.add_argument("--clock", choices=("logical", "global"), default="logical")
    p.add_argument("--tagged", action="store_true", help="deliver late events tagged")
    p.add_argument("--seed", type=int, help="seed of the peer choices")
    p.add_argument("--stdin", action="store_true", help="broadcast each line of stdin")
    p.add_argument("--broadcast", action="append", default=[], metavar="TEXT")
    p.add_argument("--expect", type=int, help="stop after this many deliveries")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--output", help="write deliveries to this file (default: stdout)")
    p.add_argument("--flush-timeout", type=float, default=5.0)
    p.add_argument(
        "--log-dir",
        help="also append every delivery to a crash-safe delivery log under this directory",
    )
    p.add_argument(
        "--group-key-file",
        help="seal every frame under this group key (epto keygen group, or 64 hex digits)",
    )
    p.add_argument("--group", type=int, default=0, help="group id carried by every frame")
    p.add_argument(
        "--cyclon",
        action="store_true",
        help="Cyclon partial views instead of a full view (peers are the seeds)",
    )
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> Any:
    import epto

    NodeConfig = _transport("epto.transports").NodeConfig

    members: dict[int, str] = {}
    for spec in args.peer:
        pid, sep, address = spec.partition("=")
        if not sep or not pid.isdigit():
            raise SystemExit(f"epto node: --peer wants ID=HOST:PORT, got {spec!r}")
        members[int(pid)] = address
    members[args.id] = args.bind
    protocol = None
    if args.fanout is not None or args.ttl is not None:
        derived = epto.Config.for_group(max(2, len(members)), clock=args.clock)
        protocol = epto.Config(
            fanout=args.fanout or derived.fanout,
            ttl=args.ttl or derived.ttl,
            round_interval=args.round_interval,
            clock=args.clock,
            tagged_delivery=args.tagged,
        )
    group_key = None
    if args.group_key_file:
        group_key = _read_key(args.group_key_file)
    return NodeConfig(
        pid=args.id,
        group=args.group,
        group_key=group_key,
        sampler=epto.CyclonConfig(shuffle_period=args.round_interval) if args.cyclon else "full",
        group_size=len(members) if not args.cyclon else None,
        bind=args.bind,
        members=members,
        epto=protocol,
        round_interval=args.round_interval,
        clock=args.clock,
        tagged_delivery=args.tagged,
        seed=args.seed,
        flush_timeout=args.flush_timeout,
    )


def _read_key(path: str) -> Any:
    """A group key from ``epto keygen group`` (JSON), or 32 raw bytes / 64 hex digits."""
    import epto

    with open(path, "rb") as f:
        raw = f.read().strip()
    if raw.startswith(b"{"):
        from epto.keys import load_group_key

        return load_group_key(path)
    if len(raw) == 64:
        try:
            return epto.GroupKey(key_id=1, secret=bytes.fromhex(raw.decode("ascii")))
        except ValueError:
            pass
    if len(raw) != 32:
        raise SystemExit(f"epto node: {path} must be a keygen file, 32 bytes or 64 hex digits")
    return epto.GroupKey(key_id=1, secret=raw)


class _Sink:
    """Where deliveries go: JSON lines, and the delivery log when asked."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.out = out
        self.log: Any = None
        if args.log_dir:
            from epto.log import DeliveryLogWriter

            self.log = DeliveryLogWriter(args.log_dir, args.id)

    def write(self, delivery: Any) -> None:
        print(_line(delivery), file=self.out, flush=True)
        if self.log is not None:
            from epto.log import micros

            self.log.append(delivery, delivered_at=micros(time.time()))

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def _line(delivery: Any) -> str:
    event = delivery.event
    record: dict[str, Any] = {
        "source": event.source,
        "seq": event.seq,
        "ts": event.ts,
        "tag": delivery.tag.value,
    }
    try:
        record["payload"] = event.payload.decode("utf-8")
    except UnicodeDecodeError:
        record["payload_b64"] = base64.b64encode(event.payload).decode("ascii")
    return json.dumps(record)


def _token_ring_config(args: argparse.Namespace, epto_config: Any) -> Any:
    module = _transport("epto.transports.trio_tcp")
    return module.TokenRingNodeConfig(
        pid=args.id,
        bind=args.bind,
        members=dict(epto_config.members),
        group=args.group,
        group_key=epto_config.group_key,
        seed=args.seed,
        flush_timeout=args.flush_timeout,
    )


def run(args: argparse.Namespace) -> int:
    from epto.tokenring import choose_mode

    config = _config(args)
    mode = choose_mode(len(config.members), args.mode)
    if mode == "token-ring":
        if args.transport != "trio" or args.cyclon:
            raise SystemExit("epto node: --mode token-ring runs on --transport trio, full view")
        config = _token_ring_config(args, config)
    out: TextIO = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    sink = _Sink(args, out)
    try:
        if args.transport == "trio":
            import trio

            trio.run(_run_trio, args, config, sink, mode)
        else:
            _run_zmq(args, config, sink)
    finally:
        sink.close()
        if out is not sys.stdout:
            out.close()
    return 0


async def _run_trio(args: argparse.Namespace, config: Any, sink: _Sink, mode: str) -> None:
    import trio

    if mode == "token-ring":
        TrioNode = _transport("epto.transports.trio_tcp").TokenRingNode
    else:
        TrioNode = _transport("epto.transports.trio_udp").TrioNode

    stdin_done = trio.Event()
    async with TrioNode(config) as node, trio.open_nursery() as nursery:
        print(f"ready {args.id} {node.address}", file=sys.stderr, flush=True)
        for text in args.broadcast:
            node.broadcast(text.encode())

        async def read_stdin() -> None:
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if not line:
                    break
                node.broadcast(line.rstrip("\n").encode())
            stdin_done.set()

        if args.stdin:
            nursery.start_soon(read_stdin)
        stop_on_eof = args.stdin and args.expect is None and args.duration is None
        if stop_on_eof:

            async def stop_at_eof() -> None:
                await stdin_done.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_at_eof)
        count = 0
        with trio.move_on_after(args.duration if args.duration is not None else math.inf):
            async for delivery in node:
                sink.write(delivery)
                count += 1
                if args.expect is not None and count >= args.expect:
                    break
        if mode == "token-ring":
            # The others may still wait for this member's order notices and
            # acknowledgements; leaving at once would look like a crash.
            await trio.sleep(args.linger)
        nursery.cancel_scope.cancel()


def _run_zmq(args: argparse.Namespace, config: Any, sink: _Sink) -> None:
    ZmqNode = _transport("epto.transports.zmq_node").ZmqNode

    stdin_done = threading.Event()
    with ZmqNode(config) as node:
        print(f"ready {args.id} {node.address}", file=sys.stderr, flush=True)
        for text in args.broadcast:
            node.broadcast(text.encode())

        def read_stdin() -> None:
            for line in sys.stdin:
                node.broadcast(line.rstrip("\n").encode())
            stdin_done.set()

        if args.stdin:
            threading.Thread(target=read_stdin, daemon=True).start()
        stop_on_eof = args.stdin and args.expect is None and args.duration is None
        deadline = time.monotonic() + (args.duration if args.duration is not None else math.inf)
        count = 0
        while time.monotonic() < deadline and not (stop_on_eof and stdin_done.is_set()):
            delivery = node.get(timeout=0.05)
            if delivery is None:
                continue
            sink.write(delivery)
            count += 1
            if args.expect is not None and count >= args.expect:
                break
