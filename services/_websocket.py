"""A small HTTP + WebSocket layer on trio streams for the editor's page
(:mod:`epto.services.trio_editor`), with ``wsproto`` for the WebSocket
framing and the handshake.

One port serves both: a plain ``GET`` is answered with a file (HTTP/1.1,
``Connection: close``), a ``GET`` asking for ``Upgrade: websocket`` becomes a
:class:`WebSocket`. :func:`connect` is the client (the tests, the scripts and
the benchmark use it).

Rules (everything a connection sends is hostile):

* **The head** (request line and headers) is read within ``head_timeout``
  (10 s) and at most :data:`MAX_HEAD` bytes; a longer one is answered ``431``,
  a late or cut one is closed. A request line or a header line that does not
  parse, a duplicated ``Host`` or ``Origin``, is ``400``; a method other than
  ``GET``, ``405``.
* **A WebSocket handshake** is first shown to ``admit`` (the server's policy:
  the credential, the ``Origin`` and ``Host`` checks, its capacity), which
  answers with a refusal ``(status, reason)`` or ``None``; then to wsproto,
  whose refusal (a missing key, a bad version, ...) is ``400``.
* **Every refusal is counted** by reason in the ``rejected`` counter given,
  and the connection is closed. Nothing a connection sends raises out of
  :func:`serve_http`: a WebSocket protocol violation after the handshake
  closes that connection (:class:`WebSocketClosed`).

Size: one responsibility, a connection's HTTP and WebSocket life, whose parts
(the head's parse, the admission policy, the WebSocket's messages, the client)
share the limits and refusal counting above; split apart they would each
re-state them.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import ipaddress
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping

import attrs
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import ProtocolError

__all__ = [
    "MAX_HEAD",
    "MAX_MESSAGE",
    "Access",
    "Admit",
    "WebSocket",
    "WebSocketClosed",
    "connect",
    "connect_page",
    "serve_http",
]

MAX_HEAD = 16 * 1024
"""Bytes of a request head (request line and headers) read at most."""
MAX_MESSAGE = 4 * 1024 * 1024
"""Characters of one WebSocket text message received at most."""
HEAD_TIMEOUT = 10.0
"""Seconds a connection has to send its whole request head."""

Refusal = tuple[int, str]
"""An HTTP status and the reason counted."""
Admit = Callable[[str, Mapping[str, str]], Refusal | None]
"""A WebSocket handshake's admission: (request target, headers with lower
case names) -> a refusal, or ``None`` to accept."""

_STATUS = {
    400: "400 Bad Request",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    421: "421 Misdirected Request",
    431: "431 Request Header Fields Too Large",
    503: "503 Service Unavailable",
}


class WebSocketClosed(Exception):
    """The peer closed the WebSocket, broke the protocol, or the connection broke."""


class WebSocket:
    """Text messages over one WebSocket connection (server or client side)."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection) -> None:
        self._stream = stream
        self._ws = ws
        self._lock = trio.Lock()
        self._parts: list[str] = []
        self._size = 0
        self._ready: collections.deque[str] = collections.deque()
        self.closed = False

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.closed = True
                raise WebSocketClosed from exc

    def _encode(self, event: TextMessage | CloseConnection | Pong) -> bytes:
        try:
            return self._ws.send(event)
        except ProtocolError as exc:  # the connection is closing: nothing more to send
            self.closed = True
            raise WebSocketClosed from exc

    async def send(self, text: str) -> None:
        if self.closed:
            raise WebSocketClosed
        await self._write(self._encode(TextMessage(data=text)))

    async def send_many(self, texts: list[str]) -> None:
        """Several messages in one write."""
        if self.closed:
            raise WebSocketClosed
        await self._write(b"".join(self._encode(TextMessage(data=t)) for t in texts))

    async def receive(self) -> str:
        """The next text message (binary ones are dropped); a message longer
        than :data:`MAX_MESSAGE` characters or a protocol violation closes the
        connection (:class:`WebSocketClosed`)."""
        while not self._ready:
            if self.closed:
                raise WebSocketClosed
            try:
                await self._handle_events()
            except ProtocolError as exc:
                self.closed = True
                raise WebSocketClosed from exc
            if self._ready or self.closed:
                continue
            try:
                data = await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.closed = True
                raise WebSocketClosed from exc
            if not data:
                self.closed = True
                raise WebSocketClosed
            try:
                self._ws.receive_data(bytes(data))
            except ProtocolError as exc:
                self.closed = True
                raise WebSocketClosed from exc
        return self._ready.popleft()

    async def _handle_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, TextMessage):
                self._parts.append(event.data)
                self._size += len(event.data)
                if self._size > MAX_MESSAGE:
                    await self.aclose()
                    raise WebSocketClosed("message too long")
                if event.message_finished:
                    self._ready.append("".join(self._parts))
                    self._parts, self._size = [], 0
            elif isinstance(event, Ping):
                await self._write(self._encode(event.response()))
            elif isinstance(event, CloseConnection):
                # Also what wsproto reports for a malformed frame (code 1002, 1007, ...).
                with contextlib.suppress(WebSocketClosed):
                    await self._write(self._encode(event.response()))
                self.closed = True  # the messages before it are still received
                return
            elif isinstance(event, BytesMessage):
                pass

    async def aclose(self, timeout: float = 1.0) -> None:
        """Send a close frame (for at most ``timeout`` seconds: the peer may
        not read) and close the stream, whatever happens."""
        try:
            if not self.closed:
                self.closed = True
                with (
                    trio.move_on_after(timeout),
                    contextlib.suppress(
                        trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError
                    ),
                ):
                    async with self._lock:
                        await self._stream.send_all(self._ws.send(CloseConnection(code=1000)))
        finally:
            await self._stream.aclose()


@attrs.frozen(kw_only=True)
class Access:
    """Who may open the WebSocket: the holder of ``token`` (``?token=`` in
    the request target), from a page of the server's own origin, under a
    ``Host`` name the server answers to.

    * ``Host``: an IP address (any port; a DNS-rebinding attack needs a name),
      ``localhost``, or one of ``hosts`` (``name`` or ``name:port``);
      otherwise ``421`` (``host``).
    * ``Origin`` (browsers always send it on a WebSocket handshake; other
      clients need not): ``http://`` or ``https://`` followed by the request's
      own ``Host``, or by one of ``hosts`` (a TLS proxy in front); otherwise
      ``403`` (``origin``).
    * the token, compared in constant time (:func:`hmac.compare_digest`):
      missing is ``403`` (``no-token``), wrong ``403`` (``bad-token``).
    """

    token: str
    hosts: tuple[str, ...] = ()

    def check(self, target: str, headers: Mapping[str, str]) -> Refusal | None:
        host = headers.get("host", "").strip().lower()
        if not self._host_allowed(host):
            return 421, "host"
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin.strip().lower(), host):
            return 403, "origin"
        try:
            query = urllib.parse.parse_qs(
                urllib.parse.urlsplit(target).query, keep_blank_values=True, max_num_fields=16
            )
        except ValueError:
            return 400, "bad-request"
        given = query.get("token", [])
        if not given:
            return 403, "no-token"
        if len(given) != 1 or not hmac.compare_digest(
            given[0].encode("utf-8", "surrogateescape"), self.token.encode()
        ):
            return 403, "bad-token"
        return None

    def _listed(self, host: str) -> bool:
        name = _split_host(host)[0]
        return any(h.lower() in (host, name) for h in self.hosts)

    def _host_allowed(self, host: str) -> bool:
        if not host:
            return False
        name, port = _split_host(host)
        if port is not None and not (port.isdigit() and len(port) <= 5):
            return False
        if name == "localhost" or self._listed(host):
            return True
        try:
            ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
        except ValueError:
            return False
        return True

    def _origin_allowed(self, origin: str, host: str) -> bool:
        for scheme in ("http://", "https://"):
            if origin.startswith(scheme):
                rest = origin.removeprefix(scheme)
                return rest == host or (bool(rest) and self._listed(rest))
        return False


def _split_host(host: str) -> tuple[str, str | None]:
    """``name[:port]`` or ``[v6][:port]`` -> (name, port)."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, colon, port = host.rpartition(":")
    return (name, port) if colon else (host, None)


async def _read_head(stream: trio.abc.Stream) -> bytes | str:
    """The head (up to and with the blank line, and what came after it in
    the same reads), or the reason it is not there."""
    head = b""
    while b"\r\n\r\n" not in head:
        if len(head) > MAX_HEAD:
            return "head-too-large"
        data = await stream.receive_some(4096)
        if not data:
            return "head-cut"
        head += data
    if head.index(b"\r\n\r\n") > MAX_HEAD:
        return "head-too-large"
    return head


def _response(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _parse(head: bytes) -> tuple[str, str, dict[str, str]] | None:
    """(method, target, headers with lower-case names), or None if the head
    does not parse (a bad line, a duplicated Host or Origin)."""
    try:
        text = head.split(b"\r\n\r\n", 1)[0].decode("ascii")
    except UnicodeDecodeError:
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or not name.isprintable():
            return None
        name = name.lower()
        if name in headers and name in ("host", "origin"):
            return None
        headers[name] = value.strip()
    return parts[0], parts[1], headers


async def _refuse(stream: trio.abc.Stream, status: int, body: str = "") -> None:
    with trio.move_on_after(1):  # a peer that does not read gets no answer
        await stream.send_all(_response(_STATUS[status], body.encode(), "text/plain"))


async def serve_http(
    stream: trio.abc.Stream,
    files: dict[str, tuple[bytes, str]],
    on_websocket: Callable[[WebSocket], Awaitable[None]],
    websocket_path: str = "/ws",
    *,
    admit: Admit | None = None,
    rejected: collections.Counter[str] | None = None,
    head_timeout: float = HEAD_TIMEOUT,
) -> None:
    """Serve one connection: ``files`` maps a path to (body, content type);
    ``websocket_path`` upgrades to a WebSocket handed to ``on_websocket``
    once ``admit`` (if given) lets it in. Refusals are counted in
    ``rejected``; nothing the connection sends raises out of here."""
    counter: collections.Counter[str] = rejected if rejected is not None else collections.Counter()
    try:
        head: bytes | str = "head-timeout"
        with trio.move_on_after(head_timeout):
            head = await _read_head(stream)
        if isinstance(head, str):
            counter[head] += 1
            if head == "head-too-large":
                await _refuse(stream, 431)
            return
        request = _parse(head)
        if request is None:
            counter["bad-request"] += 1
            await _refuse(stream, 400)
            return
        method, target, headers = request
        if method != "GET":
            counter["method"] += 1
            await _refuse(stream, 405)
            return
        path = target.split("?", 1)[0]
        if path == websocket_path and "upgrade" in headers:
            refusal = admit(target, headers) if admit is not None else None
            if refusal is not None:
                status, reason = refusal
                counter[reason] += 1
                await _refuse(stream, status, f"refused: {reason}\n")
                return
            ws = WSConnection(ConnectionType.SERVER)
            try:
                ws.receive_data(head)
                accepted = any(isinstance(event, Request) for event in ws.events())
                reply = ws.send(AcceptConnection()) if accepted else b""
            except ProtocolError:
                accepted = False
            if not accepted:
                counter["bad-handshake"] += 1
                await _refuse(stream, 400)
                return
            await stream.send_all(reply)
            await on_websocket(WebSocket(stream, ws))
            return
        if path in files:
            body, content_type = files[path]
            await stream.send_all(_response("200 OK", body, content_type))
        else:
            counter["not-found"] += 1
            await _refuse(stream, 404, "not found\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError, WebSocketClosed):
        pass
    finally:
        await stream.aclose()


async def connect(
    host: str,
    port: int,
    path: str = "/ws",
    *,
    origin: str | None = None,
    host_header: str | None = None,
) -> WebSocket:
    """A client WebSocket to ``ws://host:port/path`` (``Origin`` sent only if
    given, ``Host`` as ``host:port`` unless given);
    :class:`WebSocketClosed` ``("refused: STATUS")`` if the server refuses it."""
    stream = await trio.open_tcp_stream(host, port)
    ws = WSConnection(ConnectionType.CLIENT)
    extra = [(b"Origin", origin.encode())] if origin is not None else []
    request = Request(host=host_header or f"{host}:{port}", target=path, extra_headers=extra)
    try:
        await stream.send_all(ws.send(request))
        while True:
            data = await stream.receive_some(65536)
            if not data:
                raise WebSocketClosed("refused")
            ws.receive_data(bytes(data))
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return WebSocket(stream, ws)
                if isinstance(event, RejectConnection):
                    raise WebSocketClosed(f"refused: {event.status_code}")
    except BaseException:
        await stream.aclose()
        raise


async def connect_page(url: str, *, origin: bool = True) -> WebSocket:
    """The WebSocket a page at ``url`` (``http://HOST:PORT/?token=T``, as
    the server prints it) opens: ``/ws`` with the same token, its own
    ``Origin`` unless ``origin=False``."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    path = "/ws" + (f"?{parts.query}" if parts.query else "")
    return await connect(host, port, path, origin=f"http://{parts.netloc}" if origin else None)
