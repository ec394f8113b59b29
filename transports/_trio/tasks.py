"""The task-owning part shared by the trio nodes (EpTO's and the token ring's).

A node is an async context manager that owns its tasks: entering it opens a
nursery, leaving it without an error calls ``aclose()`` (a graceful stop),
leaving it with an error calls ``abort()``, and then waits for the tasks.
Each task runs in its own cancel scope, so that stopping the node cancels its
tasks and never the code that entered the node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import trio

from epto import LocalProtocolError


class TaskOwner:
    """Lifecycle states ``new``, ``running``, ``closing``, ``closed``, the
    nursery and the cancel scopes of a node's tasks."""

    def __init__(self) -> None:
        self._state = "new"
        self._nursery_cm: Any = None
        self._nursery: trio.Nursery | None = None
        self._scopes: list[trio.CancelScope] = []

    def _check_new(self) -> None:
        if self._state != "new":
            raise LocalProtocolError("a node can be entered once")

    async def _open_tasks(self) -> None:
        """Open the nursery of the node's tasks; the node is running."""
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        self._state = "running"

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        # Each task runs in its own cancel scope: cancelling the nursery's
        # scope would also cancel the body of the 'async with' that entered
        # the node (code calling abort() on its own node).
        scope = trio.CancelScope()
        self._scopes.append(scope)
        if self._state == "closed":
            scope.cancel()

        async def run() -> None:
            with scope:
                await fn(*args)

        assert self._nursery is not None
        self._nursery.start_soon(run)

    def _cancel_tasks(self) -> bool:
        """Mark the node closed and cancel its tasks; False if it was closed already."""
        if self._state == "closed":
            return False
        self._state = "closed"
        for scope in self._scopes:
            scope.cancel()
        return True

    async def aclose(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            if exc_type is None:
                await self.aclose()
            else:
                self.abort()
        finally:
            result: bool | None = await self._nursery_cm.__aexit__(exc_type, exc, tb)
        return result
