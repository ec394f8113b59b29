"""``epto editor``: one replica of a shared plain text, edited in a browser.

    epto editor --id 1 --bind 127.0.0.1:9001 --peer 2=127.0.0.1:9002 \\
        --transfer 127.0.0.1:9101 --peer-transfer 2=127.0.0.1:9102 \\
        --presence 127.0.0.1:9201 --peer-presence 2=127.0.0.1:9202 --http 127.0.0.1:8001

prints ``ready ID URL`` on standard error once the page is served (open the
URL: it carries the token a page must present, ``?token=...``), then runs
until Ctrl-C or ``--duration``. A replica excluded from the group, or
superseded by another start of its id, says so in one line (``excluded ID:
...``, ``superseded ID: ...``) and exits with status 3, like ``epto node``; one
stopped by a fault says so in one line and exits with status 1. Its pages
are told why (docs/editor.md, *Access*). ``--bot N`` types N random
edits at ``--bot-rate`` per second (a demo, a load); ``--join`` starts empty
and fetches the text from the ``--peer-transfer`` replicas; ``--data-dir DIR``
keeps the text on disk, so that the replica started again with the same id
and directory is itself again (docs/editor.md, *Restart a replica*).
Needs the ``editor`` extra (``pip install 'epto[editor]'``: trio and wsproto).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from .._defaults import DEFAULT_ROUND_INTERVAL
from ._args import non_negative_int, peer_addresses, positive_float, positive_int


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "editor",
        help="one replica of a shared text, edited in a web page (docs/editor.md)",
        description="Run one replica of a replicated plain text and serve its web page.",
    )
    p.add_argument("--id", type=int, required=True, help="this replica's process id")
    p.add_argument("--bind", default="127.0.0.1:0", help="HOST:PORT of the node")
    p.add_argument("--peer", action="append", default=[], metavar="ID=HOST:PORT")
    p.add_argument(
        "--contact",
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="token ring: join a running group through this member (a new id)",
    )
    p.add_argument("--mode", choices=("epto", "token-ring", "auto"), default="epto")
    p.add_argument("--round-interval", type=positive_float, default=DEFAULT_ROUND_INTERVAL)
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--transfer",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where this replica serves its state to newcomers (TCP)",
    )
    p.add_argument("--peer-transfer", action="append", default=[], metavar="ID=HOST:PORT")
    p.add_argument("--join", action="store_true", help="start empty, fetch the text")
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep the text's log and snapshots (and this member's incarnation) in DIR; "
        "started again with the same --id and DIR, the replica is itself again "
        "(docs/editor.md, Restart a replica); created if missing, its parent must exist",
    )
    p.add_argument(
        "--audit-interval",
        type=positive_float,
        default=5.0,
        metavar="S",
        help="seconds between two comparisons of this replica's digest with a peer's "
        "(with --peer-transfer; default 5)",
    )
    p.add_argument(
        "--http",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where the page is served (default: a free port on 127.0.0.1)",
    )
    p.add_argument(
        "--presence",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="UDP address of this replica's cursor datagrams",
    )
    p.add_argument("--peer-presence", action="append", default=[], metavar="ID=HOST:PORT")
    p.add_argument("--name", default="", help="the name shown next to this replica's cursor")
    p.add_argument(
        "--horizon",
        type=positive_int,
        default=10_000,
        help="operations of history kept (default 10000)",
    )
    p.add_argument(
        "--bot",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="type N random edits (a demo, a load)",
    )
    p.add_argument(
        "--bot-rate",
        type=positive_float,
        default=5.0,
        metavar="R",
        help="the bot's edits per second (default 5)",
    )
    p.add_argument(
        "--group-key-file",
        metavar="FILE",
        help="seal every frame, presence datagram and state transfer under this group key "
        "(epto keygen group; mode 0600)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name (NAME or NAME:PORT) pages may use to reach this replica, besides "
        "IP addresses and localhost (a TLS proxy's public name; docs/editor.md, Access)",
    )
    p.add_argument(
        "--max-pages",
        type=positive_int,
        default=256,
        metavar="N",
        help="pages connected at once; more are refused (default 256)",
    )
    p.add_argument("--duration", type=positive_float, help="stop after this many seconds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import trio

        from epto.services.trio_editor import EditorConfig, EditorServer
    except ImportError as exc:  # pragma: no cover - without the extra
        if (exc.name or "").partition(".")[0] not in ("trio", "wsproto"):
            raise
        print(f"epto editor: needs the editor extra ({exc})", file=sys.stderr)
        return 1
    import attrs

    from epto import LocalProtocolError
    from epto.endpoint import NodeConfig, parse_host_port
    from epto.services.trio_rsm import ReplicaConfig

    from ._files import check_paths

    check_paths("epto editor", args, directories=("--data-dir",))

    members = peer_addresses(args.peer, "--peer", "epto editor")
    contacts = peer_addresses(args.contact, "--contact", "epto editor")
    if not contacts:
        members[args.id] = args.bind
    transfers = peer_addresses(args.peer_transfer, "--peer-transfer", "epto editor")
    presence = peer_addresses(args.peer_presence, "--peer-presence", "epto editor")
    for address in (
        args.bind,
        args.http,
        args.presence,
        args.transfer,
        *members.values(),
        *contacts.values(),
        *transfers.values(),
        *presence.values(),
    ):
        try:
            parse_host_port(address)
        except LocalProtocolError as exc:
            print(f"epto editor: {exc}", file=sys.stderr)
            return 2
    from epto import keys

    group_key = keys.load_group_key(args.group_key_file) if args.group_key_file else None
    node = NodeConfig(
        group_key=group_key,
        mode=args.mode,
        pid=args.id,
        bind=args.bind,
        members=members,
        contacts=contacts,
        round_interval=args.round_interval,
        seed=args.seed,
    )
    replica = ReplicaConfig(
        transfer_bind=args.transfer,
        peers=transfers,
        data_dir=args.data_dir,
        audit_interval=args.audit_interval if transfers else math.inf,
    )
    if args.join:
        # Without --join: the replica's default (restore what DIR holds, then
        # make sure with the peers that nothing is missing).
        replica = attrs.evolve(replica, joining=True)
    config = EditorConfig(
        http=args.http,
        presence=args.presence,
        presence_peers=presence,
        name=args.name,
        horizon=args.horizon,
        bot=args.bot,
        bot_rate=args.bot_rate,
        bot_seed=args.seed,
        replica=replica,
        allowed_hosts=tuple(args.allow_host),
        max_pages=args.max_pages,
    )

    async def main() -> None:
        async with EditorServer(node, config) as server:
            print(f"ready {args.id} {server.url}", file=sys.stderr, flush=True)
            with trio.move_on_after(args.duration if args.duration else math.inf):
                await trio.sleep_forever()
            server.stop_reason = f"replica {args.id} stopped (its --duration ended)"

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # one line on the terminal, never a traceback
        return _report(exc, args.id)
    return 0


def _report(exc: BaseException, pid: int) -> int:
    """One line on standard error for what stopped the replica; the exit
    status (3: excluded or superseded, as ``epto node``; 1: anything else)."""
    import trio

    from epto import LocalProtocolError, SupersededError
    from epto.transports.trio_node import MemberExcludedError

    from ._node import EXIT_EXCLUDED

    found: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            found.append(e)

    walk(exc)
    for e in found:
        if isinstance(e, SupersededError):
            print(f"superseded {pid}: {_line(e)}", file=sys.stderr, flush=True)
            return EXIT_EXCLUDED
        if isinstance(e, MemberExcludedError):
            print(f"excluded {pid}: {_line(e)}", file=sys.stderr, flush=True)
            return EXIT_EXCLUDED
    if any(isinstance(e, KeyboardInterrupt) for e in found):
        return 130
    first = next((e for e in found if not isinstance(e, trio.Cancelled)), found[0])
    if isinstance(first, LocalProtocolError):  # another process runs this member, a bad directory
        print(f"epto editor: {_line(first)}", file=sys.stderr, flush=True)
    else:
        fault = f"{type(first).__name__}: {_line(first)}"
        print(
            f"epto editor: replica {pid} stopped on a fault: {fault}", file=sys.stderr, flush=True
        )
    return 1


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
