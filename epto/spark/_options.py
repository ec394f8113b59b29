"""Options of the ``epto`` Spark source, parsed without Spark.

Offsets are delivery indices per node, written as JSON like the Kafka
source's: ``{"3": 120, "4": -2}``; the index is the next record to read
(offsets are exclusive ends), ``-2`` means earliest and ``-1`` latest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from .._errors import ConfigurationError

EARLIEST = -2
LATEST = -1

Offsets = dict[int, int]
"""Node id -> delivery index (or EARLIEST / LATEST in a user's option)."""


@attrs.frozen(kw_only=True, slots=True)
class SourceOptions:
    path: str
    starting: str | Offsets
    """``"earliest"``, ``"latest"`` or per-node indices."""
    ending: str | Offsets
    """``"latest"`` or per-node indices (batch reads only)."""
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    max_records_per_partition: int


def _offsets(name: str, text: str, words: tuple[str, ...]) -> str | Offsets:
    word = text.strip().lower()
    if word in words:
        return word
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigurationError(
            f"{name} must be one of {', '.join(words)} or a JSON object, got {text!r}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{name} must be a JSON object of node -> index, got {text!r}")
    out: Offsets = {}
    for key, value in data.items():
        if not str(key).isdigit() or not isinstance(value, int) or isinstance(value, bool):
            raise ConfigurationError(f"{name}: bad entry {key!r}: {value!r}")
        if value < EARLIEST:
            raise ConfigurationError(f"{name}: index of node {key} must be >= -2, got {value}")
        out[int(key)] = value
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


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the reader's options (case-insensitive keys, as Spark passes them)."""
    opts = {k.lower(): v for k, v in options.items()}
    path = opts.get("path")
    if not path:
        raise ConfigurationError("the epto source needs a path: .load(LOGDIR) or .option('path')")
    starting = _offsets(
        "startingOffsets",
        opts.get("startingoffsets", "latest" if streaming else "earliest"),
        ("earliest", "latest"),
    )
    if streaming and "endingoffsets" in opts:
        raise ConfigurationError("endingOffsets applies to batch reads only")
    if not streaming and "maxoffsetspertrigger" in opts:
        raise ConfigurationError("maxOffsetsPerTrigger applies to streaming reads only")
    if not streaming and starting == "latest":
        raise ConfigurationError("startingOffsets=latest is not allowed for batch reads")
    ending = _offsets("endingOffsets", opts.get("endingoffsets", "latest"), ("latest",))
    if isinstance(ending, dict) and EARLIEST in ending.values():
        raise ConfigurationError("endingOffsets: -2 (earliest) is not allowed")
    limit = opts.get("maxoffsetspertrigger")
    return SourceOptions(
        path=path,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=None if limit is None else _positive("maxOffsetsPerTrigger", limit),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        max_records_per_partition=_positive(
            "maxRecordsPerPartition", opts.get("maxrecordsperpartition", "1000000")
        ),
    )


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
