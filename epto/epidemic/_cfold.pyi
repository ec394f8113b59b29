"""The compiled build of :func:`epto.epidemic._fold.fold_groups` (``epto/epidemic/_cfold.pyx``)."""

from collections.abc import Sequence

from .._event import Event, EventId

def fold_groups(
    groups: Sequence[Sequence[dict[EventId, Event] | None]],
) -> list[dict[EventId, Event] | None]: ...
