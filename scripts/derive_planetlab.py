"""Derive ``epto/data/planetlab-226.u16.gz`` from the PlanetLab latency sample.

Input: ``src dst ms`` lines, one-way latencies in milliseconds between 226
PlanetLab nodes (48,859 pairs), the sample used in the evaluation of "EpTO: an
epidemic total order algorithm for large-scale distributed systems" (Matos,
Mercier, Felber, Oliveira, Pereira), as published with the authors' simulator
SimpleDA (``data/pl_226nodes.latencies``).

Output: a gzip-compressed 226 x 226 matrix of little-endian unsigned 16-bit
integers, row-major (row = source, column = destination), in tenths of a
millisecond (the largest latency, about 704 ms, fits). 0 on the diagonal;
65535 marks a pair the sample does not contain. About 100 KB raw.

Usage: python scripts/derive_planetlab.py INPUT [OUTPUT]
"""

from __future__ import annotations

import array
import gzip
import sys
from pathlib import Path

NODES = 226
MISSING = 0xFFFF


def derive(lines: list[str]) -> array.array[int]:
    matrix = array.array("H", [MISSING] * (NODES * NODES))
    for i in range(NODES):
        matrix[i * NODES + i] = 0
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        src, dst, ms = int(parts[0]), int(parts[1]), float(parts[2])
        if not (0 <= src < NODES and 0 <= dst < NODES) or src == dst:
            raise ValueError(f"unexpected pair {line!r}")
        tenths = max(1, round(ms * 10))
        if tenths >= MISSING:
            raise ValueError(f"latency too large for the table: {line!r}")
        matrix[src * NODES + dst] = tenths
    return matrix


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[0])
    target = Path(argv[1]) if len(argv) == 2 else Path("epto/data/planetlab-226.u16.gz")
    matrix = derive(source.read_text().splitlines())
    if sys.byteorder != "little":
        matrix.byteswap()
    # mtime=0: the output is byte-for-byte reproducible.
    target.write_bytes(gzip.compress(matrix.tobytes(), compresslevel=9, mtime=0))
    present = sum(1 for v in matrix if v not in (0, MISSING))
    print(f"{target}: {present} pairs, {target.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
