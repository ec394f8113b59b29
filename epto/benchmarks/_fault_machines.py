"""The state machines the fault suite replicates (``epto bench faults``).

* :class:`RegisterStore`: registers by key; ``write(key, value)`` returns
  None, ``read(key)`` the value (None if never written), ``cas(key, expected,
  new)`` whether it swapped. Every command, reads included, goes through the
  order, so a client's read is a point of the history like its writes.
* :class:`GrowSet`: ``add(element)`` and ``read()`` (the sorted elements).

Both snapshot to canonical JSON (sorted keys), so two replicas with the same
state have the same snapshot bytes, and :meth:`state` is what a worker reports
for the final comparison.
"""

from __future__ import annotations

import json
from typing import Any

from epto.rsm import StateMachine, replicated

__all__ = ["MACHINES", "GrowSet", "RegisterStore", "make_machine"]


class RegisterStore(StateMachine):
    """Registers by key (JSON values)."""

    def __init__(self) -> None:
        self.registers: dict[str, Any] = {}

    @replicated
    def write(self, key: str, value: Any) -> None:
        self.registers[str(key)] = value

    @replicated
    def read(self, key: str) -> Any:
        return self.registers.get(str(key))

    @replicated
    def cas(self, key: str, expected: Any, new: Any) -> bool:
        key = str(key)
        if self.registers.get(key) != expected:
            return False
        self.registers[key] = new
        return True

    def state(self) -> Any:
        return dict(self.registers)

    def snapshot(self) -> bytes:
        return json.dumps(self.registers, sort_keys=True, separators=(",", ":")).encode()

    def restore(self, state: bytes) -> None:
        registers = json.loads(state)
        if not isinstance(registers, dict):
            raise ValueError("a register store's snapshot is a JSON object")
        self.registers = registers


class GrowSet(StateMachine):
    """A grow-only set of JSON scalars (ints and strings, kept apart)."""

    def __init__(self) -> None:
        self.elements: set[Any] = set()

    @replicated
    def add(self, element: Any) -> None:
        if not isinstance(element, (int, str)) or isinstance(element, bool):
            raise TypeError("a set element is an int or a string")
        self.elements.add(element)

    @replicated
    def read(self) -> list[Any]:
        return _sorted(self.elements)

    def state(self) -> Any:
        return _sorted(self.elements)

    def snapshot(self) -> bytes:
        return json.dumps(_sorted(self.elements), separators=(",", ":")).encode()

    def restore(self, state: bytes) -> None:
        elements = json.loads(state)
        if not isinstance(elements, list):
            raise ValueError("a set's snapshot is a JSON array")
        self.elements = set(elements)


def _sorted(elements: set[Any]) -> list[Any]:
    return sorted(elements, key=lambda e: (isinstance(e, str), e))


MACHINES: dict[str, type[RegisterStore] | type[GrowSet]] = {
    "register": RegisterStore,
    "set": GrowSet,
}
"""Workload name to machine class (``--workload``)."""


def make_machine(workload: str) -> RegisterStore | GrowSet:
    return MACHINES[workload]()
