"""One row per event: a group's logs read as the agreed sequence once.

Every node's log holds (a prefix of, with holes in) the same total order, so
the group's order is the union of the in-order deliveries of every node. It
is merged here, on the driver, from the keys of the records (index, source,
seq, ts, flags), and each event is then read by a task from one node that
holds it. The rules:

* **Which order.** Token-ring logs carry ``ts = 0`` (the ring orders by
  position) and every member's delivery index is the event's position in the
  total order: the *position* order, keyed by the index. EpTO logs carry the
  event's order timestamp (at least 1), and EpTO delivers in ``(ts, source)``
  order at every node: the *timestamp* order, keyed by ``(ts, source, seq)``.
  Logs whose in-order records all have ``ts = 0`` are read in position order,
  any other in timestamp order.
* **Which offset.** Position order: the position (the delivery index, the
  same at every node). Timestamp order: the event's rank, the number of
  distinct events before it in ``(ts, source, seq)`` order over every node's
  in-order deliveries; a hole at one node does not move it, since the rank
  counts the union.
* **Which copy.** The node the previous event was read from, while it holds
  the next one (long runs from one log); otherwise the lowest node id that
  holds it.
* **Which events.** In-order deliveries only; an event some node delivered
  out of order is read from a node that delivered it in order. Events only
  ever delivered out of order (tagged) are outside the total order and are
  not read (``rows=per-node`` has them).
* **What is final.** A position is final once any node logged it. A rank is
  final once every node's log went past its key: EpTO delivers in increasing
  ``(ts, source)`` at each node, so no node can later deliver in order an
  event below its own last key. A stream reads up to the smallest of the
  nodes' last keys (the *frontier*); a batch read reads everything logged,
  and its ranks above the frontier are the ranks as of now.

The logs are a directory (:class:`FileLogs`) or members serving theirs
(:class:`epto.spark._network.NetworkLogs`); both answer the same key scans.

Size: just past the line: the planner, its rules and the run reader share the key
model; the log access behind :class:`Logs` is a few lines each.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from .._errors import EptoError
from ..log import list_nodes, node_directory
from ._columnar import decode, scan_frames

POSITION = "position"
TIMESTAMP = "timestamp"

Key = tuple[int, int, int]
"""Position order: ``(index, 0, 0)``; timestamp order: ``(ts, source, seq)``."""

Run = tuple[str, int, int, int, int, int, int]
"""``(node_dir, node, start, end, skip, count, first_offset)``: the in-order
records of one node with ``start <= index < end``, the first ``skip`` of them
passed over and the next ``count`` read as the events at offsets
``first_offset, first_offset + 1, ...``."""

_KEY_COLUMNS = ("offset", "source", "seq", "ts", "tag")


class EventsLossError(EptoError):
    """Positions of the group's order that no node's log holds."""


@attrs.frozen(kw_only=True, slots=True)
class NodeKeys:
    """The in-order records of one node's log from a cursor on."""

    indices: list[int]
    keys: list[Key]
    all_zero: bool
    """Every record's ts is 0 (or there is none)."""
    end: int
    """One past the last index scanned."""
    more: bool = False
    """The scan stopped at its ``limit``: records from ``end`` on were not scanned."""


def scan_keys(
    node_dir: str | os.PathLike[str], node: int, start: int, limit: int | None = None
) -> NodeKeys:
    """The in-order records of a log from index ``start`` on (at most
    ``limit``); what is missing is skipped (another node may hold it)."""
    indices: list[int] = []
    ts_col: list[int] = []
    src_col: list[int] = []
    seq_col: list[int] = []
    end = start
    more = False
    for data, positions in scan_frames(node_dir, start, None, skip_missing=True):
        if not positions:
            continue
        batch = decode(data, positions, node, _KEY_COLUMNS)
        keep = pc.equal(batch.column("tag"), "in-order")
        offsets = batch.column("offset").to_pylist()
        end = max(end, offsets[-1] + 1)
        kept = batch.filter(keep)
        indices += kept.column("offset").to_pylist()
        ts_col += kept.column("ts").to_pylist()
        src_col += kept.column("source").to_pylist()
        seq_col += kept.column("seq").to_pylist()
        if limit is not None and len(indices) >= limit:
            del indices[limit:], ts_col[limit:], src_col[limit:], seq_col[limit:]
            end, more = indices[-1] + 1, True
            break
    all_zero = not any(ts_col)
    keys = list(zip(ts_col, src_col, seq_col, strict=True))
    return NodeKeys(indices=indices, keys=keys, all_zero=all_zero, end=end, more=more)


class Logs(Protocol):
    """Where a read finds a group's logs: a directory (:class:`FileLogs`) or
    members that serve theirs over the network (:mod:`epto.spark._network`)."""

    @property
    def label(self) -> str:
        """Names the logs in errors."""
        ...

    def nodes(self) -> list[int]:
        """The nodes whose logs there are."""
        ...

    def keys(self, node: int, start: int) -> NodeKeys:
        """:func:`scan_keys` of ``node``'s log from ``start``."""
        ...

    def location(self, node: int) -> str:
        """Where a task reads ``node``'s records (a run's first field)."""
        ...


Frames = Callable[[str, int, int, int], Iterator[tuple[bytes, list[int]]]]
"""``frames(location, node, lo, hi)``: :func:`epto.spark._columnar.scan_frames`
of the records ``lo <= index < hi`` of ``node``'s log at ``location``,
what is missing skipped."""


@attrs.frozen(slots=True)
class FileLogs:
    """A directory of logs, one sub-directory per node."""

    root: str

    @property
    def label(self) -> str:
        return self.root

    def nodes(self) -> list[int]:
        return list_nodes(self.root)

    def keys(self, node: int, start: int) -> NodeKeys:
        return scan_keys(node_directory(self.root, node), node, start)

    def location(self, node: int) -> str:
        return str(node_directory(self.root, node))


def file_frames(node_dir: str, node: int, lo: int, hi: int) -> Iterator[tuple[bytes, list[int]]]:
    """:data:`Frames` over a node directory this host sees."""
    if not os.path.isdir(node_dir):
        raise EptoError(
            f"{node_dir} is not visible on host {socket.gethostname()}: executors read the "
            "logs at the driver's absolute path (use a file system shared by every worker)"
        )
    return scan_frames(node_dir, lo, hi, skip_missing=True)


@attrs.frozen(kw_only=True, slots=True)
class Cursor:
    """Where a read of the group's order stands (a stream's offset)."""

    order: str | None
    """:data:`POSITION`, :data:`TIMESTAMP`, or None before any record."""
    next: int
    """The offset of the next event."""
    after: Key | None
    """The key of the last event read (None before any)."""
    nodes: Mapping[int, int]
    """Per node, the index its next scan starts at (every record before it is
    at or below ``after``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "next": self.next,
            "after": None if self.after is None else list(self.after),
            "nodes": {str(n): self.nodes[n] for n in sorted(self.nodes)},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Cursor:
        if not data:
            return START
        after = data.get("after")
        return cls(
            order=data.get("order"),
            next=int(data.get("next", 0)),
            after=None if after is None else (int(after[0]), int(after[1]), int(after[2])),
            nodes={int(n): int(i) for n, i in (data.get("nodes") or {}).items()},
        )


START = Cursor(order=None, next=0, after=None, nodes={})


@attrs.frozen(kw_only=True, slots=True)
class Plan:
    runs: list[Run]
    cursor: Cursor
    """Where the read ends (the next read's start)."""


def plan(
    logs: str | Logs,
    start: Cursor,
    *,
    final_only: bool,
    limit: int | None = None,
    upto: Cursor | None = None,
    fail_on_data_loss: bool = True,
) -> Plan:
    """The events after ``start``: up to the frontier (``final_only``, for
    streams), up to ``upto``'s key (a stream's planned batch), or everything
    logged; at most ``limit`` events. ``logs`` is a directory or :class:`Logs`."""
    if upto is not None and (upto.after is None or upto.after == start.after):
        return Plan(runs=[], cursor=start)  # nothing was final when ``upto`` was taken
    if isinstance(logs, str):
        logs = FileLogs(logs)
    root = logs.label
    nodes = logs.nodes() if upto is None else sorted(upto.nodes)
    scans = {n: logs.keys(n, start.nodes.get(n, 0)) for n in nodes}
    order = start.order
    if order is None:
        seen = [s for s in scans.values() if s.keys]
        if not seen:
            return Plan(runs=[], cursor=start)
        order = POSITION if all(s.all_zero for s in seen) else TIMESTAMP
    position = order == POSITION

    def key_of(scan: NodeKeys, k: int) -> Key:
        return (scan.indices[k], 0, 0) if position else scan.keys[k]

    holders: dict[Key, list[tuple[int, int]]] = {}
    for n, scan in scans.items():
        for k in range(len(scan.indices)):
            key = key_of(scan, k)
            if start.after is None or key > start.after:
                holders.setdefault(key, []).append((n, k))
    ceiling: Key | None = None
    if upto is not None:
        ceiling = upto.after
    elif final_only and not position:
        # The frontier: no node can deliver in order below its own last key. A
        # node with nothing after the cursor holds the read where it is.
        if any(not scan.keys for scan in scans.values()):
            return Plan(runs=[], cursor=attrs.evolve(start, order=order))
        ceiling = min(key_of(scan, len(scan.keys) - 1) for scan in scans.values())
    keys = sorted(k for k in holders if ceiling is None or k <= ceiling)
    if position:
        _check_agreement(root, scans, holders, keys)
    if start.after is None and ceiling is None and not keys:
        return Plan(runs=[], cursor=start)
    if limit is not None:
        keys = keys[:limit]
    if position:
        expected = start.next
        for key in keys:
            if key[0] != expected and fail_on_data_loss:
                raise EventsLossError(
                    f"{root}: no node's log holds positions {expected}..{key[0] - 1} of the "
                    "group's order (set failOnDataLoss=false to skip)"
                )
            expected = key[0] + 1
    runs: list[Run] = []
    current: list[int] | None = None  # [node, k_first, k_last, first_offset, count]
    offset = start.next
    for key in keys:
        places = holders[key]
        here = offset if not position else key[0]
        chosen = None
        if current is not None:
            for n, k in places:
                if n == current[0] and k == current[2] + 1 and here == current[3] + current[4]:
                    chosen = (n, k)
        if chosen is not None and current is not None:
            current[2] = chosen[1]
            current[4] += 1
        else:
            if current is not None:
                runs.append(_run(logs, scans, current))
            n, k = min(places)
            current = [n, k, k, here, 1]
        offset = here + 1
    if current is not None:
        runs.append(_run(logs, scans, current))
    after = keys[-1] if keys else start.after
    cursor = Cursor(
        order=order,
        next=offset,
        after=after,
        nodes=_cursors(scans, start, after, position, key_of),
    )
    return Plan(runs=runs, cursor=cursor)


def _check_agreement(
    root: str,
    scans: Mapping[int, NodeKeys],
    holders: Mapping[Key, list[tuple[int, int]]],
    keys: Sequence[Key],
) -> None:
    """In position order every node must hold the same event at an index; logs
    that do not (a member whose log began after the group's first position)
    cannot be read by position."""
    for key in keys:
        places = holders[key]
        if len(places) < 2:
            continue
        (n0, k0), *rest = places
        event = scans[n0].keys[k0][1:]
        for n, k in rest:
            if scans[n].keys[k][1:] != event:
                raise EptoError(
                    f"{root}: the logs of nodes {n0} and {n} hold different events at "
                    f"delivery index {key[0]} ({event} and {scans[n].keys[k][1:]}): read them "
                    "with rows=per-node"
                )


def _run(logs: Logs, scans: Mapping[int, NodeKeys], current: list[int]) -> Run:
    node, k_first, k_last, first_offset, count = current
    indices = scans[node].indices
    node_dir = logs.location(node)
    return (node_dir, node, indices[k_first], indices[k_last] + 1, 0, count, first_offset)


def _cursors(
    scans: Mapping[int, NodeKeys],
    start: Cursor,
    after: Key | None,
    position: bool,
    key_of: Any,
) -> dict[int, int]:
    """Per node: the first index whose in-order record is above ``after``
    (the scan's end when there is none); nodes not scanned keep theirs."""
    out = dict(start.nodes)
    for n, scan in scans.items():
        at = scan.end
        for k in range(len(scan.indices)):
            if after is None or key_of(scan, k) > after:
                at = scan.indices[k]
                break
        out[n] = max(at, start.nodes.get(n, 0))
    return out


def pack_runs(runs: Sequence[Run], max_records: int, min_partitions: int | None) -> list[list[Run]]:
    """Runs grouped into partitions of at most ``max_records`` events (at
    least ``min_partitions`` when there are enough events), in order; a run
    split between partitions keeps its bounds and skips what an earlier
    partition reads."""
    total = sum(r[5] for r in runs)
    count = max(min_partitions or 1, -(-total // max_records))
    size = max(1, -(-total // count))
    parts: list[list[Run]] = []
    current: list[Run] = []
    used = 0
    for run in runs:
        node_dir, node, lo, hi, base, n, first = run
        skip = 0
        while skip < n:
            take = min(n - skip, size - used)
            current.append((node_dir, node, lo, hi, base + skip, take, first + skip))
            used += take
            skip += take
            if used >= size:
                parts.append(current)
                current, used = [], 0
    if current:
        parts.append(current)
    return parts


def trim_runs(runs: Sequence[Run], start: int | None, end: int | None) -> list[Run]:
    """The part of ``runs`` with offsets ``start <= offset < end`` (None: unbounded)."""
    out = []
    for node_dir, node, lo, hi, skip, count, first in runs:
        begin = first if start is None else max(first, start)
        stop = first + count if end is None else min(first + count, end)
        if stop > begin:
            out.append((node_dir, node, lo, hi, skip + begin - first, stop - begin, begin))
    return out


def read_runs(
    runs: Sequence[Run], columns: Sequence[str], frames: Frames = file_frames
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``columns`` for the events of ``runs``, in order;
    ``frames`` fetches the records (from files by default)."""
    want = list(columns)
    extra = [c for c in ("tag",) if c not in want]
    for node_dir, node, lo, hi, skip, take, first in runs:
        produced = 0
        passed = 0
        for data, positions in frames(node_dir, node, lo, hi):
            if not positions or produced >= take:
                continue
            batch = decode(data, positions, node, [*want, *extra])
            batch = batch.filter(pc.equal(batch.column("tag"), "in-order"))
            if passed + batch.num_rows <= skip:
                passed += batch.num_rows
                continue
            begin = max(0, skip - passed)
            passed += batch.num_rows
            batch = batch.slice(begin, take - produced)
            if "offset" in want:
                ranks = pa.array(range(first + produced, first + produced + batch.num_rows))
                batch = batch.set_column(want.index("offset"), "offset", ranks.cast(pa.int64()))
            produced += batch.num_rows
            yield batch.select(want)
        if produced != take:
            raise EptoError(
                f"{node_dir}: {take} in-order records were planned in indices {lo}..{hi - 1} "
                f"after the first {skip}, {produced} read (the log changed under the read)"
            )
