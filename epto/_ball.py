"""Balls stored as layers of copies that share a ttl, and their merge.

A ball is a ``Mapping[EventId, (Event, ttl)]`` (:data:`epto.Ball`). The
process builds :class:`LayeredBall` objects: the same mapping, stored as
``{ttl: {event id: event}}``. Gossip makes every process receive the same
events again and again (K balls a round, each with nearly every event in
flight), and in this layout the work a receiver does per copy is done by
CPython's dict and set operations instead of a loop of Python statements:

* the receiver keeps the balls of a round as they are (an append) and reads
  the ball's precomputed largest timestamp for its clock;
* at the round, :func:`merge_layers` unions the layers from the highest ttl
  down, dropping ids already taken at a higher ttl ("keep the larger ttl",
  EpTO paper, Algorithm 1 lines 12-16) and every ttl at or above TTL (line 12);
* the merged layers, each ttl plus one, are the next ball as they stand: no
  entry is copied to age it (lines 21-22).

Every dict in a layered ball is shared between balls and processes and is
never mutated once the ball exists.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from itertools import chain
from operator import attrgetter
from typing import TypeAlias

from ._event import BallEntry, Event, EventId

Layers: TypeAlias = dict[int, dict[EventId, Event]]
"""``{ttl: {event id: event}}``; an id is in one layer only."""

_ts = attrgetter("ts")


class LayeredBall(Mapping[EventId, BallEntry]):
    """A ball: an immutable mapping from event id to ``(event, ttl)``.

    ``LayeredBall(mapping)`` or ``LayeredBall(iterable of (id, (event, ttl)))``
    builds one from entries (a decoder may do so to hand the process a ball
    it can take without a per-copy loop; a plain dict is accepted too).
    Equal to any mapping with the same entries; iteration visits the copies
    layer by layer (by ttl), not in insertion order.
    """

    __slots__ = ("_layers", "_size", "max_ts")

    _layers: Layers
    _size: int
    max_ts: int
    """Largest timestamp of the ball's events (0 for an empty ball)."""

    def __init__(
        self, entries: Mapping[EventId, BallEntry] | Iterable[tuple[EventId, BallEntry]] = ()
    ) -> None:
        if not isinstance(entries, Mapping):
            entries = dict(entries)
        layers: Layers = {}
        max_ts = 0
        for eid, (event, ttl) in entries.items():
            layer = layers.get(ttl)
            if layer is None:
                layers[ttl] = layer = {}
            layer[eid] = event
            if event.ts > max_ts:
                max_ts = event.ts
        self._layers = dict(sorted(layers.items()))
        self._size = len(entries)
        self.max_ts = max_ts

    @classmethod
    def from_layers(cls, layers: Mapping[int, Mapping[EventId, Event]]) -> LayeredBall:
        """A ball from ``{ttl: {event id: event}}`` (copied); an id may be in
        one layer only (``ValueError`` otherwise)."""
        copied: Layers = {ttl: dict(layer) for ttl, layer in sorted(layers.items()) if layer}
        ids: set[EventId] = set()
        for layer in copied.values():
            ids.update(layer)
        if len(ids) != sum(map(len, copied.values())):
            raise ValueError("an event id is in more than one layer")
        return cls._of_layers(copied)

    @classmethod
    def _of_layers(cls, layers: Layers) -> LayeredBall:
        """Wrap ``layers`` (ids unique across layers, dicts never mutated again)."""
        ball = cls.__new__(cls)
        ball._layers = layers
        ball._size = sum(map(len, layers.values()))
        ball.max_ts = max(
            (max(map(_ts, layer.values()), default=0) for layer in layers.values()), default=0
        )
        return ball

    @property
    def layers(self) -> Mapping[int, Mapping[EventId, Event]]:
        """``{ttl: {event id: event}}`` in increasing ttl; read only."""
        return self._layers

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[EventId]:
        return chain.from_iterable(self._layers.values())

    def __contains__(self, key: object) -> bool:
        return any(key in layer for layer in self._layers.values())

    def __getitem__(self, key: EventId) -> BallEntry:
        for ttl, layer in self._layers.items():
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
        for ttl, layer in self._mapping._layers.items():
            for eid, event in layer.items():
                yield eid, (event, ttl)


class _Values(ValuesView[BallEntry]):
    _mapping: LayeredBall

    def __iter__(self) -> Iterator[BallEntry]:
        for ttl, layer in self._mapping._layers.items():
            for event in layer.values():
                yield (event, ttl)


_COPIES_PER_LAYER = 6
"""Below this many copies per layer on average, merging copy by copy beats
merging layer by layer (measured with ``epto bench core`` and simulations)."""


def merge_layers(sources: list[Layers], limit: int) -> Layers:
    """Per event id, the largest ttl below ``limit`` among ``sources``.

    Returns layers in increasing ttl; the result may share layer dicts with
    the sources (they are never mutated). Large layers (many events per ttl:
    busy groups) are merged layer by layer with dict and set operations;
    small ones (few events in flight) copy by copy, which costs less than
    one dict operation per layer.
    """
    if len(sources) == 1:
        only = sources[0]
        if all(t < limit for t in only):
            return only
    layer_count = 0
    copies = 0
    for layers in sources:
        layer_count += len(layers)
        copies += sum(map(len, layers.values()))
    if copies < _COPIES_PER_LAYER * layer_count:
        return _merge_by_copy(sources, limit)
    return _merge_by_layer(sources, limit)


def _merge_by_copy(sources: list[Layers], limit: int) -> Layers:
    best: dict[EventId, int] = {}
    events: dict[EventId, Event] = {}
    get = best.get
    for layers in sources:
        for t, layer in layers.items():
            if t >= limit:
                continue
            for eid, event in layer.items():
                current = get(eid)
                if current is None:
                    best[eid] = t
                    events[eid] = event
                elif current < t:
                    best[eid] = t
    merged: Layers = {}
    for eid, t in best.items():
        out = merged.get(t)
        if out is None:
            merged[t] = out = {}
        out[eid] = events[eid]
    return dict(sorted(merged.items()))


def _merge_by_layer(sources: list[Layers], limit: int) -> Layers:
    ttls = sorted({t for layers in sources for t in layers if t < limit}, reverse=True)
    merged: Layers = {}
    placed: set[EventId] = set()
    for t in ttls:
        layer: dict[EventId, Event] | None = None
        shared = False
        for layers in sources:
            part = layers.get(t)
            if not part:
                continue
            if layer is None:
                layer = part
                shared = True
            else:
                if shared:
                    layer = dict(layer)
                    shared = False
                layer.update(part)
        if layer is None:
            continue
        if placed:
            taken = layer.keys() & placed
            if taken:
                if shared:
                    layer = dict(layer)
                for eid in taken:
                    del layer[eid]
                if not layer:
                    continue
        placed.update(layer)
        merged[t] = layer
    return dict(reversed(merged.items()))
