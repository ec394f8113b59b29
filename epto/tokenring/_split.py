"""The token ring's splitting rules, registered with its message kinds
(``FrameKind.split``): a catch-up, a batch of broadcasts or an order notice
too big for one frame is cut in halves, in order, so that receiving the
parts one after the other is receiving the whole. Each part of a catch-up
keeps ``stable`` and ``oldest``, each part of a notice its state (learning
it twice is learning it once). A token too big with the payloads it carries
goes as a catch-up of those payloads (``stable`` and ``oldest`` 0: it
claims nothing) followed by the token without them. The codec
(``epto.wire.FrameCodec``) halves again until every part fits, or raises
when a part of one element still does not.
"""

from __future__ import annotations

import attrs

from ..wire._frames import FrameRegistry
from ._frames import token_ring_registry
from ._messages import Catchup, DataBatch, Order, Token


def split_message(message: object) -> tuple[object, object] | None:
    """``message`` in two parts, in order, or None when it cannot be split."""
    if isinstance(message, DataBatch):
        if len(message.events) < 2:
            return None
        half = len(message.events) // 2
        return DataBatch(events=message.events[:half]), DataBatch(events=message.events[half:])
    if isinstance(message, Order):
        if len(message.assigned) < 2:
            return None
        half = len(message.assigned) // 2
        return (
            attrs.evolve(message, assigned=message.assigned[:half]),
            attrs.evolve(message, assigned=message.assigned[half:]),
        )
    if isinstance(message, Token):
        if not message.events:
            return None
        return Catchup(entries=(), events=message.events), attrs.evolve(message, events=())
    if isinstance(message, Catchup):
        n, m = len(message.entries), len(message.events)
        if n + m < 2:
            return None
        if n >= 2:
            return (
                attrs.evolve(message, entries=message.entries[: n // 2], events=()),
                attrs.evolve(message, entries=message.entries[n // 2 :]),
            )
        return (
            attrs.evolve(message, events=message.events[: m // 2]),
            attrs.evolve(message, entries=(), events=message.events[m // 2 :]),
        )
    return None


_SPLITTABLE = (DataBatch, Order, Catchup, Token)


def splitting_registry() -> FrameRegistry:
    """A new registry with every token-ring kind (:func:`token_ring_registry`),
    the kinds that may outgrow a frame carrying their splitting rule: the
    registry a token-ring endpoint's codec is built with."""
    return FrameRegistry(
        tuple(
            attrs.evolve(kind, split=split_message) if kind.type in _SPLITTABLE else kind
            for kind in token_ring_registry()
        )
    )
