"""A member's delivery logs served to the Spark source over TCP.

:class:`LogServer` serves every node log under a log directory (a member's
``--log-dir``) to the network source (:mod:`epto.spark._network`); the
protocol is in :mod:`epto.spark._logproto`. It reads the files only: it
runs beside any member (EpTO or the token ring, trio or ZeroMQ) without
touching its delivery stream, and a reader cannot write into the group.

Every client is hostile until it proved it holds the token, and bounded
after: the proof must arrive whole within ``hello_timeout`` seconds of the
connection's acceptance; at most ``max_unauthenticated`` connections wait
to give it (one more evicts the one that waited longest, so a reader that
answers at once gets its turn however many silent connections are open);
at most ``max_connections`` authenticated connections are served (more are
refused at once); a request is at most a few dozen bytes, spans at most
``max_range`` records and is answered in frames of at most ``max_frame``
bytes; a connection that sends no request for ``idle_timeout`` seconds, or
does not take an answer within ``send_timeout``, is closed; the file work
runs in at most ``max_scans`` threads at once, off the member's event
loop. Each refusal is counted in ``statistics.rejected``; none stops the
member.

Size: just past the line: the connection's life (challenge, bounds,
refusals), the three answers and :func:`serve_in_thread` belong together.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import trio

from ..log import list_nodes, node_directory
from ..log._segment import BODY
from ._client import parse_address
from ._columnar import extent, scan_frames
from ._events import scan_keys
from ._logproto import (
    COUNT,
    DONE,
    FRAME_LEN,
    HELLO,
    HELLO_MAGIC,
    MAX_REASON,
    MAX_REQUEST,
    MAX_TOKEN,
    NEXT,
    REQUEST,
    answer,
)

_BIG_ENDIAN = sys.byteorder == "big"


@attrs.define(slots=True)
class LogServerStatistics:
    """Counters of a :class:`LogServer`."""

    connections: int = 0
    """Connections accepted (refused ones not included)."""
    open_connections: int = 0
    authenticating: int = 0
    """Connections now waiting to prove the token."""
    requests: int = 0
    records: int = 0
    """Records sent (``F`` answers)."""
    keys: int = 0
    """Keys sent (``K`` answers)."""
    rejected: dict[str, int] = attrs.field(factory=dict)
    """Refusals by reason: ``connections``, ``hello-timeout``, ``hello-evicted``,
    ``token``, ``frame-size``, ``malformed``, ``idle``, ``slow`` (an answer
    not taken within ``send_timeout``), ``log`` (a request the logs could not
    answer; the connection stays), ``error`` (an unexpected failure)."""

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


class _Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _Conn:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.evicted = False

    async def read_exact(self, n: int, limit: float) -> bytes:
        while len(self.buffer) < n:
            with trio.move_on_after(limit) as scope:
                part = await self.stream.receive_some(65536)
            if scope.cancelled_caught:
                raise _Refused("idle", "idle connection")
            if not part:
                raise EOFError
            self.buffer += part
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out


class LogServer:
    """Serve the logs under ``root`` to the Spark network source.

    ``bind`` is ``host:port`` (port 0 picks one; :attr:`address` says which
    once :meth:`run` started); ``token`` (1 to 256 bytes) is what readers
    must prove they hold (:func:`epto.spark._logproto.group_token` derives
    one from the group key). Run it in a nursery::

        server = LogServer(log_dir, "0.0.0.0:7700", token=token)
        await nursery.start(server.run)
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        bind: str = "127.0.0.1:0",
        *,
        token: bytes,
        max_connections: int = 16,
        max_unauthenticated: int = 16,
        hello_timeout: float = 5.0,
        idle_timeout: float = 120.0,
        send_timeout: float = 60.0,
        max_frame: int = 8 << 20,
        max_range: int = 1 << 18,
        max_scans: int = 4,
    ) -> None:
        if not 1 <= len(token) <= MAX_TOKEN:
            raise ValueError(f"a log server's token is 1 to {MAX_TOKEN} bytes, got {len(token)}")
        for name, value in (
            ("max_connections", max_connections),
            ("max_unauthenticated", max_unauthenticated),
            ("max_range", max_range),
            ("max_scans", max_scans),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if max_frame < 1 << 16:
            raise ValueError(f"max_frame must be >= 65536, got {max_frame!r}")
        for name, seconds in (
            ("hello_timeout", hello_timeout),
            ("idle_timeout", idle_timeout),
            ("send_timeout", send_timeout),
        ):
            if not seconds > 0:
                raise ValueError(f"{name} must be > 0, got {seconds!r}")
        self.root = os.fspath(root)
        self.bind = bind
        self.token = token
        self.max_connections = max_connections
        self.max_unauthenticated = max_unauthenticated
        self.hello_timeout = hello_timeout
        self.idle_timeout = idle_timeout
        self.send_timeout = send_timeout
        self.max_frame = max_frame
        self.max_range = max_range
        self.statistics = LogServerStatistics()
        self.address = bind
        self._limiter = trio.CapacityLimiter(max_scans)
        self._waiting: dict[_Conn, trio.CancelScope] = {}
        self._authenticated = 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled."""
        host, port = parse_address(self.bind)
        listeners = await trio.open_tcp_listeners(port, host=host)
        sockname = listeners[0].socket.getsockname()
        self.address = f"{sockname[0]}:{sockname[1]}"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._serve, listeners)
            task_status.started(self.address)

    async def _serve(self, stream: trio.SocketStream) -> None:
        stats = self.statistics
        if self._authenticated >= self.max_connections:
            stats.reject("connections")
            await self._refuse_new(stream, "too many connections")
            return
        if len(self._waiting) >= self.max_unauthenticated:
            oldest = next(iter(self._waiting))
            oldest.evicted = True
            self._waiting.pop(oldest).cancel()
        stats.connections += 1
        stats.open_connections += 1
        conn = _Conn(stream)
        hello = trio.CancelScope(deadline=trio.current_time() + self.hello_timeout)
        self._waiting[conn] = hello
        stats.authenticating = len(self._waiting)
        counted = False
        try:
            try:
                authenticated = False
                with hello:
                    challenge = secrets.token_bytes(16)
                    await stream.send_all(
                        HELLO.pack(HELLO_MAGIC, self.max_frame, self.max_range, challenge)
                    )
                    body = await self._frame(conn, MAX_REQUEST)
                    expected = answer(self.token, challenge)
                    if body[:1] != b"H" or not hmac.compare_digest(body[1:], expected):
                        raise _Refused("token", "wrong token")
                    authenticated = True
                self._stop_waiting(conn)
                if not authenticated:
                    if conn.evicted:
                        raise _Refused("hello-evicted", "too many connections authenticating")
                    raise _Refused("hello-timeout", f"no token within {self.hello_timeout:g} s")
                if self._authenticated >= self.max_connections:
                    raise _Refused("connections", "too many connections")
                self._authenticated += 1
                counted = True
                await self._send(conn, b"O")
                while True:
                    await self._request(conn, await self._frame(conn, MAX_REQUEST))
            except _Refused as exc:
                stats.reject(exc.reason)
                if exc.reason not in ("slow", "idle"):
                    with trio.move_on_after(1):
                        await stream.send_all(_framed(b"R" + str(exc).encode()[:MAX_REASON]))
            except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        except Exception:  # a bug here must not take the member down with it
            stats.reject("error")
        finally:
            self._stop_waiting(conn)
            if counted:
                self._authenticated -= 1
            stats.open_connections -= 1
            await trio.aclose_forcefully(stream)

    def _stop_waiting(self, conn: _Conn) -> None:
        self._waiting.pop(conn, None)
        self.statistics.authenticating = len(self._waiting)

    async def _refuse_new(self, stream: trio.SocketStream, reason: str) -> None:
        with trio.move_on_after(1):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(
                    HELLO.pack(HELLO_MAGIC, 0, 0, bytes(16)) + _framed(b"R" + reason.encode())
                )
        await trio.aclose_forcefully(stream)

    async def _frame(self, conn: _Conn, limit: int) -> bytes:
        (length,) = FRAME_LEN.unpack(await conn.read_exact(FRAME_LEN.size, self.idle_timeout))
        if length > limit:
            raise _Refused("frame-size", f"frame of {length} bytes exceeds {limit}")
        return await conn.read_exact(length, self.idle_timeout)

    async def _send(self, conn: _Conn, body: bytes) -> None:
        with trio.move_on_after(self.send_timeout) as scope:
            await conn.stream.send_all(_framed(body))
        if scope.cancelled_caught:
            raise _Refused("slow", "an answer was not taken in time")

    async def _request(self, conn: _Conn, body: bytes) -> None:
        self.statistics.requests += 1
        kind = body[:1]
        if kind == b"L" and len(body) == 1:
            listing = await self._thread(self._listing)
            await self._send(conn, b"L" + json.dumps(listing).encode())
            return
        if kind not in (b"K", b"F") or len(body) != 1 + REQUEST.size:
            raise _Refused("malformed", "unknown request")
        node, lo, hi = REQUEST.unpack_from(body, 1)
        node_dir = str(node_directory(self.root, node))
        known = await self._thread(list_nodes, self.root)
        if node not in known:
            self.statistics.reject("log")
            await self._send(conn, b"E" + f"no log of node {node} here".encode())
            return
        try:
            if kind == b"K":
                await self._keys(conn, node_dir, node, lo, min(hi, self.max_range))
            else:
                await self._records(conn, node_dir, lo, min(hi, lo + self.max_range))
        except _LogFailure as exc:
            self.statistics.reject("log")
            await self._send(conn, b"E" + str(exc).encode()[:MAX_REASON])

    async def _keys(self, conn: _Conn, node_dir: str, node: int, start: int, limit: int) -> None:
        scan = await self._thread(scan_keys, node_dir, node, start, max(1, limit))
        per_frame = (self.max_frame - 8) // 32
        ts = [k[0] for k in scan.keys]
        src = [k[1] for k in scan.keys]
        seq = [k[2] for k in scan.keys]
        for at in range(0, len(scan.indices), per_frame):
            part = slice(at, at + per_frame)
            arrays = (scan.indices[part], ts[part], src[part], seq[part])
            body = b"K" + COUNT.pack(len(arrays[0])) + b"".join(_u64(a) for a in arrays)
            await self._send(conn, body)
        self.statistics.keys += len(scan.indices)
        await self._send(conn, b"Z" + DONE.pack(scan.end, scan.more))

    async def _records(self, conn: _Conn, node_dir: str, lo: int, hi: int) -> None:
        it = scan_frames(node_dir, lo, hi, skip_missing=True)
        # A frame holds 4 bytes of position per record beside the record's
        # bytes (at least 8 + BODY.size): its records get that share of it.
        least = 8 + BODY.size
        budget = (self.max_frame - 16) * least // (least + 4)
        while True:
            bodies = await self._thread(_next_bodies, it, budget)
            if bodies is None:
                break
            for body, count in bodies:
                await self._send(conn, body)
                self.statistics.records += count
        await self._send(conn, b"Z" + NEXT.pack(hi))

    async def _thread(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` off the event loop; what the logs raise is a :class:`_LogFailure`."""

        def guarded() -> Any:
            try:
                return fn(*args)
            except _LogFailure:
                raise
            except Exception as exc:  # OSError, LogCorruptError and the like
                raise _LogFailure(f"{type(exc).__name__}: {exc}") from None

        return await trio.to_thread.run_sync(guarded, limiter=self._limiter)

    def _listing(self) -> dict[str, list[int | None]]:
        out: dict[str, list[int | None]] = {}
        for node in list_nodes(self.root):
            held = extent(node_directory(self.root, node))
            out[str(node)] = [held.first, held.end, held.durable_end]
        return out


@contextlib.contextmanager
def serve_in_thread(
    roots: Sequence[str | os.PathLike[str]], token: bytes, **options: Any
) -> Iterator[list[LogServer]]:
    """One :class:`LogServer` per root (``options`` as the class takes them),
    all in one trio loop on a thread: for a program that has no trio loop of
    its own (a benchmark, a test). Yields the started servers and stops them."""
    import threading

    servers = [LogServer(root, token=token, **options) for root in roots]
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["token"] = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as state["scope"]:
            async with trio.open_nursery() as nursery:
                for server in servers:
                    await nursery.start(server.run)
                ready.set()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # said by the caller's thread
            state["error"] = exc
            ready.set()

    thread = threading.Thread(target=thread_main, daemon=True, name="epto-log-server")
    thread.start()
    ready.wait()
    if "error" in state:
        raise state["error"]
    try:
        yield servers
    finally:
        trio.from_thread.run_sync(state["scope"].cancel, trio_token=state["token"])
        thread.join()


class _LogFailure(Exception):
    """The logs could not answer a request (said to the client in one line)."""


def _framed(body: bytes) -> bytes:
    return FRAME_LEN.pack(len(body)) + body


def _u64(values: list[int]) -> bytes:
    out = array("Q", values)
    if _BIG_ENDIAN:  # pragma: no cover - little-endian on the wire
        out.byteswap()
    return out.tobytes()


def _end(data: bytes, pos: int) -> int:
    """Where the frame at ``pos`` ends (its length is little-endian u32)."""
    return pos + 8 + int.from_bytes(data[pos : pos + 4], "little")


def _next_bodies(
    it: Iterator[tuple[bytes, list[int]]], budget: int
) -> list[tuple[bytes, int]] | None:
    """The ``D`` frames of the next segment's records (None past the last):
    stretches of at most ``budget`` bytes, a longer record refused."""
    step = next(it, None)
    if step is None:
        return None
    data, positions = step
    out = []
    i = 0
    while i < len(positions):
        base = positions[i]
        j = max(i, bisect_right(positions, base + budget, lo=i) - 1)
        stop = _end(data, positions[j])
        while j > i and stop - base > budget:
            j -= 1
            stop = _end(data, positions[j])
        if stop - base > budget:
            raise _LogFailure(
                f"a record of {stop - base} bytes exceeds the server's frame of {budget} bytes"
            )
        rel = array("I", [p - base for p in positions[i : j + 1]])
        if _BIG_ENDIAN:  # pragma: no cover
            rel.byteswap()
        body = b"D" + COUNT.pack(j + 1 - i) + rel.tobytes() + data[base:stop]
        out.append((body, j + 1 - i))
        i = j + 1
    return out
