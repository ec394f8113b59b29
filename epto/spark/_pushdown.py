"""Filters on ``node`` and ``offset`` that the ``epto`` source applies itself.

PySpark 4.1 added ``DataSourceReader.pushFilters``, but Spark calls it only
when ``spark.sql.python.filterPushdown.enabled`` is true (false by default)
and refuses, with ``DATA_SOURCE_PUSHDOWN_DISABLED``, a reader that implements
it while the setting is off. A reader cannot read the session's settings, so
the source tells from its caller: Spark creates the reader in its
filter-pushdown worker only when the setting is on
(:func:`planned_with_pushdown`), and only then is the reader one that takes
filters. Whatever happens, the rows are the same: a filter the source does
not take is evaluated by Spark.

Taken: ``=``, ``<``, ``<=``, ``>``, ``>=`` with an integer on ``node`` or
``offset``, ``IN`` on ``node``, and ``IS NOT NULL`` on either (always
true). They prune whole nodes and cut the offset range of each node before
anything is read.
"""

from __future__ import annotations

import sys
from typing import Any

import attrs

from ._options import Offsets

_NO_LIMIT = 1 << 64
_PUSHDOWN_WORKER = "data_source_pushdown_filters.py"


def planned_with_pushdown(depth: int = 2) -> bool:
    """Whether the reader being created is created by Spark's filter-pushdown
    worker (``pyspark/sql/worker/data_source_pushdown_filters.py``), which runs
    only with ``spark.sql.python.filterPushdown.enabled``. ``depth`` is how far
    up the stack that worker's frame is from the caller of this function."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    return frame.f_code.co_filename.endswith(_PUSHDOWN_WORKER)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@attrs.define
class Pushed:
    """The conjunction of the filters taken: per column, a set of allowed
    values (``node`` only) and a half-open range ``[lo, hi)``."""

    nodes: set[int] | None = None
    node_lo: int = 0
    node_hi: int = _NO_LIMIT
    offset_lo: int = 0
    offset_hi: int = _NO_LIMIT
    taken: list[str] = attrs.field(factory=list)

    def take(self, flt: Any) -> bool:
        """Apply ``flt`` if it is one the source evaluates exactly; ``False`` otherwise."""
        from pyspark.sql.datasource import (
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            IsNotNull,
            LessThan,
            LessThanOrEqual,
        )

        column = getattr(flt, "attribute", None)
        if column not in (("node",), ("offset",)):
            return False
        name = column[0]
        value: Any = getattr(flt, "value", None)
        if isinstance(flt, IsNotNull):
            pass  # node and offset are never NULL
        elif isinstance(flt, In):
            if name != "node" or not all(_integer(v) for v in value):
                return False
            allowed = set(value)
            self.nodes = allowed if self.nodes is None else self.nodes & allowed
        elif not _integer(value):
            return False
        elif isinstance(flt, EqualTo):
            self._bound(name, value, value + 1)
        elif isinstance(flt, GreaterThan):
            self._bound(name, value + 1, _NO_LIMIT)
        elif isinstance(flt, GreaterThanOrEqual):
            self._bound(name, value, _NO_LIMIT)
        elif isinstance(flt, LessThan):
            self._bound(name, 0, value)
        elif isinstance(flt, LessThanOrEqual):
            self._bound(name, 0, value + 1)
        else:
            return False
        self.taken.append(repr(flt))
        return True

    def _bound(self, name: str, lo: int, hi: int) -> None:
        if name == "node":
            self.node_lo, self.node_hi = max(self.node_lo, lo), min(self.node_hi, hi)
        else:
            self.offset_lo, self.offset_hi = max(self.offset_lo, lo), min(self.offset_hi, hi)

    def apply(self, start: Offsets, end: Offsets) -> tuple[Offsets, Offsets]:
        """The ranges ``[start[n], end[n])`` cut to the filters; nodes outside go."""
        keep = [
            n
            for n in end
            if self.node_lo <= n < self.node_hi and (self.nodes is None or n in self.nodes)
        ]
        first = {n: min(end[n], max(start[n], self.offset_lo)) for n in keep}
        last = {n: max(first[n], min(end[n], self.offset_hi)) for n in keep}
        return first, last
