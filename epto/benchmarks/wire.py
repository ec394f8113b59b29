"""Wire: frames encoded and decoded per second, overhead per event, sealing and signature costs.

Size: the six measurements of ``epto bench wire`` (codec, copies of held
events, the gossip workload of three endpoints, sealing, signatures,
msgpack) in about 450 lines; they share the timing helper and the ball
builders, and each is a few dozen lines.
"""

# Figures are CPU time per operation of one core (time.process_time).

from __future__ import annotations

import argparse
import importlib
import random
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .._event import Event
from ..cli._args import non_negative_int, positive_int
from ..wire._codec import FrameCodec
from ..wire._limits import Limits

GROUP = 7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--payload", type=non_negative_int, default=100, help="payload bytes per event"
    )
    parser.add_argument(
        "--events",
        type=positive_int,
        nargs="+",
        default=[10, 40, 200],
        help="events per ball (several values)",
    )
    parser.add_argument(
        "--frame-sizes",
        type=int,
        nargs="+",
        default=[1400, 60000],
        help="Limits.max_frame_size values",
    )
    parser.add_argument("--seconds", type=float, default=0.3, help="time per measurement")
    parser.add_argument(
        "--gossip",
        type=non_negative_int,
        default=0,
        metavar="COMMANDS",
        help="also run three EpTO endpoints in one process, COMMANDS broadcasts each, "
        "and print the CPU of receiving, sending, rounds and deliveries",
    )
    parser.add_argument(
        "--compare-msgpack",
        action="store_true",
        help="also time an equivalent msgpack codec (needs msgpack)",
    )


def _per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Best of three runs of ``seconds / 3``: CPU seconds per call.

    CPU time of this process, not wall-clock time, so that other jobs on a
    shared machine inflate the figures less (they still share caches and cores).
    """
    fn()
    best = float("inf")
    for _ in range(3):
        n = 0
        start = time.process_time()
        deadline = start + seconds / 3
        while True:
            fn()
            n += 1
            now = time.process_time()
            if now >= deadline:
                break
        best = min(best, (now - start) / n)
    return best


def _ball(n: int, payload: int, signed: bool, rng: random.Random) -> dict[Any, Any]:
    sig = bytes(64) if signed else b""
    ball = {}
    base = 1_700_000_000_000_000
    for _ in range(n):
        event = Event(
            source=rng.randrange(1000),
            seq=rng.randrange(1000),
            ts=base + rng.randrange(10**9),
            payload=rng.randbytes(payload),
            signature=sig,
        )
        ball[event.id] = (event, rng.randrange(20))
    return ball


def _codecs(limits: Limits, sealed: bool) -> tuple[FrameCodec, FrameCodec, Any]:
    if not sealed:
        codec = FrameCodec(group=GROUP, limits=limits)
        return codec, codec, None
    from ..wire._seal import GroupKey, GroupSealer

    key = GroupKey(key_id=1, secret=bytes(32))
    tx_sealer = GroupSealer(key, counter_start=0, prefix=b"aaaa")
    rx_sealer = GroupSealer(key, counter_start=0, prefix=b"bbbb")
    tx = FrameCodec(group=GROUP, limits=limits, sealer=tx_sealer)
    rx = FrameCodec(group=GROUP, limits=limits, sealer=rx_sealer)
    return tx, rx, rx_sealer


def _time_ball(
    tx: FrameCodec, rx: FrameCodec, rx_sealer: Any, ball: Any, sealed: bool, seconds: float
) -> tuple[float, float]:
    """Seconds to encode ``ball`` and to decode all of its frames."""
    from ..wire._replay import ReplayWindow

    enc = _per_call(lambda: tx.encode(1, ball), seconds)
    # Sealed frames cannot be decoded twice (replay protection): cycle through
    # fresh batches and reset the receiver's window between cycles.
    batches = [tx.encode(1, ball) for _ in range(500 if sealed else 1)]
    state = {"i": 0}

    def dec() -> None:
        i = state["i"]
        if i == len(batches):
            i = 0
            if rx_sealer is not None:
                rx_sealer.replay = ReplayWindow()
        state["i"] = i + 1
        for f in batches[i]:
            rx.decode(f)

    return enc, _per_call(dec, seconds)


def bench_codec(args: argparse.Namespace) -> None:
    rng = random.Random(1)
    print("== frame codec (balls of random events)")
    print(
        f"{'frame':>6} {'sealed':>6} {'signed':>6} {'events':>6} {'frames':>6} "
        f"{'enc µs/ball':>11} {'dec µs/ball':>11} {'dec frames/s':>12} {'dec MB/s':>8} "
        f"{'B/event ovh':>11}"
    )
    for frame_size in args.frame_sizes:
        limits = Limits.for_frame_size(frame_size, max_payload_size=max(args.payload, 1))
        for sealed in (False, True):
            tx, rx, rx_sealer = _codecs(limits, sealed)
            for signed in (False, True):
                for n in args.events:
                    ball = _ball(n, args.payload, signed, rng)
                    frames = tx.encode(1, ball)
                    total = sum(map(len, frames))
                    enc, decode = _time_ball(tx, rx, rx_sealer, ball, sealed, args.seconds)
                    overhead = (total - n * args.payload) / n
                    print(
                        f"{frame_size:>6} {sealed!s:>6} {signed!s:>6} {n:>6} {len(frames):>6} "
                        f"{enc * 1e6:>11.1f} {decode * 1e6:>11.1f} {len(frames) / decode:>12.0f} "
                        f"{total / decode / 1e6:>8.1f} {overhead:>11.1f}"
                    )


def _signed_ball(n: int, payload: int, rng: random.Random) -> tuple[dict[Any, Any], Any]:
    """A ball of ``n`` events of four sources, validly signed, and a verifier
    that has verified every one of them (its later checks are cache hits)."""
    from ..wire._signing import EventSigner, SignatureVerifier

    signers = [EventSigner(pid, bytes([pid + 1]) * 32) for pid in range(4)]
    verifier = SignatureVerifier({s.source: s.public_key for s in signers})
    ball = {}
    for i in range(n):
        signer = signers[i % 4]
        event = signer.sign(
            Event(source=signer.source, seq=i, ts=10**9 + i, payload=rng.randbytes(payload))
        )
        ball[event.id] = (event, rng.randrange(20))
        verifier.check(event)
    return ball, verifier


def bench_held(args: argparse.Namespace) -> None:
    """Decoding a copy of an event the receiver holds (``decode(held=)``)
    against decoding it in full, per event copy."""
    rng = random.Random(3)
    frame_size = args.frame_sizes[0]
    limits = Limits.for_frame_size(frame_size, max_payload_size=max(args.payload, 1))
    print(
        f"== receive path per event copy, {frame_size}-byte frames (decode, and verify if signed)"
    )
    print(
        f"{'sealed':>6} {'signed':>6} {'events':>6} {'full µs':>8} {'fresh µs':>8} "
        f"{'held µs':>8}   (full: decode(data); fresh: held= knows none; held: knows all)"
    )
    for sealed in (False, True):
        for signed in (False, True):
            for n in args.events:
                if signed:
                    try:
                        ball, verifier = _signed_ball(n, args.payload, rng)
                    except ImportError:
                        continue
                    ball_filter = verifier.filter_ball
                else:
                    ball, ball_filter = _ball(n, args.payload, False, rng), None
                tx, rx, rx_sealer = _codecs(limits, sealed)
                rx.ball_filter = ball_filter
                batches = [tx.encode(1, ball) for _ in range(500 if sealed else 1)]
                events = {eid: event for eid, (event, _ttl) in ball.items()}
                figures = []
                nothing: dict[Any, Any] = {}
                lookups: tuple[Any, ...] = (None, nothing.get, events.get)
                for held in lookups:
                    figures.append(_time_frames(rx, rx_sealer, batches, held, args.seconds) / n)
                full, fresh, known = figures
                print(
                    f"{sealed!s:>6} {signed!s:>6} {n:>6} {full * 1e6:>8.2f} {fresh * 1e6:>8.2f} "
                    f"{known * 1e6:>8.2f}"
                )


def _time_frames(
    rx: FrameCodec, rx_sealer: Any, batches: list[list[bytes]], held: Any, seconds: float
) -> float:
    """Seconds to decode one batch of frames (a ball) with ``held``."""
    from ..wire._replay import ReplayWindow

    if rx_sealer is not None:
        rx_sealer.replay = ReplayWindow()
    state = {"i": 0}
    decode = partial(rx.decode, held=held)

    def dec() -> None:
        i = state["i"]
        if i == len(batches):
            i = 0
            if rx_sealer is not None:
                rx_sealer.replay = ReplayWindow()
        state["i"] = i + 1
        for f in batches[i]:
            decode(f)

    return _per_call(dec, seconds)


def _gossip_once(commands: int) -> dict[str, float]:
    """Three EpTO endpoints (fanout 2, TTL 5, global clock, 20 ms rounds, out
    of phase by 1 ms), ``commands`` 4-byte broadcasts each at once, frames
    handed over by hand in virtual time until every endpoint delivered all:
    the CPU seconds of each kind of step, summed over the three."""
    from ..endpoint import EptoEndpoint, NodeConfig
    from ..epidemic._config import Config

    members = {pid: f"127.0.0.1:{9000 + pid}" for pid in (1, 2, 3)}
    protocol = Config.for_group(3, clock="global", round_interval=0.02)
    nodes = {
        pid: EptoEndpoint(
            NodeConfig(pid=pid, bind=members[pid], members=members, epto=protocol, seed=pid),
            1000.0,
            rng=random.Random(pid),
        )
        for pid in members
    }
    now = 1000.0
    for node in nodes.values():
        for _ in range(commands):
            node.broadcast(b"incr", now)
    cpu = dict.fromkeys(("receive", "send", "round", "deliver"), 0.0)
    delivered = dict.fromkeys(nodes, 0)
    clock = time.process_time
    for _ in range(200):
        if min(delivered.values()) == 3 * commands:
            break
        now += 0.02
        for pid, node in nodes.items():
            start = clock()
            node.handle_timer(now + pid * 0.001)
            sent = clock()
            transmits = node.frames_to_send(now)
            received = clock()
            for transmit in transmits:
                nodes[transmit.dest].receive(transmit.data, now)
            done = clock()
            for other, endpoint in nodes.items():
                while endpoint.next_delivery() is not None:
                    delivered[other] += 1
            cpu["round"] += sent - start
            cpu["send"] += received - sent
            cpu["receive"] += done - received
            cpu["deliver"] += clock() - done
    return cpu


def bench_gossip(args: argparse.Namespace) -> None:
    runs = [_gossip_once(args.gossip) for _ in range(5)]
    print(f"== three EpTO endpoints in one process, {args.gossip} broadcasts each (min of 5)")
    print(
        "  ".join(f"{key} {min(run[key] for run in runs):.3f} s" for key in runs[0])
        + f"  total {min(sum(run.values()) for run in runs):.3f} s"
    )


def bench_seal(args: argparse.Namespace) -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

    print("== AEAD per frame (seal = encrypt, open = decrypt and check the tag)")
    key = bytes(32)
    aad = bytes(24)
    nonce = bytes(12)
    for name, cls in (("aes-256-gcm", AESGCM), ("chacha20-poly1305", ChaCha20Poly1305)):
        aead = cls(key)
        for size in (64, 1400, 8192, 60000):
            data = bytes(size)
            sealed = aead.encrypt(nonce, data, aad)
            seal = _per_call(partial(aead.encrypt, nonce, data, aad), args.seconds)
            opened = _per_call(partial(aead.decrypt, nonce, sealed, aad), args.seconds)
            print(
                f"{name:>18} {size:>6} B  seal {seal * 1e6:6.2f} µs  open {opened * 1e6:6.2f} µs"
                f"  ({size / seal / 1e6:7.0f} MB/s)"
            )
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    hkdf = _per_call(
        lambda: HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=bytes(22)).derive(key),
        args.seconds,
    )
    print(f"HKDF subkey derivation (once per sender and key, cached): {hkdf * 1e6:.2f} µs")


def bench_signatures(args: argparse.Namespace) -> None:
    from ..wire._signing import EventSigner, SignatureVerifier

    print("== Ed25519 event signatures")
    private = bytes(range(32))
    signer = EventSigner(1, private, cache_size=1)
    event = Event(source=1, seq=0, ts=123456789, payload=bytes(args.payload))
    sign = _per_call(lambda: signer.signature(event), args.seconds)
    signed = signer.sign(event)
    verifier = SignatureVerifier({1: signer.public_key}, cache_size=1)
    other = signer.sign(Event(source=1, seq=1, ts=123456790, payload=bytes(args.payload)))

    def first_check() -> None:
        # Alternating two ids through a cache of one: every check verifies.
        verifier.check(signed)
        verifier.check(other)

    verify = _per_call(first_check, args.seconds) / 2
    cached = SignatureVerifier({1: signer.public_key})
    cached.check(signed)
    hit = _per_call(lambda: cached.check(signed), args.seconds)
    print(f"sign per event: {sign * 1e6:.1f} µs")
    print(f"verify per event (first copy): {verify * 1e6:.1f} µs")
    print(f"check per later copy (cache hit): {hit * 1e6:.2f} µs")


def _msgpack_ball_decoder(msgpack: Any, limits: Limits) -> Callable[[bytes], dict[Any, Any]]:
    """A msgpack ball decoder with the checks the struct decoder makes."""
    from .._errors import RemoteProtocolError

    top = 1 << 64

    def decode(packed: bytes) -> dict[Any, Any]:
        items = msgpack.unpackb(
            packed,
            max_bin_len=limits.max_payload_size,
            max_array_len=limits.max_events_per_ball,
            max_map_len=0,
            max_str_len=0,
            max_ext_len=0,
            use_list=False,
        )
        if type(items) is not tuple:
            raise RemoteProtocolError("not a list")
        out = {}
        for r in items:
            if type(r) is not tuple or len(r) != 6:
                raise RemoteProtocolError("bad row")
            source, seq, ts, ttl, sig, payload = r
            if not (
                type(source) is int
                and type(seq) is int
                and type(ts) is int
                and type(ttl) is int
                and type(sig) is bytes
                and type(payload) is bytes
                and 0 <= source < top
                and 0 <= seq < top
                and 0 <= ts < top
                and 0 <= ttl < 65536
                and len(sig) in (0, 64)
            ):
                raise RemoteProtocolError("bad field")
            out[(source, seq)] = (
                Event(source=source, seq=seq, ts=ts, payload=payload, signature=sig),
                ttl,
            )
        if len(out) != len(items):
            raise RemoteProtocolError("duplicate")
        return out

    return decode


def _compare_msgpack(msgpack: Any, ball: dict[Any, Any], seconds: float) -> str:
    from ..wire._frame_bodies import decode_ball, split_ball
    from ..wire._frames import Reader

    limits = Limits.for_frame_size(60000)
    n = len(ball)
    body = split_ball(ball, limits, 1 << 40)[0]

    def m_encode() -> bytes:
        rows = [[e.source, e.seq, e.ts, t, e.signature, e.payload] for e, t in ball.values()]
        packed: bytes = msgpack.packb(rows)
        return packed

    packed = m_encode()
    m_decode = _msgpack_ball_decoder(msgpack, limits)
    assert m_decode(packed) == ball
    s_dec = _per_call(lambda: decode_ball(Reader(body), limits), seconds)
    m_dec = _per_call(lambda: m_decode(packed), seconds)
    s_enc = _per_call(lambda: split_ball(ball, limits, 1 << 40), seconds)
    m_enc = _per_call(m_encode, seconds)
    return (
        f"{n:>4} events: decode struct {s_dec / n * 1e6:.2f} µs/event, msgpack "
        f"{m_dec / n * 1e6:.2f}; encode struct {s_enc / n * 1e6:.2f}, msgpack "
        f"{m_enc / n * 1e6:.2f}; bytes struct {len(body)}, msgpack {len(packed)}"
    )


def bench_msgpack(args: argparse.Namespace) -> None:
    try:
        msgpack = importlib.import_module("msgpack")
    except ImportError:
        print("== msgpack comparison skipped: pip install msgpack")
        return
    print("== struct layout against msgpack (decode into Event objects, same checks)")
    rng = random.Random(2)
    for n in args.events:
        print(_compare_msgpack(msgpack, _ball(n, args.payload, False, rng), args.seconds))
    make = _per_call(lambda: Event(source=1, seq=2, ts=3, payload=b""), args.seconds)
    print(f"building one Event object: {make * 1e6:.2f} µs")


def run(args: argparse.Namespace) -> int:
    bench_codec(args)
    bench_held(args)
    if args.gossip:
        bench_gossip(args)
    try:
        bench_seal(args)
        bench_signatures(args)
    except ImportError:
        print("sealing and signature figures need the crypto extra: pip install 'epto[crypto]'")
    if args.compare_msgpack:
        bench_msgpack(args)
    print("Figures are CPU time of one core, on a possibly shared machine: expect noise.")
    return 0
