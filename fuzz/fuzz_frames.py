"""Longer fuzzing run of the frame decoders (not part of the test suite).

A seeded mutation fuzzer: it starts from valid frames of every kind, plain
and sealed, and feeds the codecs random bytes, bit flips, byte changes,
truncations, insertions, deletions, splices of two frames and hostile
integers (0xFFFF, 2**31, 0xFFFFFFFF) written over counts and lengths. Every
input must decode or raise ``epto.RemoteProtocolError``; anything else stops
the run with the input printed. It reports inputs tried, the faults seen, the
slowest input and the peak memory traced on a sample of inputs.

    python fuzz/fuzz_frames.py --seconds 300 --seed 1
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
import tracemalloc
from collections import Counter

from epto import Event, GroupKey, Limits, RemoteProtocolError
from epto.epidemic._peer_messages import Leave, PeerDescriptor, ShuffleReply, ShuffleRequest
from epto.wire import FrameCodec, GroupSealer

KEY = GroupKey(key_id=1, secret=bytes(range(32)))
GROUP = 42
HOSTILE16 = [0, 1, 0x7FFF, 0x8000, 0xFFFF]
HOSTILE32 = [0, 1, 1 << 31, 0xFFFFFFFF, 0x10000, 1401]


def corpus(codec: FrameCodec, rng: random.Random) -> list[bytes]:
    frames: list[bytes] = []
    for size in (0, 1, 5, 40):
        ball = {}
        for i in range(size):
            sig = rng.randbytes(64) if rng.random() < 0.3 else b""
            payload = rng.randbytes(rng.randrange(0, 200))
            event = Event(
                source=rng.randrange(8),
                seq=i,
                ts=rng.randrange(1 << 40),
                payload=payload,
                signature=sig,
            )
            ball[event.id] = (event, rng.randrange(30))
        frames += codec.encode(1, ball)
    peers = tuple(
        PeerDescriptor(pid=i, address=rng.randbytes(rng.randrange(30)), age=i) for i in range(8)
    )
    for message in (ShuffleRequest(entries=peers), ShuffleReply(entries=peers[:2]), Leave()):
        frames += codec.encode(1, message)
    return frames


def mutate(data: bytes, frames: list[bytes], rng: random.Random) -> bytes:
    if rng.random() < 0.05:
        return rng.randbytes(rng.randrange(0, 1500))
    out = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(8)
        at = rng.randrange(len(out)) if out else 0
        if op == 0 and out:
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[at] = rng.randrange(256)
        elif op == 2:
            del out[at:]
        elif op == 3:
            out[at:at] = rng.randbytes(rng.randrange(1, 64))
        elif op == 4:
            del out[at : at + rng.randrange(1, 64)]
        elif op == 5 and len(out) >= at + 2:
            out[at : at + 2] = struct.pack(">H", rng.choice(HOSTILE16))
        elif op == 6 and len(out) >= at + 4:
            out[at : at + 4] = struct.pack(">I", rng.choice(HOSTILE32))
        elif op == 7:
            other = rng.choice(frames)
            cut = rng.randrange(len(other) + 1)
            out = out[:at] + other[cut:]
    return bytes(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    limits = Limits()
    plain = FrameCodec(group=GROUP, limits=limits)
    sealed_sender = FrameCodec(
        group=GROUP, limits=limits, sealer=GroupSealer(KEY, counter_start=0, prefix=b"fuzz")
    )
    plain_frames = corpus(plain, rng)
    sealed_frames = corpus(sealed_sender, rng)
    faults: Counter[str] = Counter()
    accepted = 0
    tried = 0
    slowest = 0.0
    peak = 0
    start = time.monotonic()
    deadline = start + args.seconds
    while time.monotonic() < deadline:
        for _ in range(500):
            use_sealed = rng.random() < 0.5
            pool = sealed_frames if use_sealed else plain_frames
            data = mutate(rng.choice(pool), pool, rng)
            codec = FrameCodec(
                group=GROUP,
                limits=limits,
                sealer=GroupSealer(KEY, counter_start=0, prefix=b"recv") if use_sealed else None,
            )
            traced = tried % 1000 == 0
            if traced:
                tracemalloc.start()
            t0 = time.process_time()
            try:
                codec.decode(data)
                accepted += 1
            except RemoteProtocolError as exc:
                faults[exc.fault] += 1
            except BaseException:
                print(f"FAILED on input {data.hex()} (sealed={use_sealed})", file=sys.stderr)
                raise
            finally:
                slowest = max(slowest, time.process_time() - t0)
                if traced:
                    peak = max(peak, tracemalloc.get_traced_memory()[1])
                    tracemalloc.stop()
            tried += 1
    elapsed = time.monotonic() - start
    print(f"inputs tried: {tried} in {elapsed:.0f} s ({tried / elapsed:.0f}/s), seed {args.seed}")
    print(f"accepted: {accepted}; rejected by fault: {dict(faults.most_common())}")
    print(
        f"slowest input (CPU time): {slowest * 1e3:.2f} ms; peak traced memory (sampled): {peak} B"
    )
    print("other exceptions: 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
