"""The ``with`` statement of the nodes whose API is synchronous (ZeroMQ's,
:class:`~epto.transports.blocking.BlockingNode`): entering starts the node;
leaving closes it (flushing its own broadcasts), or aborts it when the block
raised."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class SyncNodeLifecycle(ABC):
    """``with node:`` for a node with ``start``, ``close`` and ``abort``."""

    @abstractmethod
    def start(self) -> Self: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
