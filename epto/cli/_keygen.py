"""``epto keygen``: group keys, Ed25519 signing key pairs and rosters."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "keygen",
        help="create group keys, signing key pairs and rosters of public keys",
        description=(
            "Create key files. Secret files are written with mode 0600, atomically, "
            "and never overwrite an existing file unless --force is given."
        ),
    )
    what = p.add_subparsers(dest="what", metavar="WHAT", required=True)

    g = what.add_parser("group", help="a group key for frame encryption")
    g.add_argument("path", help="file to create (mode 0600)")
    g.add_argument("--key-id", type=int, default=1, help="key id on the wire, 1..255")
    g.add_argument(
        "--cipher",
        choices=("aes-256-gcm", "chacha20-poly1305"),
        default="aes-256-gcm",
        help="AEAD (default: aes-256-gcm, faster with AES instructions)",
    )
    g.add_argument("--force", action="store_true", help="overwrite an existing file")
    g.set_defaults(func=run)

    s = what.add_parser("signing", help="an Ed25519 key pair for event signatures")
    s.add_argument("path", help="private key file (0600); the public key goes to PATH.pub")
    s.add_argument("--pid", type=int, default=None, help="process id recorded in PATH.pub")
    s.add_argument("--force", action="store_true", help="overwrite existing files")
    s.set_defaults(func=run)

    r = what.add_parser("roster", help="a roster of public keys from .pub files")
    r.add_argument("path", help="roster file to create")
    r.add_argument("public", nargs="+", help="public key files written by 'keygen signing --pid'")
    r.add_argument("--force", action="store_true", help="overwrite an existing file")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import keys
    from .._errors import ConfigurationError
    from ._files import check_paths, os_error_line

    check_paths("epto keygen", args, new_files=("path",))
    try:
        if args.what == "group":
            key = keys.generate_group_key(args.key_id, args.cipher)
            keys.save_group_key(args.path, key, force=args.force)
            print(f"wrote group key {key.key_id} ({key.cipher}) to {args.path}")
        elif args.what == "signing":
            private, public = keys.generate_signing_key()
            pub = keys.save_signing_key(args.path, private, public, pid=args.pid, force=args.force)
            print(f"wrote signing key to {args.path} and public key to {pub}")
        else:
            roster = keys.roster_from_public_files(args.public)
            keys.save_roster(args.path, roster, force=args.force)
            print(f"wrote roster of {len(roster)} members to {args.path}")
    except FileExistsError as exc:
        print(
            f"epto keygen: {exc.filename2 or exc.filename} exists; use --force to replace it",
            file=sys.stderr,
        )
        return 1
    except ConfigurationError as exc:
        print(f"epto keygen: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"epto keygen: {os_error_line(exc)}", file=sys.stderr)
        return 1
    return 0
