"""The engine handles: what only one engine can be asked, typed, on
``endpoint.engine`` (and on a node's ``node.engine``).

The endpoint protocol (:mod:`._protocol`) holds what every engine does;
operations only one engine has live here, one handle class per engine:
EpTO's full view (:meth:`EptoHandle.add_member`) and clock
(:meth:`EptoHandle.advance_clock`), the token ring's addresses
(:meth:`TokenRingHandle.set_address`), publishing to one atoms group
(:meth:`AtomsHandle.publish`). Each handle lives beside its endpoint; this
module holds what they share.

An operation on a handle is an input to the endpoint. A driver that runs
the endpoint attaches its input path once (:meth:`EngineHandle.attach`): a
context manager every operation runs in, which holds the driver's lock
where it has one and takes a turn soon after (the frames an operation
produced leave, as after a broadcast). A bare endpoint (a test, the
simulator) runs the operations as they are.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager


class EngineHandle:
    """What every handle has: the driver's input path."""

    __slots__ = ("_input",)

    def __init__(self) -> None:
        self._input: AbstractContextManager[object] = contextlib.nullcontext()

    def attach(self, inputs: AbstractContextManager[object]) -> None:
        """Run every operation of this handle inside ``inputs`` (a reusable
        context manager: the driver's lock, and a turn soon after)."""
        self._input = inputs
