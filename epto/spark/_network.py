"""The Spark source's side of the log-read protocol (:mod:`epto.spark._logproto`).

:class:`LogClient` is one blocking connection to a :class:`LogServer`
(the driver plans through it, each task reads through its own);
:class:`NetworkLogs` is the group's logs as the members listed in
``epto.servers`` serve them, for :func:`epto.spark._events.plan`; its
:meth:`~NetworkLogs.frames` fetches a run's records for
:func:`epto.spark._events.read_runs`. A node served by several members is
read from the first listed.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from array import array
from collections.abc import Iterator, Sequence

import attrs

from .._errors import EptoError
from ._client import parse_address
from ._events import NodeKeys
from ._logproto import (
    COUNT,
    DONE,
    FRAME_LEN,
    HELLO,
    HELLO_MAGIC,
    NEXT,
    REQUEST,
    answer,
)

BUSY = "refused: too many connections"
"""What a client reads when the server serves its most connections already."""
MAX_ACCEPTED_FRAME = 64 << 20
"""The largest frame a client takes, whatever the server says."""
_BIG_ENDIAN = sys.byteorder == "big"


class LogServerError(EptoError):
    """A log server refused, went away, answered out of protocol, or could
    not answer a request."""


class LogClient:
    """One authenticated connection to a log server."""

    def __init__(self, address: str, token: bytes, *, timeout: float = 60.0) -> None:
        self.address = address
        try:
            host_port = parse_address(address)
        except ValueError as exc:
            raise LogServerError(str(exc)) from None
        try:
            self._sock = socket.create_connection(host_port, timeout=timeout)
        except OSError as exc:
            raise LogServerError(f"cannot reach the epto log server at {address}: {exc}") from None
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            magic, self.max_frame, self.max_range, challenge = HELLO.unpack(self._read(HELLO.size))
            if magic != HELLO_MAGIC:
                raise LogServerError(f"{address} is not an epto log server")
            if self.max_frame == 0:  # a refusal follows
                self._reply()
            self.max_frame = min(self.max_frame, MAX_ACCEPTED_FRAME)
            self._send(b"H" + answer(token, challenge))
            if self._reply() != b"O":
                raise LogServerError(f"the epto log server at {address} sent an unknown answer")
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self) -> LogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def listing(self) -> dict[int, tuple[int, int, int | None]]:
        """``node -> (first, end, durable_end)`` of every log the server holds."""
        self._send(b"L")
        body = self._reply()
        if body[:1] != b"L":
            raise self._unknown()
        try:
            data = json.loads(body[1:])
            return {int(n): (int(v[0]), int(v[1]), v[2]) for n, v in data.items()}
        except (ValueError, TypeError, IndexError, AttributeError):
            raise self._unknown() from None

    def keys(self, node: int, start: int) -> NodeKeys:
        """The in-order records' keys of ``node``'s log from ``start`` on."""
        indices: list[int] = []
        keys: list[tuple[int, int, int]] = []
        end = start
        while True:
            self._send(b"K" + REQUEST.pack(node, end, self.max_range))
            more = False
            while True:
                body = self._reply()
                if body[:1] == b"K" and len(body) >= 5:
                    (n,) = COUNT.unpack_from(body, 1)
                    if len(body) != 5 + 32 * n:
                        raise self._unknown()
                    cols = [_u64(body[5 + 8 * n * c : 5 + 8 * n * (c + 1)]) for c in range(4)]
                    indices += cols[0]
                    keys += zip(cols[1], cols[2], cols[3], strict=True)
                elif body[:1] == b"Z" and len(body) == 1 + DONE.size:
                    scanned, flag = DONE.unpack_from(body, 1)
                    end, more = max(end, scanned), bool(flag)
                    break
                else:
                    raise self._unknown()
            if not more:
                break
        all_zero = not any(k[0] for k in keys)
        return NodeKeys(indices=indices, keys=keys, all_zero=all_zero, end=end)

    def frames(self, node: int, lo: int, hi: int) -> Iterator[tuple[bytes, list[int]]]:
        """``(bytes, frame positions)`` of the records ``lo <= index < hi``
        (what is missing skipped), as :func:`epto.spark._columnar.scan_frames`."""
        at = lo
        while at < hi:
            self._send(b"F" + REQUEST.pack(node, at, hi))
            while True:
                body = self._reply()
                if body[:1] == b"D" and len(body) >= 5:
                    (n,) = COUNT.unpack_from(body, 1)
                    head = 5 + 4 * n
                    if n == 0 or len(body) < head:
                        raise self._unknown()
                    rel = array("I", body[5:head])
                    if _BIG_ENDIAN:  # pragma: no cover
                        rel.byteswap()
                    positions = rel.tolist()
                    data = body[head:]
                    if positions[-1] + 16 > len(data):
                        raise self._unknown()
                    yield data, positions
                elif body[:1] == b"Z" and len(body) == 1 + NEXT.size:
                    (reached,) = NEXT.unpack_from(body, 1)
                    if reached <= at:
                        raise self._unknown()
                    at = reached
                    break
                else:
                    raise self._unknown()

    def _unknown(self) -> LogServerError:
        return LogServerError(f"the epto log server at {self.address} answered out of protocol")

    def _send(self, body: bytes) -> None:
        try:
            self._sock.sendall(FRAME_LEN.pack(len(body)) + body)
        except OSError as exc:
            raise LogServerError(f"lost the epto log server at {self.address}: {exc}") from None

    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            try:
                part = self._sock.recv(min(n - len(data), 1 << 20))
            except TimeoutError:
                raise LogServerError(
                    f"the epto log server at {self.address} did not answer in time"
                ) from None
            except OSError as exc:
                raise LogServerError(f"lost the epto log server at {self.address}: {exc}") from None
            if not part:
                raise LogServerError(f"the epto log server at {self.address} closed the connection")
            data += part
        return bytes(data)

    def _reply(self) -> bytes:
        """The next frame; ``R`` and ``E`` raise with the server's reason."""
        (length,) = FRAME_LEN.unpack(self._read(FRAME_LEN.size))
        if length > max(self.max_frame, 1024) + 64 or length == 0:
            raise LogServerError(f"the epto log server at {self.address} sent a frame too long")
        body = self._read(length)
        if body[:1] in (b"R", b"E"):
            reason = body[1:513].decode(errors="replace").replace("\n", " ")
            verb = "refused" if body[:1] == b"R" else "could not answer"
            raise LogServerError(f"the epto log server at {self.address} {verb}: {reason}")
        return body


def _u64(data: bytes) -> list[int]:
    values = array("Q", data)
    if _BIG_ENDIAN:  # pragma: no cover
        values.byteswap()
    return values.tolist()


@attrs.define
class NetworkLogs:
    """A group's logs as the members at ``servers`` serve them
    (an :class:`epto.spark._events.Logs`)."""

    servers: Sequence[str]
    token: bytes
    timeout: float = 60.0
    _served: dict[int, str] | None = None
    _clients: dict[str, LogClient] = attrs.field(factory=dict)

    @property
    def label(self) -> str:
        return "epto.servers " + ",".join(self.servers)

    def client(self, address: str) -> LogClient:
        """The connection to ``address``, opened on first use. A server that
        serves its most connections already is asked again, with a growing
        pause, for up to ``timeout`` seconds (tasks of a large cluster may
        outnumber its connections)."""
        if address not in self._clients:
            deadline = time.monotonic() + self.timeout
            pause = 0.05
            while True:
                try:
                    self._clients[address] = LogClient(address, self.token, timeout=self.timeout)
                    break
                except LogServerError as exc:
                    if BUSY not in str(exc) or time.monotonic() + pause > deadline:
                        raise
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
        return self._clients[address]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def extents(self) -> dict[int, tuple[int, int, int | None]]:
        """Every node's ``(first, end, durable_end)``, from the first server that has it."""
        served: dict[int, str] = {}
        out: dict[int, tuple[int, int, int | None]] = {}
        for address in self.servers:
            for node, bounds in self.client(address).listing().items():
                if node not in served:
                    served[node] = address
                    out[node] = bounds
        self._served = served
        return out

    def nodes(self) -> list[int]:
        return sorted(self.extents())

    def location(self, node: int) -> str:
        if self._served is None:
            self.extents()
        assert self._served is not None
        if node not in self._served:
            raise LogServerError(f"no server of {self.label} holds a log of node {node}")
        return self._served[node]

    def keys(self, node: int, start: int) -> NodeKeys:
        return self.client(self.location(node)).keys(node, start)

    def frames(
        self, address: str, node: int, lo: int, hi: int
    ) -> Iterator[tuple[bytes, list[int]]]:
        return self.client(address).frames(node, lo, hi)
