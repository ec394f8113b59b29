"""A running loopback group with a sink gateway, in a trio loop on a thread."""

from __future__ import annotations

import socket
import threading
from contextlib import AsyncExitStack, suppress
from typing import Any

import trio
from epto.transports import NodeConfig
from epto.transports._ports import free_ports
from epto.transports.trio_node import open_node

from epto import Delivery
from epto.spark import Gateway, SinkRow, SinkRows
from epto.tokenring import TokenRingConfig

RING = TokenRingConfig(heartbeat_interval=0.05, suspect_timeout=2.0, exclude_timeout=5.0)


class LoopbackGroup:
    """``n`` token-ring members on 127.0.0.1; member 1 runs a :class:`Gateway`.

    Every member feeds its deliveries to its own :class:`SinkRows`; the rows it
    returns (each identity once) are kept in ``rows[pid]``.
    """

    def __init__(self, n: int = 3, *, max_payload: int = 32_768, **gateway: Any) -> None:
        self.n = n
        self.max_payload = max_payload
        self.gateway_options = gateway
        self.dedup = {pid: SinkRows() for pid in range(1, n + 1)}
        self.rows: dict[int, list[SinkRow]] = {pid: [] for pid in range(1, n + 1)}
        self.deliveries = dict.fromkeys(range(1, n + 1), 0)
        self.gateway: Gateway | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    @property
    def address(self) -> str:
        assert self.gateway is not None
        return self.gateway.address

    def __enter__(self) -> LoopbackGroup:
        self._thread.start()
        if not self._ready.wait(30) or self.gateway is None:
            self.__exit__()
            raise RuntimeError(f"the group did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._cancel is not None:
            with suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the group's thread did not stop"

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:  # reported by __enter__ or the test's checks
            self._error = exc

    def _take(self, pid: int, delivery: Delivery) -> None:
        self.deliveries[pid] += 1
        self.rows[pid] += self.dedup[pid].feed(delivery.event.payload) or []

    async def _consume(self, pid: int, node: Any) -> None:
        async for delivery in node:
            self._take(pid, delivery)

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        ports = free_ports(self.n, socket.SOCK_STREAM)
        members = {pid: f"127.0.0.1:{port}" for pid, port in enumerate(ports, start=1)}
        with trio.CancelScope() as self._cancel:
            async with AsyncExitStack() as stack:
                nodes = {}
                for pid, address in members.items():
                    config = NodeConfig(
                        pid=pid, bind=address, members=members, mode="token-ring", tokenring=RING
                    )
                    nodes[pid] = await stack.enter_async_context(open_node(config))
                async with trio.open_nursery() as nursery:
                    self.gateway = Gateway(
                        nodes[1],
                        max_payload=self.max_payload,
                        on_delivery=lambda d: self._take(1, d),
                        **self.gateway_options,
                    )
                    await nursery.start(self.gateway.run)
                    for pid in range(2, self.n + 1):
                        nursery.start_soon(self._consume, pid, nodes[pid])
                    self._ready.set()
