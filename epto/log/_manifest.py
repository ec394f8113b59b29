"""The manifest of a node's log: how far the log is known to be durable.

``<node dir>/MANIFEST`` holds two 40-byte slots (docs/delivery-log.md has the
table). Each slot says "records ``[.., end)`` were made durable"; the writer
overwrites the older slot in place and ``fdatasync``s the file after every
``fsync`` of the records, so one valid slot always survives a write torn by a
crash. Readers take the valid slot with the highest generation. A log whose
records end before the manifest's ``end`` lost records that were durable.

The file is created whole (temporary name, ``fsync``, rename, ``fsync`` of the
directory) before the first record is written; it is never removed by the
writer.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import attrs

from ._segment import LogCorruptError

MANIFEST_NAME = "MANIFEST"
MANIFEST_TEMP = "MANIFEST.tmp"
MANIFEST_MAGIC = b"EPTOEND\x00"
MANIFEST_VERSION = 1
SLOT = struct.Struct("<8sIQQQ")
SLOT_SIZE = SLOT.size + 4  # plus the CRC32 of the fields

_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


@attrs.frozen(kw_only=True, slots=True)
class ManifestState:
    node: int
    generation: int
    end: int
    """One past the last delivery index the writer made durable."""


def encode_slot(node: int, generation: int, end: int) -> bytes:
    fields = SLOT.pack(MANIFEST_MAGIC, MANIFEST_VERSION, node, generation, end)
    return fields + struct.pack("<I", zlib.crc32(fields))


def _decode_slot(data: bytes) -> ManifestState | None:
    if len(data) < SLOT_SIZE:
        return None
    magic, version, node, generation, end = SLOT.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, SLOT.size)
    if magic != MANIFEST_MAGIC or version != MANIFEST_VERSION:
        return None
    if zlib.crc32(data[: SLOT.size]) != crc:
        return None
    return ManifestState(node=int(node), generation=int(generation), end=int(end))


def read_manifest(node_dir: str | os.PathLike[str]) -> ManifestState | None:
    """The newest valid slot of ``node_dir/MANIFEST``; ``None`` when there is no
    manifest (a log written before manifests existed).

    Raises :class:`LogCorruptError` when the file exists but no slot is valid.
    """
    path = Path(node_dir) / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    slots = [_decode_slot(data[i * SLOT_SIZE : (i + 1) * SLOT_SIZE]) for i in range(2)]
    valid = [s for s in slots if s is not None]
    if not valid:
        raise LogCorruptError(f"{path}: no valid manifest slot")
    return max(valid, key=lambda s: s.generation)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ManifestWriter:
    """The writer's handle on ``MANIFEST``: created whole, then updated in place."""

    def __init__(self, node_dir: Path, node: int, state: ManifestState | None, end: int) -> None:
        self._path = node_dir / MANIFEST_NAME
        if state is None:
            temp = node_dir / MANIFEST_TEMP
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, encode_slot(node, 0, end) + bytes(SLOT_SIZE))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, self._path)
            fsync_dir(node_dir)
            self._generation = 0
            self._end = end
        else:
            self._generation = state.generation
            self._end = state.end
        self._node = node
        self._fd = os.open(self._path, os.O_RDWR)
        if end > self._end:
            self.update(end)

    @property
    def end(self) -> int:
        return self._end

    def update(self, end: int) -> None:
        """Record ``end`` as durable. The caller made ``[.., end)`` durable first."""
        if end <= self._end:
            return
        generation = self._generation + 1
        slot = encode_slot(self._node, generation, end)
        os.pwrite(self._fd, slot, (generation % 2) * SLOT_SIZE)
        _datasync(self._fd)
        self._generation = generation
        self._end = end

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
