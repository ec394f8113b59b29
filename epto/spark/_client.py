"""The sink's side of the gateway protocol: a blocking TCP client (runs in Spark tasks).

The protocol, over one TCP connection (integers big-endian):

* the gateway opens with ``HELLO``: ``b"EPTOGW1\\n"``, the largest event
  payload it broadcasts (u32) and the most unacknowledged events it allows a
  connection (u32);
* every later message either way is a frame: length (u32) then body. The
  client's first frame is ``b"H"`` followed by the shared token (empty when
  the gateway has none), which the gateway acknowledges as chunk 2**64-1;
  then ``b"E"``, a chunk number (u64) and a sink event
  payload (:mod:`epto.spark._rows`), for each event;
* the gateway answers ``b"A"`` and the chunk number once its own node
  *delivered* that event (so it was ordered, and spread to the group), or
  ``b"R"`` and a reason, after which it closes the connection.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

from ._rows import ROW_OVERHEAD, encode_event, header_size

HELLO_MAGIC = b"EPTOGW1\n"
HELLO = struct.Struct(">8sII")
FRAME_LEN = struct.Struct(">I")
CHUNK = struct.Struct(">Q")
MAX_TOKEN = 256
"""Bytes of the shared token."""
MAX_REASON = 512
"""Bytes of a rejection's reason."""
HELLO_CHUNK = (1 << 64) - 1
"""The chunk number with which the gateway acknowledges the token."""


class GatewayError(ConnectionError):
    """The gateway refused, went away, or did not acknowledge in time."""


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"gateway address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


class GatewayClient:
    """One connection to a gateway; ``send`` payloads, then ``wait_all``."""

    def __init__(self, address: str, *, token: bytes = b"", timeout: float = 60.0) -> None:
        self.address = address
        self.timeout = timeout
        self.events = 0
        self._next = 0
        self._outstanding: set[int] = set()
        try:
            self._sock = socket.create_connection(parse_address(address), timeout=timeout)
        except OSError as exc:
            raise GatewayError(f"cannot reach the epto gateway at {address}: {exc}") from exc
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            magic, self.max_payload, self.window = HELLO.unpack(self._read(HELLO.size))
            if magic != HELLO_MAGIC:
                raise GatewayError(f"{address} is not an epto gateway")
            if self.window < 1:  # a refusal follows
                self._read_reply()
                raise GatewayError(f"the epto gateway at {address} refused the connection")
            self._send_frame(b"H" + token)
            self._outstanding.add(HELLO_CHUNK)
            self.wait_all()
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def send(self, payload: bytes) -> None:
        """Hand one event to the gateway (waits while the window is full)."""
        while len(self._outstanding) >= self.window:
            self._read_reply()
        chunk = self._next
        self._next += 1
        self._outstanding.add(chunk)
        self._send_frame(b"E" + CHUNK.pack(chunk) + payload)
        self.events += 1

    def wait_all(self) -> None:
        """Return once the gateway's node delivered every event sent."""
        while self._outstanding:
            self._read_reply()

    def _send_frame(self, body: bytes) -> None:
        try:
            self._sock.sendall(FRAME_LEN.pack(len(body)) + body)
        except OSError as exc:
            raise GatewayError(f"lost the epto gateway at {self.address}: {exc}") from exc

    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            try:
                part = self._sock.recv(n - len(data))
            except TimeoutError as exc:
                raise GatewayError(
                    f"the epto gateway at {self.address} did not answer within "
                    f"{self.timeout:g} s ({len(self._outstanding)} events unacknowledged)"
                ) from exc
            except OSError as exc:
                raise GatewayError(f"lost the epto gateway at {self.address}: {exc}") from exc
            if not part:
                raise GatewayError(f"the epto gateway at {self.address} closed the connection")
            data += part
        return bytes(data)

    def _read_reply(self) -> None:
        (length,) = FRAME_LEN.unpack(self._read(FRAME_LEN.size))
        if length > 1 + CHUNK.size + MAX_REASON:
            raise GatewayError(f"the epto gateway at {self.address} sent a frame too long")
        body = self._read(length)
        if body[:1] == b"A" and length == 1 + CHUNK.size:
            self._outstanding.discard(CHUNK.unpack_from(body, 1)[0])
        elif body[:1] == b"R":
            reason = body[1:].decode(errors="replace")
            raise GatewayError(f"the epto gateway at {self.address} refused: {reason}")
        else:
            raise GatewayError(f"the epto gateway at {self.address} sent an unknown frame")


def send_rows(
    client: GatewayClient, stream: str, batch: int, partition: int, values: Iterable[bytes]
) -> int:
    """Send one partition's rows, packed into events; returns the row count.

    Rows are numbered from 0 in the order ``values`` gives them; that number
    is part of each row's identity, so a retried task must produce the same
    rows in the same order.
    """
    budget = client.max_payload - header_size(stream)
    chunk: list[bytes] = []
    size = 0
    first = row = 0
    for value in values:
        cost = len(value) + ROW_OVERHEAD
        if cost > budget:
            raise ValueError(
                f"row {row} of partition {partition} has {len(value)} bytes; the gateway "
                f"broadcasts events of at most {client.max_payload} bytes (raise the group's "
                "Limits.max_payload_size)"
            )
        if size + cost > budget:
            client.send(encode_event(stream, batch, partition, first, chunk))
            chunk, size, first = [], 0, row
        chunk.append(value)
        size += cost
        row += 1
    if chunk:
        client.send(encode_event(stream, batch, partition, first, chunk))
    client.wait_all()
    return row
