"""Incarnations: how a member started again under its own id is told from
the process that ran before it (DESIGN.md section 12).

Rules:

* A member is its process id. Each start of a process under that id is one
  *incarnation*, a number that only grows from one start to the next: the
  number stored in the member's data directory plus one, and never less than
  the wall clock's seconds since :data:`INCARNATION_EPOCH`, so that a member
  started without its data directory still draws a number above every start
  of more than a second ago (:func:`next_incarnation`).
* The incarnation is the high 31 bits of every sequence number the member
  gives its events (:func:`first_seq`): seq = incarnation << 32 | count. An
  event id ``(source, seq)`` is therefore never reused by a later start, and
  the ids of a later start are above all of an earlier one's, which is what
  the ordering's per-source duplicate test (``_ordering.py``) needs. The 31
  bits keep every seq a signed 64-bit integer (the delivery log's and Spark's
  ``seq`` columns); 2**32 broadcasts fit in one incarnation.
* Incarnation 0 numbers events from 0, as the paper does: the core's default
  and the simulator's, where no process restarts.
"""

from __future__ import annotations

import math
from typing import Final

from ._errors import LocalProtocolError

INCARNATION_BITS: Final = 31
"""Bits of a sequence number that hold the incarnation."""
COUNT_BITS: Final = 32
"""Bits of a sequence number that count one incarnation's broadcasts."""
MAX_INCARNATION: Final = (1 << INCARNATION_BITS) - 1
COUNT_MASK: Final = (1 << COUNT_BITS) - 1

INCARNATION_EPOCH: Final = 1_735_689_600
"""2025-01-01T00:00:00Z in Unix seconds: incarnations drawn from the wall
clock count seconds from here (31 bits last until 2093)."""


def check_incarnation(incarnation: object) -> int:
    """``incarnation`` if it is an int in ``[0, MAX_INCARNATION]``; else raise."""
    if not isinstance(incarnation, int) or isinstance(incarnation, bool):
        raise LocalProtocolError(f"incarnation must be an int, got {incarnation!r}")
    if not 0 <= incarnation <= MAX_INCARNATION:
        raise LocalProtocolError(f"incarnation {incarnation} out of [0, {MAX_INCARNATION}]")
    return incarnation


def next_incarnation(stored: int | None, wall_seconds: float) -> int:
    """The incarnation of a new start: above ``stored`` (the last start's, kept
    in the data directory; None without one) and at least the wall clock's
    seconds since :data:`INCARNATION_EPOCH`."""
    drawn = max(1, math.floor(wall_seconds) - INCARNATION_EPOCH)
    candidate = drawn if stored is None else max(stored + 1, drawn)
    return check_incarnation(min(candidate, MAX_INCARNATION))


def first_seq(incarnation: int) -> int:
    """The sequence number of an incarnation's first event."""
    return check_incarnation(incarnation) << COUNT_BITS


def incarnation_of(seq: int) -> int:
    """The incarnation that gave an event this sequence number."""
    return seq >> COUNT_BITS
