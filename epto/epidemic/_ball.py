"""Balls stored as layers of copies that share a ttl, and their merge.

A ball is a ``Mapping[EventId, (Event, ttl)]`` (:data:`epto.Ball`). The
process builds :class:`LayeredBall` objects: the same mapping, stored as
layers ``(ttl, {event id: event})``. Gossip makes every process receive the
same events again and again (K balls a round, each with nearly every event in
flight), and in this layout the work a receiver does per copy is done by
CPython's dict operations instead of a loop of Python statements:

* the receiver keeps the balls of a round as they are (an append) and reads
  the ball's precomputed largest timestamp for its clock;
* at the round, :func:`merge_parts` takes the layers of every ball from the
  highest ttl down and folds them into one dict with ``dict.update``: an id
  enters the dict at the first (highest) ttl it has, so the dict's order is
  by largest ttl ("keep the larger ttl", EpTO paper, Algorithm 1 lines
  12-16) and the dict's size after each ttl cuts it into the merged layers;
  ttls at or above TTL are skipped (line 12);
* the merged layers, each ttl plus one, are the next ball as they stand: no
  entry is copied to age it (lines 21-22).

Each ball also keeps its layers indexed by ttl (a list, None where it has no
layer), built once by whoever builds the ball (the sender, for a merged
ball) and read by each of its K receivers: :func:`merge_balls` finds the
layers of one ttl across the round's balls with one ``zip_longest`` of these
lists, where sorting the parts of every ball by ttl cost about a tenth of
the round at small n (hundreds of parts of a few copies each). A ball with a
ttl that is not an int in ``[0, 4096)`` keeps no index (a ball built from
arbitrary entries allocates no more than that), nor does a sparse ball (fewer
parts than one per four ttls: the index would cost more memory than the
parts); a merge that includes one sorts, as :func:`merge_parts` does; both
give the same ball.

Each layer carries bounds on its events' timestamps, a *floor* (at most the
smallest) and a *top* (at least the largest), exact for a ball built from
entries and derived, for a merged ball, from the bounds of the layers merged
into it without reading an event: the ball's ``max_ts`` is the largest top,
and the ordering component skips the timestamp test of a layer whose floor is
above the last delivered timestamp.

Every dict in a layered ball is shared between balls and processes and is
never mutated once the ball exists. The process and the ordering component
read the layers through :attr:`LayeredBall.parts` and
:attr:`LayeredBall.dense_index`.

Size: the ball and its two merges (about 430 lines) stay together: the
merges build balls in the layout the ball keeps, and read it.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from itertools import chain, islice, zip_longest
from operator import attrgetter, itemgetter
from typing import TypeAlias

from .._event import BallEntry, Event, EventId
from . import _fold

Layers: TypeAlias = dict[int, dict[EventId, Event]]
"""``{ttl: {event id: event}}``; an id is in one layer only."""

Part: TypeAlias = tuple[int, dict[EventId, Event], int, int]
"""A layer of a ball: ``(ttl, {event id: event}, floor, top)``, where every
event's timestamp is at least ``floor`` and at most ``top``."""

Dense: TypeAlias = list[dict[EventId, Event] | None]
"""A ball's layers indexed by ttl: ``dense[ttl]`` is the layer of that ttl,
or None where the ball has none."""

_DENSE_TTLS = 4096
"""Balls with a ttl at or above this (or one that is not an int, or negative)
keep no dense index; merges that include one sort their parts instead. It
bounds the index a ball built from arbitrary entries allocates."""

_TTLS_PER_PART = 4
"""Balls with fewer parts than one per this many index entries (a few events
at high ttls, as in a large group with little traffic) keep no dense index
either: it would cost more memory than their parts, for a merge of a few
parts that sorting does cheaply."""

_ts = attrgetter("ts")
_ttl_of = itemgetter(0)
_parts_attr = attrgetter("_parts")
_dense_index = attrgetter("_dense")


def _dense_of(parts: list[Part]) -> Dense | None:
    """The dense index of ``parts`` (by increasing ttl), or None when a ttl
    is not an int in ``[0, _DENSE_TTLS)``."""
    if not parts:
        return []
    high = parts[-1][0]
    if type(high) is not int or not 0 <= high < _DENSE_TTLS:
        return None
    if _TTLS_PER_PART * len(parts) <= high:
        return None
    dense: Dense = [None] * (high + 1)
    for ttl, layer, _, _ in parts:
        if type(ttl) is not int or ttl < 0:
            return None
        dense[ttl] = layer
    return dense


def _parts_of(layers: Iterable[tuple[int, dict[EventId, Event]]]) -> list[Part]:
    """Parts of ``(ttl, layer)`` pairs (by increasing ttl, none empty) with
    exact bounds: every event's timestamp is read."""
    parts: list[Part] = []
    for ttl, layer in layers:
        stamps = list(map(_ts, layer.values()))
        parts.append((ttl, layer, min(stamps), max(stamps)))
    return parts


def _bounded(layers: list[tuple[int, dict[EventId, Event]]], merged: list[Part]) -> list[Part]:
    """Parts of merged ``layers`` with bounds taken from the parts ``merged``
    into them (by decreasing ttl) without reading an event: an id's event
    comes from a part at or below its ttl, so a merged layer's floor is the
    smallest floor at or below its ttl and its top the largest top."""
    bounds: dict[int, tuple[int, int]] = {}
    _, _, low, high = merged[-1]
    for ttl, _, floor, top in reversed(merged):
        if floor < low:
            low = floor
        if top > high:
            high = top
        bounds[ttl] = (low, high)
    return [(ttl, layer, *bounds[ttl]) for ttl, layer in layers]


class LayeredBall(Mapping[EventId, BallEntry]):
    """A ball: an immutable mapping from event id to ``(event, ttl)``.

    ``LayeredBall(mapping)`` or ``LayeredBall(iterable of (id, (event, ttl)))``
    builds one from entries (a decoder may do so to hand the process a ball
    it can take without a per-copy loop; a plain dict is accepted too).
    Equal to any mapping with the same entries; iteration visits the copies
    layer by layer (by ttl), not in insertion order.
    """

    __slots__ = ("_dense", "_layers", "_parts", "_size", "max_ts")

    _parts: list[Part]
    _dense: Dense | None
    _layers: Layers | None
    _size: int
    max_ts: int
    """Largest timestamp of the ball's events (0 for an empty ball). For a
    ball a process merged from copies that disagree on an event (a forged or
    equivocated id), it may be the timestamp of a dropped copy: an upper bound."""

    def __init__(
        self, entries: Mapping[EventId, BallEntry] | Iterable[tuple[EventId, BallEntry]] = ()
    ) -> None:
        if not isinstance(entries, Mapping):
            entries = dict(entries)
        layers: Layers = {}
        for eid, (event, ttl) in entries.items():
            layer = layers.get(ttl)
            if layer is None:
                layers[ttl] = layer = {}
            layer[eid] = event
        self._parts = _parts_of(sorted(layers.items()))
        self._dense = _dense_of(self._parts)
        self._layers = None
        self._size = len(entries)
        self.max_ts = max(map(itemgetter(3), self._parts), default=0)

    @classmethod
    def from_layers(cls, layers: Mapping[int, Mapping[EventId, Event]]) -> LayeredBall:
        """A ball from ``{ttl: {event id: event}}`` (copied); an id may be in
        one layer only (``ValueError`` otherwise)."""
        copied: Layers = {ttl: dict(layer) for ttl, layer in sorted(layers.items()) if layer}
        ids: set[EventId] = set()
        for layer in copied.values():
            ids.update(layer)
        size = sum(map(len, copied.values()))
        if len(ids) != size:
            raise ValueError("an event id is in more than one layer")
        parts = _parts_of(copied.items())
        return cls._of_parts(parts, size, max(map(itemgetter(3), parts), default=0))

    @classmethod
    def _of_parts(cls, parts: list[Part], size: int, max_ts: int) -> LayeredBall:
        """Wrap ``parts`` (by increasing ttl, none empty, ids unique across
        them, dicts never mutated again; ``size`` copies, ``max_ts`` their
        largest top)."""
        ball = cls.__new__(cls)
        ball._parts = parts
        ball._dense = _dense_of(parts)
        ball._layers = None
        ball._size = size
        ball.max_ts = max_ts
        return ball

    @classmethod
    def _with_dense(
        cls, parts: list[Part], dense: Dense | None, size: int, max_ts: int
    ) -> LayeredBall:
        """:meth:`_of_parts` with the dense index of ``parts`` given:
        ``dense[ttl]`` is the layer of each part and None at every other
        index (trailing Nones allowed; every ttl is an int at least 0), or
        None for no index."""
        ball = cls.__new__(cls)
        ball._parts = parts
        ball._dense = dense
        ball._layers = None
        ball._size = size
        ball.max_ts = max_ts
        return ball

    @classmethod
    def of_layer(cls, ttl: int, layer: dict[EventId, Event]) -> LayeredBall:
        """A ball of one non-empty layer of ``ttl`` (an int in ``[0, 4096)``),
        which it shares: the caller never mutates ``layer`` again while the
        ball is in use (a process's own events, put in a round's merge)."""
        stamps = list(map(_ts, layer.values()))
        top = max(stamps)
        dense: Dense = [None] * (ttl + 1)
        dense[ttl] = layer
        return cls._with_dense([(ttl, layer, min(stamps), top)], dense, len(layer), top)

    @property
    def parts(self) -> Sequence[Part]:
        """The layers as :data:`Part` tuples ``(ttl, {event id: event}, floor,
        top)`` by increasing ttl, none empty: what the process and the
        ordering component read instead of entries. Shared between balls:
        read only."""
        return self._parts

    @property
    def dense_index(self) -> Sequence[dict[EventId, Event] | None] | None:
        """The layers indexed by ttl (:data:`Dense`), or None for a ball that
        keeps no index (a ttl out of ``[0, 4096)``, or a sparse ball); every
        ttl of the ball is below its length. Read only."""
        return self._dense

    @property
    def layers(self) -> Mapping[int, Mapping[EventId, Event]]:
        """``{ttl: {event id: event}}`` in increasing ttl; read only."""
        layers = self._layers
        if layers is None:
            self._layers = layers = {ttl: layer for ttl, layer, _, _ in self._parts}
        return layers

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[EventId]:
        return chain.from_iterable(part[1] for part in self._parts)

    def __contains__(self, key: object) -> bool:
        return any(key in part[1] for part in self._parts)

    def __getitem__(self, key: EventId) -> BallEntry:
        for ttl, layer, _, _ in self._parts:
            event = layer.get(key)
            if event is not None:
                return (event, ttl)
        raise KeyError(key)

    def items(self) -> ItemsView[EventId, BallEntry]:
        return _Items(self)

    def values(self) -> ValuesView[BallEntry]:
        return _Values(self)

    def __repr__(self) -> str:
        return f"LayeredBall({dict(self.items())!r})"


class CheckedBall(dict[EventId, BallEntry]):
    """A ball (a plain ``dict``) whose entries a decoder has already checked:
    every id is the event's ``(source, seq)``, source, seq and ts are uint64,
    the ttl is in ``[0, 65535]``, the payload and the signature are ``bytes``
    (the signature empty or 64 bytes). ``Process.receive`` then checks only
    the timestamp ceiling per copy; any other mapping is checked in full.
    Build one only from values checked like that (``epto.FrameCodec`` does)."""

    __slots__ = ()


class _Items(ItemsView[EventId, BallEntry]):
    _mapping: LayeredBall

    def __iter__(self) -> Iterator[tuple[EventId, BallEntry]]:
        for ttl, layer, _, _ in self._mapping._parts:
            for eid, event in layer.items():
                yield eid, (event, ttl)


class _Values(ValuesView[BallEntry]):
    _mapping: LayeredBall

    def __iter__(self) -> Iterator[BallEntry]:
        for ttl, layer, _, _ in self._mapping._parts:
            for event in layer.values():
                yield (event, ttl)


_EVENTS_PER_PART = 4
"""Merges with fewer merged events than this many per part merged read the
events' timestamps for the bounds (small groups: a few events per ttl);
larger ones derive the bounds from the parts (measured with ``epto bench core``)."""


def merge_parts(sources: list[list[Part]], limit: int) -> tuple[list[Part], int, int]:
    """Per event id, the copy with the largest ttl below ``limit`` among the
    balls ``sources``: ``(parts by increasing ttl, copies, largest top)``.

    The result may share layer dicts with the sources (they are never
    mutated). Layers are folded into one dict from the highest ttl down
    (``dict.update``, no Python statement per copy): an id is inserted at its
    largest ttl and keeps its place when lower copies update it, so the
    dict's order is by largest ttl and its size after each ttl tells where
    the merged layer of that ttl ends. The event kept for an id is the one of
    the last copy folded in (all copies of an honest id hold equal events).
    """
    if len(sources) == 1:
        only = sources[0]
        if not only:
            return only, 0, 0
        if only[-1][0] < limit:
            return only, sum(len(part[1]) for part in only), max(map(itemgetter(3), only))
    # Every source is sorted by ttl: sorting their concatenation merges runs.
    entries = sorted(chain.from_iterable(sources), key=_ttl_of, reverse=True)
    skip = 0
    for entry in entries:
        if entry[0] < limit:
            break
        skip += 1
    if skip == len(entries):
        return [], 0, 0
    # The layers of each ttl, from the highest, folded (fold_groups).
    groups: list[list[dict[EventId, Event]]] = []
    ttls: list[int] = []
    current = None
    for ttl, layer, _, _ in islice(entries, skip, None):
        if ttl != current:
            groups.append([])
            ttls.append(ttl)
            current = ttl
        groups[-1].append(layer)
    layers = [
        (ttl, layer) for ttl, layer in zip(ttls, _fold.fold_groups(groups), strict=True) if layer
    ]
    layers.reverse()
    size = sum(len(layer) for _, layer in layers)
    if size < _EVENTS_PER_PART * (len(entries) - skip):
        # Few events, many parts: reading every merged event's timestamp
        # costs less than a statement per part, and gives exact bounds.
        parts = _parts_of(layers)
    else:
        parts = _bounded(layers, entries[skip:])
    # The highest layer's top bounds every other (see _bounded).
    return parts, size, max(map(itemgetter(3), parts))


def merge_balls(balls: list[LayeredBall], limit: int, age: int = 0) -> LayeredBall:
    """The copies of ``balls`` whose ttl is below ``limit``, the largest ttl
    kept per event id (as :func:`merge_parts` computes them, with the same
    bounds), every ttl raised by ``age``: the next ball when ``age`` is 1.

    Each ball keeps its layers indexed by ttl (``_dense``, built once by
    whoever builds the ball and shared by its receivers), so the layers of a
    ttl across the balls are one ``zip_longest`` away: no sort of the
    round's parts (hundreds at small n, a few copies each) and no statement
    per part but the fold itself. A ball without the index (a ttl out of its
    range) sends the whole merge through :func:`merge_parts`.
    """
    denses = list(map(_dense_index, balls))
    if len(balls) < 2 or None in denses:
        merged, size, max_ts = merge_parts(list(map(_parts_attr, balls)), limit)
        if age:
            merged = [(ttl + age, layer, low, high) for ttl, layer, low, high in merged]
        return LayeredBall._of_parts(merged, size, max_ts)
    groups = list(zip_longest(*denses))
    # Parts at or above the limit are dropped (line 12); how many parts are
    # merged decides how the bounds are found (as in merge_parts).
    dropped = 0
    for group in islice(groups, limit, None):
        dropped += len(group) - group.count(None)
    del groups[limit:]
    count = sum(map(len, map(_parts_attr, balls))) - dropped
    if not count:
        return LayeredBall._of_parts([], 0, 0)
    layers: list[tuple[int, dict[EventId, Event]]] = []
    ttl = len(groups)
    for layer in _fold.fold_groups(groups[::-1]):
        ttl -= 1
        if layer:
            layers.append((ttl, layer))
    layers.reverse()
    size = sum(len(layer) for _, layer in layers)
    dense: Dense = [None] * (len(groups) + age)
    for ttl, layer in layers:
        dense[ttl + age] = layer
    if size < _EVENTS_PER_PART * count:
        # Few events, many parts: the merged events' timestamps, read once,
        # give exact bounds (as _parts_of).
        parts = [(ttl + age, layer, low, high) for ttl, layer, low, high in _parts_of(layers)]
    else:
        entries = sorted(chain.from_iterable(map(_parts_attr, balls)), key=_ttl_of, reverse=True)
        parts = _bounded(layers, entries[-count:])
        if age:
            parts = [(ttl + age, layer, low, high) for ttl, layer, low, high in parts]
    top = max(map(itemgetter(3), parts))
    return LayeredBall._with_dense(parts, _unless_sparse(dense, parts), size, top)


def _unless_sparse(dense: Dense, parts: list[Part]) -> Dense | None:
    """``dense``, or None for a sparse ball (see ``_TTLS_PER_PART``)."""
    return None if _TTLS_PER_PART * len(parts) < len(dense) else dense
