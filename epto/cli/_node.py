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
the peers are the bootstrap members, the same list everywhere, or ``--contact``
members through which a new identity joins); ``--mode auto`` picks the token
ring for groups of at most 30 members. The node is opened by the library's
:func:`epto.transports.trio_node.open_node` from one ``NodeConfig``.
``--group-key-file FILE`` seals every frame; ``--signing-key FILE`` signs
this node's events and ``--roster FILE`` verifies everyone's (the files of
``epto keygen``; secret files must be mode 0600, read by ``epto.keys``).
``--status FILE`` keeps a JSON status line in FILE (rewritten on change).
``--gateway HOST:PORT`` also runs the Spark sink's gateway
(:class:`epto.spark.Gateway`) beside the node, and prints
``gateway ID ADDRESS`` on standard error before the ready line;
``--gateway-token-file FILE`` gives its token.
``--serve-log HOST:PORT`` serves ``--log-dir`` to the Spark source's
``epto.servers`` (:mod:`epto.spark._logserver`), and prints
``log-server ID ADDRESS`` on standard error before the ready line; readers
prove they hold ``--serve-log-token-file``'s token, or by default one
derived from the group key.
A token-ring member excluded from the view exits with status 3 after printing
``excluded ID`` on standard error; a node that stops before its ``--expect``
deliveries exits with status 4 and says how many it had.

Size: one sub-command (about 600 lines): its options for both engines and
both transports, the configuration they build, the two run loops (trio and
ZeroMQ), the status file and the optional sink gateway, which share the sink
(in _sink.py), the optional log server and the exit statuses.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from functools import partial
from typing import Any, TextIO

from .._defaults import DEFAULT_CLOCK, DEFAULT_ROUND_INTERVAL
from ._args import peer_addresses, positive_float, positive_int
from ._sink import Sink

_SECONDS = f"seconds (default {DEFAULT_ROUND_INTERVAL:g}, as NodeConfig)"
_CLOCK = f"default {DEFAULT_CLOCK}, as NodeConfig and epto params"

EXIT_EXCLUDED = 3
"""Exit status of a token-ring member excluded from the view."""
EXIT_SHORT = 4
"""Exit status of a node that stopped (``--duration``, end of input) before
the ``--expect`` deliveries it was told to wait for."""


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
    p.add_argument(
        "--contact",
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="token ring: join a running group through this member (repeat); a new id",
    )
    for flag, what in (
        ("--token-hold", "seconds the holder keeps the token"),
        ("--token-timeout", "seconds without token progress before it is regenerated"),
        ("--suspect-timeout", "seconds of silence before a core member is demoted"),
        ("--exclude-timeout", "seconds of silence before a member is excluded"),
    ):
        p.add_argument(flag, type=float, help=f"token ring: {what} (default: TokenRingConfig)")
    p.add_argument(
        "--optimistic",
        choices=("optimal", "fast-seto", "seto", "none"),
        help="token ring: also deliver optimistically, with delays from this planner "
        "(docs/optimistic.md); deliveries are tagged optimistic, then final",
    )
    p.add_argument(
        "--status",
        metavar="FILE",
        help="keep one JSON status line in FILE (pid, mode, holds_token, view, delivered, ...)",
    )
    p.add_argument(
        "--status-interval",
        type=float,
        default=0.02,
        help="seconds between two checks of the status (default 0.02)",
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
    p.add_argument("--round-interval", type=float, default=DEFAULT_ROUND_INTERVAL, help=_SECONDS)
    p.add_argument("--fanout", type=positive_int, help="K (default: derived from the group size)")
    p.add_argument("--ttl", type=positive_int, help="TTL (default: derived from the group size)")
    p.add_argument("--clock", choices=("logical", "global"), default=DEFAULT_CLOCK, help=_CLOCK)
    p.add_argument("--tagged", action="store_true", help="deliver late events tagged")
    p.add_argument("--seed", type=int, help="seed of the peer choices")
    p.add_argument("--stdin", action="store_true", help="broadcast each line of stdin")
    p.add_argument("--broadcast", action="append", default=[], metavar="TEXT")
    p.add_argument(
        "--expect",
        type=positive_int,
        help="stop after this many deliveries (final ones with --optimistic; exit status 4 "
        "if the node stops before)",
    )
    p.add_argument("--duration", type=positive_float, help="stop after this many seconds")
    p.add_argument("--output", help="write deliveries to this file (default: stdout)")
    p.add_argument("--flush-timeout", type=float, default=5.0)
    p.add_argument(
        "--log-dir",
        help="also append every delivery to a crash-safe delivery log under this directory "
        "(created if missing; its parent must exist)",
    )
    p.add_argument(
        "--group-key-file",
        metavar="FILE",
        help="seal every frame under this group key (epto keygen group, 64 hex digits "
        "or exactly 32 raw bytes; mode 0600)",
    )
    p.add_argument(
        "--signing-key",
        metavar="FILE",
        help="sign this node's events with this Ed25519 key (epto keygen signing; mode 0600)",
    )
    p.add_argument(
        "--roster",
        metavar="FILE",
        help="verify every event against this roster of public keys (epto keygen roster); "
        "events that do not verify are refused",
    )
    p.add_argument("--group", type=int, default=0, help="group id carried by every frame")
    p.add_argument(
        "--gateway",
        metavar="HOST:PORT",
        help="also run the Spark sink's gateway on this address (port 0 picks one; trio "
        "only; prints 'gateway ID ADDRESS' on stderr before the ready line)",
    )
    p.add_argument(
        "--gateway-token-file",
        metavar="FILE",
        help="the gateway's token: this file's content, surrounding whitespace removed "
        "(at most 256 bytes; a regular file of mode 0600)",
    )
    p.add_argument(
        "--serve-log",
        metavar="HOST:PORT",
        help="also serve --log-dir to Spark's network source on this address (port 0 picks "
        "one; trio only; prints 'log-server ID ADDRESS' on stderr before the ready line)",
    )
    p.add_argument(
        "--serve-log-token-file",
        metavar="FILE",
        help="the log server's token, read as --gateway-token-file (default: derived from "
        "--group-key-file)",
    )
    p.add_argument(
        "--cyclon",
        action="store_true",
        help="Cyclon partial views instead of a full view (peers are the seeds)",
    )
    p.set_defaults(func=run)


def _ring_config(args: argparse.Namespace, group: int) -> Any:
    """The token-ring parameters: defaults, then the flags given.

    ``--token-hold`` without ``--token-timeout`` raises the token timeout to
    twice a full rotation (``2 x group x hold``) when that is above the
    default: a member sees the token progress once per rotation when the
    group is idle, and a shorter timeout would regenerate a live token.
    """
    import attrs

    from epto.tokenring import TokenRingConfig

    ring = TokenRingConfig()
    fields: dict[str, Any] = {}
    for name in ("token_hold", "token_timeout", "suspect_timeout", "exclude_timeout"):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    if "token_hold" in fields and "token_timeout" not in fields:
        fields["token_timeout"] = max(ring.token_timeout, 2 * group * fields["token_hold"])
    if args.optimistic is not None:
        from epto.optimistic import OptimisticConfig

        fields["optimistic"] = OptimisticConfig(planner=args.optimistic)
    return attrs.evolve(ring, **fields)


def _config(args: argparse.Namespace) -> Any:
    import epto
    from epto.transports import NodeConfig

    members = peer_addresses(args.peer, "--peer", "epto node")
    contacts = peer_addresses(args.contact, "--contact", "epto node")
    if not contacts:
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
    from epto import keys

    group_key = keys.load_group_key(args.group_key_file) if args.group_key_file else None
    signing_key = keys.load_signing_key(args.signing_key)[0] if args.signing_key else None
    roster = keys.load_roster(args.roster) if args.roster else None
    from epto.endpoint import parse_host_port

    # Every address of a socket transport is host:port: refuse a wrong one
    # here, in one line, rather than when the node first sends to it.
    for address in (args.bind, *members.values(), *contacts.values()):
        parse_host_port(address)
    config = NodeConfig(
        mode=args.mode,
        tokenring=_ring_config(args, max(2, len(members) + len(contacts))),
        contacts=contacts,
        pid=args.id,
        group=args.group,
        group_key=group_key,
        signing_key=signing_key,
        roster=roster,
        sampler=epto.CyclonConfig(shuffle_period=args.round_interval) if args.cyclon else "full",
        group_size=len(set(members) | set(contacts) | {args.id}) if not args.cyclon else None,
        bind=args.bind,
        members=members,
        epto=protocol,
        round_interval=args.round_interval,
        clock=args.clock,
        tagged_delivery=args.tagged,
        seed=args.seed,
        flush_timeout=args.flush_timeout,
        data_dir=args.log_dir,
    )
    config.protocol_config()  # the derived EpTO parameters: refuses a bad round interval
    return config


def run(args: argparse.Namespace) -> int:
    import epto

    from ._files import check_paths, os_error_line

    check_paths("epto node", args, new_files=("--output", "--status"), directories=("--log-dir",))
    try:
        config = _config(args)
        mode = config.resolved_mode()
    except epto.LocalProtocolError as exc:
        raise SystemExit(f"epto node: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"epto node: {os_error_line(exc)}") from None
    if mode == "token-ring" and args.transport != "trio":
        raise SystemExit("epto node: the token ring runs on --transport trio (TCP)")
    if args.gateway_token_file and not args.gateway:
        raise SystemExit("epto node: --gateway-token-file needs --gateway")
    if args.gateway and args.transport != "trio":
        raise SystemExit("epto node: --gateway runs on --transport trio")
    try:
        services = {
            "gateway": _gateway_options(args, config, mode),
            "log_server": _log_server_options(args, config),
        }
    except epto.LocalProtocolError as exc:
        raise SystemExit(f"epto node: {exc}") from None
    try:
        out: TextIO = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
        sink = Sink(args, out)
    except epto.MemberRunningError as exc:
        raise SystemExit(f"epto node: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"epto node: {os_error_line(exc)}") from None
    try:
        if args.transport == "trio":
            import trio

            status: int = trio.run(_run_trio, args, config, sink, services)
        else:
            _run_zmq(args, config, sink)
            status = 0
    except epto.MemberRunningError as exc:
        raise SystemExit(f"epto node: {exc}") from None
    finally:
        sink.close()
        if out is not sys.stdout:
            out.close()
    if status == 0 and args.expect is not None and sink.count < args.expect:
        print(
            f"epto node: stopped after {sink.count} of the {args.expect} deliveries expected",
            file=sys.stderr,
        )
        return EXIT_SHORT
    return status


def _token_file(path: str, what: str, limit: int) -> bytes:
    """A token read as key files are (a regular file that only its owner can
    access), stripped, and 1 to ``limit`` bytes long."""
    from epto import ConfigurationError
    from epto.wire._keys import _read

    token = _read(path, secret=True).strip()
    if not token or len(token) > limit:
        raise ConfigurationError(f"{path}: {what} is 1 to {limit} bytes, got {len(token)}")
    return token


def _log_server_options(args: argparse.Namespace, config: Any) -> dict[str, Any] | None:
    """The log server's keyword arguments (None without ``--serve-log``)."""
    if args.serve_log_token_file and not args.serve_log:
        raise SystemExit("epto node: --serve-log-token-file needs --serve-log")
    if not args.serve_log:
        return None
    if args.transport != "trio":
        raise SystemExit("epto node: --serve-log runs on --transport trio")
    if not args.log_dir:
        raise SystemExit("epto node: --serve-log needs --log-dir (the logs it serves)")
    from epto.endpoint import parse_host_port
    from epto.spark._logproto import MAX_TOKEN, group_token

    parse_host_port(args.serve_log)
    if args.serve_log_token_file:
        token = _token_file(args.serve_log_token_file, "a log server token", MAX_TOKEN)
    elif config.group_key is not None:
        token = group_token(config.group_key.secret)
    else:
        raise SystemExit(
            "epto node: --serve-log needs --serve-log-token-file or --group-key-file "
            "(readers prove they hold one)"
        )
    return {"root": args.log_dir, "bind": args.serve_log, "token": token}


def _gateway_options(args: argparse.Namespace, config: Any, mode: str) -> dict[str, Any] | None:
    """The sink gateway's keyword arguments (None without ``--gateway``):
    its address, the token from ``--gateway-token-file`` (read as key files
    are: a regular file that only its owner can access) and, as its largest
    event, the node's own ``Limits.max_payload_size``."""
    if not args.gateway:
        return None
    from epto.endpoint import parse_host_port
    from epto.spark._client import MAX_TOKEN

    parse_host_port(args.gateway)
    token = b""
    if args.gateway_token_file:
        token = _token_file(args.gateway_token_file, "a gateway token", MAX_TOKEN)
    if mode == "token-ring":
        from epto.transports.trio_tcp import TokenRingNode

        limits = TokenRingNode.stream_limits(config)
    else:
        limits = config.limits
    return {"bind": args.gateway, "token": token, "max_payload": limits.max_payload_size}


async def _run_trio(
    args: argparse.Namespace, config: Any, sink: Sink, services: dict[str, Any]
) -> int:
    import trio

    from epto import SupersededError
    from epto.transports.trio_node import open_node
    from epto.transports.trio_tcp import MemberExcludedError, TokenRingNode
    from epto.transports.trio_udp import UdpNode

    stdin_done = trio.Event()
    excluded = False
    deadline = trio.current_time() + (args.duration if args.duration is not None else math.inf)
    async with open_node(config) as node, trio.open_nursery() as nursery:
        if args.log_dir and isinstance(node, UdpNode):
            # A restart on its own log: the order resumes after what the
            # member delivered before (docs/node.md, *Restart*).
            node.engine.resume_after(_logged_ts(args))
        # Token ring restarted on its own log: the group admits this start
        # back (a later incarnation) and it delivers from its entry on; any
        # position the log already holds is not written twice.
        ring_logged = _ring_logged(args) if isinstance(node, TokenRingNode) else -1
        gateway = None
        gateway_options = services["gateway"]
        log_server = services["log_server"]
        if log_server is not None:
            from epto.spark._logserver import LogServer

            address = await nursery.start(LogServer(**log_server).run)
            print(f"log-server {args.id} {address}", file=sys.stderr, flush=True)
        if gateway_options is not None:
            # The node's delivery stream stays here: each delivery goes to
            # the gateway (its acknowledgements) and then to the sink.
            from epto.spark import Gateway

            gateway = Gateway(node, **gateway_options)
            address = await nursery.start(partial(gateway.run, pump=False))
            print(f"gateway {args.id} {address}", file=sys.stderr, flush=True)
        print(_ready_line(args.id, node), file=sys.stderr, flush=True)
        if args.status:
            nursery.start_soon(_write_status, node, args.status, args.status_interval)
        if config.contacts:
            # A joining member may broadcast once the group has admitted it.
            # (NodeConfig accepts contacts for the token ring only.)
            assert isinstance(node, TokenRingNode)
            ring = node
            with trio.move_on_at(deadline):
                while ring.statistics().role == "joining":
                    await trio.sleep(0.01)
            if ring.statistics().role not in ("core", "external"):
                print(f"epto node: {args.id} not admitted", file=sys.stderr, flush=True)
                nursery.cancel_scope.cancel()
                return 1
            print(f"joined {args.id}", file=sys.stderr, flush=True)
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
        with trio.move_on_at(deadline):
            try:
                async for delivery in node:
                    if gateway is not None:
                        gateway.delivered(delivery)
                    if delivery.event.ts <= ring_logged:
                        continue
                    sink.write(delivery)
                    if args.expect is not None and sink.count >= args.expect:
                        break
            except SupersededError as exc:
                # A later start of this member runs: it is the member now.
                print(f"superseded {args.id}: {exc}", file=sys.stderr, flush=True)
                excluded = True
            except MemberExcludedError as exc:
                print(f"excluded {args.id}: {exc}", file=sys.stderr, flush=True)
                excluded = True
        if node.mode == "token-ring" and not excluded:
            # The others may still wait for this member's order notices and
            # acknowledgements; leaving at once would look like a crash.
            await trio.sleep(args.linger)
        nursery.cancel_scope.cancel()
    return EXIT_EXCLUDED if excluded else 0


def _ring_logged(args: argparse.Namespace) -> int:
    """The last position of the total order this token-ring member's log
    holds (-1 without a log, or with an empty one)."""
    if not args.log_dir:
        return -1
    from epto.log import log_extent, node_directory

    directory = node_directory(args.log_dir, args.id)
    if not os.path.isdir(directory):
        return -1
    extent = log_extent(directory)
    return _logged_ts(args) if extent.end > extent.first else -1


def _ready_line(pid: int, node: Any) -> str:
    """``ready ID ADDRESS incarnation N``: the incarnation gives this start's
    event ids (``N << 32 | k`` for its k-th broadcast, docs/node.md *Restart*)."""
    incarnation = getattr(node, "incarnation", None)
    tail = "" if incarnation is None else f" incarnation {incarnation}"
    return f"ready {pid} {node.address}{tail}"


def _logged_ts(args: argparse.Namespace) -> int:
    """The last timestamp this member's delivery log holds in the order."""
    from epto.log import last_ordered_ts, node_directory

    return last_ordered_ts(node_directory(args.log_dir, args.id))


def _status(node: Any) -> dict[str, Any]:
    stats = node.statistics()
    status: dict[str, Any] = {
        "pid": node.pid,
        "mode": node.mode,
        "address": node.address,
        "broadcasts": stats.broadcasts,
        "delivered": stats.delivered,
    }
    if node.mode == "token-ring":
        status.update(
            role=stats.role,
            holds_token=stats.holds_token,
            view=stats.view,
            instance=stats.instance,
            core=list(stats.core),
            members=list(stats.members),
            quorum=stats.quorum,
            incarnation=stats.incarnation,
        )
    return status


async def _write_status(node: Any, path: str, interval: float) -> None:
    """Rewrite ``path`` (atomically: a temporary file renamed over it) with the
    node's status whenever it changes. ``updated`` is the wall time of the
    write; ``token_since`` the wall time at which this member was first seen
    holding the token it holds (null when it holds none)."""
    import trio

    last: dict[str, Any] | None = None
    token_since: float | None = None
    tmp = f"{path}.tmp"
    while True:
        status = _status(node)
        holds = bool(status.get("holds_token"))
        token_since = (token_since or time.time()) if holds else None
        if status != last:
            last = status
            line = json.dumps({**status, "token_since": token_since, "updated": time.time()})
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(line + "\n")
            os.replace(tmp, path)
        await trio.sleep(interval)


def _run_zmq(args: argparse.Namespace, config: Any, sink: Sink) -> None:
    from epto.transports.zmq_node import ZmqNode

    stdin_done = threading.Event()
    node = ZmqNode(config)
    if args.log_dir:
        node.engine.resume_after(_logged_ts(args))
    with node:
        print(_ready_line(args.id, node), file=sys.stderr, flush=True)
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
        while time.monotonic() < deadline and not (stop_on_eof and stdin_done.is_set()):
            delivery = node.get(timeout=0.05)
            if delivery is None:
                continue
            sink.write(delivery)
            if args.expect is not None and sink.count >= args.expect:
                break
