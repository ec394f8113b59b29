"""The fold at the heart of a merge: per event id, the first layer (in the
order given) that holds it.

:func:`fold_groups` takes groups of layers, from the highest ttl down, and
returns, per group, the dict of the ids first met in that group: the merged
layer of that ttl ("keep the larger ttl", EpTO paper, Algorithm 1 lines
12-16). It is most of a round's CPU time in a large group (docs/benchmarks.md,
*Layers indexed by ttl*), so it comes in two builds with the same results:

* the compiled one (``epto.epidemic._cfold``, built from ``epto/epidemic/_cfold.pyx`` with
  Cython when the package is installed with a C compiler at hand): one probe
  of a table of (hash, id) per copy, with the hash the layer's dict already
  stores, and nothing written for a copy already met;
* this module's, in Python: the layers folded into one dict with ``|=``
  (CPython's dict merge, no Python statement per copy), cut into groups by
  the dict's size after each group.

:func:`select` picks one for the process (the command line picks the Python
one when ``EPTO_PURE_PYTHON`` is set in its environment); the tests run both.

For an id whose copies hold different events (a forged or
equivocated id; honest copies share one event), which event the merged
layer keeps is not specified: the Python build keeps the last one folded,
the compiled one the first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice
from typing import TypeAlias

from .._errors import LocalProtocolError
from .._event import Event, EventId

Layer: TypeAlias = dict[EventId, Event]
Group: TypeAlias = Sequence[Layer | None]
Fold: TypeAlias = Callable[[Sequence[Group]], list[Layer | None]]


def fold_groups_python(groups: Sequence[Group]) -> list[Layer | None]:
    """Per group of ``groups`` (None layers skipped), the ids first met in
    it with their events, or None where it brings none."""
    folded: Layer = {}
    cuts: list[int] = []
    for group in groups:
        for layer in group:
            if layer is not None:
                # dict.update without a method call (no argument tuple per layer).
                folded |= layer
        cuts.append(len(folded))
    if len(cuts) == 1:
        return [folded or None]
    out: list[Layer | None] = []
    items = iter(folded.items())
    start = 0
    for end in cuts:
        if end == start:
            out.append(None)
        else:
            out.append(dict(islice(items, end - start)))
            start = end
    return out


def _compiled() -> Fold | None:
    try:
        from ._cfold import fold_groups as compiled
    except ImportError:
        return None
    return compiled


fold_groups_compiled: Fold | None = _compiled()
"""The compiled build, or None where it was not built."""

fold_groups: Fold = fold_groups_compiled or fold_groups_python
"""The build in use (:func:`select`): the compiled one when there is one."""


def select(build: str) -> None:
    """Use the ``"compiled"`` build (an error where it was not built) or the
    ``"python"`` one from now on, in this process (the command line does so
    when ``EPTO_PURE_PYTHON`` is set)."""
    global fold_groups
    if build == "python":
        fold_groups = fold_groups_python
    elif build == "compiled" and fold_groups_compiled is not None:
        fold_groups = fold_groups_compiled
    else:
        raise LocalProtocolError(f"no {build!r} build of the fold here")


def compiled() -> bool:
    """Whether the fold in use is the compiled one (``epto bench core`` says so)."""
    return fold_groups is fold_groups_compiled
