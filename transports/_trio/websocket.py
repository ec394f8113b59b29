"""A small HTTP + WebSocket layer on trio streams for the editor's page
(:mod:`epto.transports.trio_editor`), with ``wsproto`` for the WebSocket
framing and the handshake.

One port serves both: a plain ``GET`` is answered with a file (HTTP/1.1,
``Connection: close``), a ``GET`` asking for ``Upgrade: websocket`` becomes a
:class:`WebSocket`. The request head is read here, then handed to wsproto as
is. :func:`connect` is the client (the tests and the benchmark use it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

MAX_HEAD = 16 * 1024
MAX_MESSAGE = 4 * 1024 * 1024


class WebSocketClosed(Exception):
    """The peer closed the WebSocket, or the connection broke."""


class WebSocket:
    """Text messages over one WebSocket connection (server or client side)."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection) -> None:
        self._stream = stream
        self._ws = ws
        self._lock = trio.Lock()
        self._parts: list[str] = []
        self._ready: list[str] = []
        self.closed = False

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.closed = True
                raise WebSocketClosed from exc

    async def send(self, text: str) -> None:
        if self.closed:
            raise WebSocketClosed
        await self._write(self._ws.send(TextMessage(data=text)))

    async def receive(self) -> str:
        """The next text message (binary ones are dropped)."""
        while not self._ready:
            if self.closed:
                raise WebSocketClosed
            for event in self._ws.events():
                if isinstance(event, TextMessage):
                    self._parts.append(event.data)
                    if sum(map(len, self._parts)) > MAX_MESSAGE:
                        await self.aclose()
                        raise WebSocketClosed
                    if event.message_finished:
                        self._ready.append("".join(self._parts))
                        self._parts = []
                elif isinstance(event, Ping):
                    await self._write(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    self.closed = True
                    with contextlib.suppress(WebSocketClosed):
                        await self._write(self._ws.send(event.response()))
                    raise WebSocketClosed
                elif isinstance(event, BytesMessage):
                    pass
            if self._ready:
                break
            try:
                data = await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.closed = True
                raise WebSocketClosed from exc
            if not data:
                self.closed = True
                raise WebSocketClosed
            self._ws.receive_data(bytes(data))
        return self._ready.pop(0)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                async with self._lock:
                    await self._stream.send_all(self._ws.send(CloseConnection(code=1000)))
        await self._stream.aclose()


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    head = b""
    while b"\r\n\r\n" not in head:
        if len(head) > MAX_HEAD:
            return None
        data = await stream.receive_some(4096)
        if not data:
            return None
        head += data
    return head


def _response(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def serve_http(
    stream: trio.abc.Stream,
    files: dict[str, tuple[bytes, str]],
    on_websocket: Callable[[WebSocket], Awaitable[None]],
    websocket_path: str = "/ws",
) -> None:
    """Serve one connection: ``files`` maps a path to (body, content type);
    ``websocket_path`` upgrades to a WebSocket handed to ``on_websocket``."""
    try:
        with trio.move_on_after(10):
            head = await _read_head(stream)
        if head is None:
            return
        lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[0] != "GET":
            await stream.send_all(_response("405 Method Not Allowed", b"", "text/plain"))
            return
        path = parts[1].split("?", 1)[0]
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
        if path == websocket_path and headers.get("upgrade", "").lower() == "websocket":
            ws = WSConnection(ConnectionType.SERVER)
            ws.receive_data(head)
            for event in ws.events():
                if isinstance(event, Request):
                    await stream.send_all(ws.send(AcceptConnection()))
                    await on_websocket(WebSocket(stream, ws))
                    return
            return
        if path in files:
            body, content_type = files[path]
            await stream.send_all(_response("200 OK", body, content_type))
        else:
            await stream.send_all(_response("404 Not Found", b"not found\n", "text/plain"))
    except (trio.BrokenResourceError, trio.ClosedResourceError, WebSocketClosed):
        pass
    finally:
        await stream.aclose()


async def connect(host: str, port: int, path: str = "/ws") -> WebSocket:
    """A client WebSocket to ``ws://host:port/path``."""
    stream = await trio.open_tcp_stream(host, port)
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=f"{host}:{port}", target=path)))
    while True:
        data = await stream.receive_some(65536)
        if not data:
            await stream.aclose()
            raise WebSocketClosed("refused")
        ws.receive_data(bytes(data))
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return WebSocket(stream, ws)
            if isinstance(event, RejectConnection):
                await stream.aclose()
                raise WebSocketClosed(f"refused: {event.status_code}")
