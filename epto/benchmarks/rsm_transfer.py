"""Replicated state machines' state transfer: one snapshot over loopback, plain against sealed.

One process runs a transfer server (``TransferServer``, the one a
``ReplicatedNode`` serves) and fetches a state of ``--mb`` MB from it with
``fetch_snapshot``, as a joining replica does: plain TCP, then sealed under a
group key with each of ``--ciphers`` (docs/rsm.md, "State transfer"). The
runs are interleaved: each of ``--repeats`` rounds runs every variant once,
in an order that rotates from round to round. Figures per variant, medians
over the rounds: wall time of the fetch (connect, handshake, request, the
state, the SHA-256 checks at both ends) and the process's CPU seconds over
it, both ends together (one process: client, server and their hashing
threads); MB/s is the state's size over the median wall time. Not measured
here: taking the snapshot, confirming its digest with other replicas,
restoring it (``epto bench rsm --parts sizes`` times a whole catch-up).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import time

VARIANTS = ("plain", "aes-256-gcm", "chacha20-poly1305")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mb", type=float, default=100.0, help="MB of state")
    p.add_argument("--repeats", type=int, default=5, help="rounds, each running every variant")
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help="plain and/or the group key's ciphers"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per transfer")
    p.set_defaults(func=run)


async def _one(state: bytes, variant: str, timeout: float) -> tuple[float, float, bool]:
    """One transfer of ``state``: (wall seconds, CPU seconds, the state arrived whole)."""
    import trio

    from epto import GroupKey
    from epto.rsm import Snapshot
    from epto.services._rsm_channel import TransferKey
    from epto.services._rsm_transfer import TransferServer, fetch_snapshot

    key = None
    if variant != "plain":
        key = TransferKey(GroupKey(key_id=1, secret=bytes(range(32)), cipher=variant))  # type: ignore[arg-type]
    snapshot = Snapshot(cut=(1, 1, 0), applied=1, digest=bytes(16), state=state)

    async def take() -> Snapshot:
        return snapshot

    server = TransferServer(
        snapshot=take,
        ready=lambda: True,
        cut=lambda: snapshot.cut,
        digest_at=lambda _cut: snapshot.digest,
        send_timeout=timeout,
        key=key,
    )
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        wall, cpu = time.perf_counter(), time.process_time()
        fetched = await fetch_snapshot(
            address, None, timeout=timeout, max_bytes=len(state), key=key
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        nursery.cancel_scope.cancel()
    return wall, cpu, fetched.state == state


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: argparse.Namespace) -> int:
    import trio

    from epto import ConfigurationError

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise ConfigurationError(f"--variants: unknown {unknown}; choose from {VARIANTS}")
    if args.repeats < 1 or args.mb <= 0:
        raise ConfigurationError("--repeats and --mb must be > 0")
    size = int(args.mb * 1e6)
    state = random.Random(1).randbytes(size)
    print(
        f"command: epto bench rsm_transfer --mb {args.mb:g} --repeats {args.repeats} "
        f"--variants {','.join(variants)}"
    )
    print(f"{size / 1e6:.1f} MB over 127.0.0.1, one process; load average {_load()}")
    walls: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    status = 0
    for i in range(args.repeats):
        order = variants[i % len(variants) :] + variants[: i % len(variants)]
        for variant in order:
            wall, cpu, whole = trio.run(_one, state, variant, args.timeout)
            status |= 0 if whole else 1
            walls[variant].append(wall)
            cpus[variant].append(cpu)
    print(f"{'variant':<18} {'wall s':>7} {'(min-max)':>13} {'cpu s':>7} {'MB/s':>7}  vs plain cpu")
    plain = statistics.median(cpus["plain"]) if "plain" in cpus else None
    for variant in variants:
        wall, cpu = statistics.median(walls[variant]), statistics.median(cpus[variant])
        spread = f"({min(walls[variant]):.3f}-{max(walls[variant]):.3f})"
        ratio = f"x{cpu / plain:.2f}" if plain else "-"
        rate = size / 1e6 / wall
        print(f"{variant:<18} {wall:>7.3f} {spread:>13} {cpu:>7.3f} {rate:>7.0f}  {ratio}")
    if status:
        print("a fetched state DIFFERS from the one served")
    print(f"load average now {_load()}")
    return status
