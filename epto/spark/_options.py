"""Options of the ``epto`` Spark source, parsed without Spark.

They follow the Kafka source's names and rules (docs/spark.md has the table).
Offsets are delivery indices per node, written as JSON like the Kafka
source's, either flat, ``{"3": 120, "4": -2}``, or nested under one name as
Kafka nests partitions under a topic, ``{"logs": {"3": 120}}`` (the name is
not checked). The index is the next record to read (offsets are exclusive
ends), ``-2`` means earliest and ``-1`` latest. Timestamps are milliseconds
since the Unix epoch, compared with ``delivered_at``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import socket
from collections.abc import Mapping

import attrs

from .._errors import ConfigurationError
from ._logproto import network_options

EARLIEST = -2
LATEST = -1

Offsets = dict[int, int]
"""Node id -> delivery index (or EARLIEST / LATEST in a user's option)."""

DEFAULT_MAX_RECORDS_PER_PARTITION = 250_000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

OPTIONS = {
    name.lower(): name
    for name in (
        "path",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "failOnDataLoss",
        "minPartitions",
        "maxRecordsPerPartition",
        "rows",
        "epto.servers",
        "epto.token",
        "epto.tokenFile",
        "epto.groupKeyFile",
    )
}
"""Every option the source knows (Spark passes keys lower-cased)."""
BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
STREAMING_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
PER_NODE_ONLY = (
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
)
"""Options that pick a record per node's log, meaningless over the group's order."""
ROWS = ("events", "per-node")
"""``rows``: one row per event of the group's order (the default), or one row
per delivery in every node's log."""


@attrs.frozen(kw_only=True, slots=True)
class ByTimestamp:
    """Offsets given as times: per node, the first record delivered at or after
    the node's time (``every`` for nodes not in ``per_node``)."""

    every: int | None
    """Milliseconds since the epoch for every node, or ``None``."""
    per_node: Offsets = attrs.field(factory=dict)
    """Node -> milliseconds since the epoch."""

    def millis(self, node: int) -> int | None:
        return self.per_node.get(node, self.every)


Spec = str | Offsets | ByTimestamp
"""``"earliest"``/``"latest"``, per-node indices, or times."""


@attrs.frozen(kw_only=True, slots=True)
class SourceOptions:
    path: str
    """The log directory, absolute (resolved on the driver)."""
    starting: Spec
    ending: Spec
    """``"latest"``, per-node indices or times (batch reads only)."""
    timestamp_strategy: str
    """``"error"`` or ``"latest"``: a starting time after a node's last record."""
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int
    per_node: bool = False
    """``rows=per-node``: every node's log, a row per delivery (offsets per node)."""
    events_start: int | None = None
    events_end: int | None = None
    """``rows=events``: ``{"offset": N}`` given as startingOffsets / endingOffsets
    (the event's offset in the group's order; the end is exclusive)."""
    servers: tuple[str, ...] = ()
    """``epto.servers``: members serving their logs (then ``path`` is empty)."""
    token: bytes = attrs.field(default=b"", repr=False)
    """The log servers' token (``epto.token``, ``epto.tokenFile`` or derived
    from ``epto.groupKeyFile``)."""


def _json_object(name: str, text: str) -> dict[str, int]:
    """A flat ``{"<node>": int}`` object, or Kafka's ``{"<name>": {...}}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigurationError(f"{name}: not JSON: {text!r}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigurationError(f"{name} must be a non-empty JSON object, got {text!r}")
    if all(isinstance(v, dict) for v in data.values()):
        if len(data) != 1:
            raise ConfigurationError(
                f"{name}: nested offsets name one log directory, got {sorted(data)}"
            )
        (data,) = data.values()
    out: dict[str, int] = {}
    for key, value in data.items():
        if not str(key).isdigit() or not isinstance(value, int) or isinstance(value, bool):
            raise ConfigurationError(
                f"{name}: bad entry {key!r}: {value!r} (want a node id and an integer)"
            )
        out[key] = value
    return out


def _offsets(name: str, text: str, words: tuple[str, ...], *, allowed: tuple[int, ...]) -> Spec:
    word = text.strip().lower()
    if word in words:
        return word
    if word in ("earliest", "latest"):
        raise ConfigurationError(f"{name}={word} is not allowed for {_KIND[words]} reads")
    if not text.strip().startswith("{"):
        raise ConfigurationError(
            f"{name} must be one of {', '.join(words)} or a JSON object, got {text!r}"
        )
    out: Offsets = {}
    for key, value in _json_object(name, text).items():
        if value < 0 and value not in allowed:
            meaning = {EARLIEST: "earliest", LATEST: "latest"}.get(value)
            why = f" ({meaning}) is not allowed here" if meaning else " must be >= 0"
            raise ConfigurationError(f"{name}: node {key}: {value}{why}")
        out[int(key)] = value
    return out


_KIND = {("earliest",): "batch", ("latest",): "batch", ("earliest", "latest"): "streaming"}


def _millis(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigurationError(
            f"{name} must be milliseconds since the epoch, got {text!r}"
        ) from None
    if value < 0:
        raise ConfigurationError(f"{name} must be >= 0, got {value}")
    return value


def _times(name: str, text: str) -> Offsets:
    out: Offsets = {}
    for key, value in _json_object(name, text).items():
        out[int(key)] = _millis(f"{name} (node {key})", str(value))
    return out


def _bool(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise ConfigurationError(f"{name} must be true or false, got {text!r}")
    return word == "true"


def _positive(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {text!r}") from None
    if value < 1:
        raise ConfigurationError(f"{name} must be >= 1, got {value}")
    return value


_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_UNITS["d"] = 24 * _UNITS["h"]


def duration_ms(name: str, text: str) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"2h"``, ``"1d"`` (no unit: ms), as Spark reads them."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_UNITS):
        raise ConfigurationError(f"{name} must be a duration like 15m, 30s or 500ms, got {text!r}")
    return int(match.group(1)) * _UNITS.get(match.group(2), 1)


def absolute_path(path: str) -> str:
    """``path`` made absolute where it is called (the driver); raises when it
    does not exist there."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(full):
        what = "is not a directory" if os.path.exists(full) else "does not exist"
        raise ConfigurationError(
            f"the epto source's path {full} {what} (on the driver, host {socket.gethostname()})"
        )
    return full


def _check_names(opts: Mapping[str, str], *, streaming: bool) -> None:
    for key in opts:
        if key not in OPTIONS:
            near = difflib.get_close_matches(key, list(OPTIONS), n=1, cutoff=0.6)
            hint = f"; did you mean {OPTIONS[near[0]]}?" if near else ""
            known = ", ".join(sorted(OPTIONS.values(), key=str.lower))
            raise ConfigurationError(
                f"unknown option {key!r} for the epto source{hint} (known: {known})"
            )
    wrong = STREAMING_ONLY if not streaming else BATCH_ONLY
    for name in wrong:
        if name.lower() in opts:
            kind = "streaming" if not streaming else "batch"
            raise ConfigurationError(f"{name} applies to {kind} reads only")


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the reader's options (case-insensitive keys, as Spark passes them)."""
    opts = {k.lower(): v for k, v in options.items()}
    _check_names(opts, streaming=streaming)
    path = opts.get("path")
    servers, token = network_options(opts)  # epto.servers and its token
    if servers and path:
        raise ConfigurationError(
            "the epto source reads either log files (a path) or members (epto.servers), not both"
        )
    if not path and not servers:
        raise ConfigurationError(
            "the epto source needs a path (.load(LOGDIR)) or epto.servers (host:port,...)"
        )
    events_start = events_end = None
    if opts.get("rows", "events").strip().lower() == "events":
        events_start = _event_offset(opts, "startingOffsets")
        events_end = _event_offset(opts, "endingOffsets")
        if events_start is not None and events_end is not None and events_end < events_start:
            raise ConfigurationError(
                f'endingOffsets {{"offset": {events_end}}} is before startingOffsets '
                f'{{"offset": {events_start}}} (as the Kafka source, a read cannot go backwards)'
            )
    starting: Spec = _offsets(
        "startingOffsets",
        opts.get("startingoffsets", "latest" if streaming else "earliest"),
        ("earliest", "latest") if streaming else ("earliest",),
        allowed=(EARLIEST, LATEST) if streaming else (EARLIEST,),
    )
    if "startingtimestamp" in opts:  # Kafka's precedence: the single time first
        starting = ByTimestamp(every=_millis("startingTimestamp", opts["startingtimestamp"]))
    elif "startingoffsetsbytimestamp" in opts:
        per_node = _times("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
        starting = ByTimestamp(every=None, per_node=per_node)
    ending: Spec = _offsets(
        "endingOffsets", opts.get("endingoffsets", "latest"), ("latest",), allowed=(LATEST,)
    )
    if "endingtimestamp" in opts:
        ending = ByTimestamp(every=_millis("endingTimestamp", opts["endingtimestamp"]))
    elif "endingoffsetsbytimestamp" in opts:
        per_node = _times("endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"])
        ending = ByTimestamp(every=None, per_node=per_node)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigurationError(
            f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )

    def positive(name: str) -> int | None:
        text = opts.get(name.lower())
        return None if text is None else _positive(name, text)

    max_per_trigger = positive("maxOffsetsPerTrigger")
    min_per_trigger = positive("minOffsetsPerTrigger")
    if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
        raise ConfigurationError(
            f"minOffsetsPerTrigger ({min_per_trigger}) is above "
            f"maxOffsetsPerTrigger ({max_per_trigger})"
        )
    delay = opts.get("maxtriggerdelay")
    max_delay = DEFAULT_MAX_TRIGGER_DELAY_MS
    if delay is not None:
        max_delay = duration_ms("maxTriggerDelay", delay)
    fail_on_data_loss = _bool("failOnDataLoss", opts.get("failondataloss", "true"))
    rows = opts.get("rows", "events").strip().lower()
    if rows not in ROWS:
        raise ConfigurationError(f"rows must be events or per-node, got {rows!r}")
    if rows == "events":
        for name in PER_NODE_ONLY:
            if name.lower() in opts:
                raise ConfigurationError(
                    f"{name} picks records in each node's log: set rows=per-node to use it"
                )
        for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
            if isinstance(spec, dict):
                raise ConfigurationError(
                    f"{name} as JSON names per-node delivery indices: set rows=per-node, or use "
                    'earliest/latest or {"offset": N} over the group\'s order'
                )
    if servers and rows == "per-node":
        raise ConfigurationError(
            "rows=per-node reads log files: over epto.servers the source reads rows=events"
        )
    min_partitions = positive("minPartitions")
    per_partition = positive("maxRecordsPerPartition") or DEFAULT_MAX_RECORDS_PER_PARTITION
    return SourceOptions(
        servers=servers,
        token=token,
        # last: a bad option is named even with a wrong path
        path=absolute_path(path) if path else "",
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=max_delay,
        fail_on_data_loss=fail_on_data_loss,
        min_partitions=min_partitions,
        max_records_per_partition=per_partition,
        per_node=rows == "per-node",
        events_start=events_start,
        events_end=events_end,
    )


def _event_offset(opts: dict[str, str], name: str) -> int | None:
    """``{"offset": N}`` given as ``name`` (taken out of ``opts``), else None."""
    text = opts.get(name.lower(), "")
    if not text.strip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None  # said by the per-node parser
    if not isinstance(data, dict) or set(data) != {"offset"}:
        return None
    value = data["offset"]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{name}: the offset must be an integer >= 0, got {value!r}")
    del opts[name.lower()]
    return value


def to_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """Offsets as Spark stores them: string keys, sorted."""
    return {str(node): offsets[node] for node in sorted(offsets)}


def from_json(data: Mapping[str, int] | None) -> Offsets:
    return {} if data is None else {int(k): int(v) for k, v in data.items()}


def limit_offsets(start: Offsets, available: Offsets, limit: int) -> Offsets:
    """End offsets that take at most ``limit`` records in all, shared out in
    proportion to each node's backlog (as the Kafka source does), at least one
    record for the node with the largest backlog so that every call advances.

    ``start`` must name every node of ``available``.
    """
    lag = {n: available[n] - start[n] for n in available}
    total = sum(v for v in lag.values() if v > 0)
    if total <= limit:
        return dict(available)
    end = {}
    taken = 0
    for n in sorted(available):
        share = (limit * lag[n]) // total if lag[n] > 0 else 0
        end[n] = start[n] + share
        taken += share
    # Hand out what rounding down left, biggest remaining backlog first.
    spare = limit - taken
    for n in sorted(available, key=lambda n: (-(available[n] - end[n]), n)):
        if spare <= 0:
            break
        extra = min(spare, available[n] - end[n])
        end[n] += extra
        spare -= extra
    return end
