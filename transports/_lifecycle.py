"""What the nodes whose API is synchronous (ZeroMQ's,
:class:`~epto.transports.blocking.BlockingNode`) share: the ``with``
statement (entering starts the node; leaving closes it, flushing its own
broadcasts, or aborts it when the block raised) and iteration over
:meth:`get`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType
from typing import Self

from epto import Delivery


class SyncNodeLifecycle(ABC):
    """``with node:`` and ``for delivery in node:`` for a node with
    ``start``, ``close``, ``abort`` and ``get``."""

    @abstractmethod
    def start(self) -> Self: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    @abstractmethod
    def get(self, timeout: float | None = None) -> Delivery | None: ...

    def __iter__(self) -> Iterator[Delivery]:
        """Every delivery, blocking, until the node stopped."""
        while (delivery := self.get()) is not None:
            yield delivery

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
