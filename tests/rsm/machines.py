"""State machines the replicated-state-machine tests share."""

from __future__ import annotations

import json

from epto.rsm import StateMachine, replicated


class KV(StateMachine):
    """A key-value store with counters and a command that always fails."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}

    @replicated
    def set(self, key: str, value: object) -> object:
        old = self.data.get(key)
        self.data[key] = value
        return old

    @replicated
    def incr(self, key: str, by: int = 1) -> int:
        value = int(self.data.get(key, 0)) + by  # type: ignore[call-overload]
        self.data[key] = value
        return value

    @replicated
    def fail(self, key: str) -> None:
        self.data[key] = "half-done"
        raise KeyError(key)

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, state: bytes) -> None:
        self.data = json.loads(state)
