"""The editor's door, without a browser: who may open a page's WebSocket,
what raw HTTP does to a replica, pages that do not read, and what pages are
told when their replica stops.

* A handshake without the token, with a wrong one, from a foreign
  ``Origin`` or under a rebound ``Host`` is refused (403, 403, 403, 421),
  counted by reason, and the replica keeps serving its pages.
* Raw HTTP is hostile: the three heads of the issue (no ``Host``, no key, a
  bad version) are answered 400; hypothesis-drawn heads fed to
  :func:`serve_http` never raise and every refusal is counted; thousands of
  seeded garbage requests against a live group of three replicas stop none
  of them, and their texts stay equal.
* A page that does not read is dropped (``slow-page``) once its queue is
  full, and the messages queued stay under the bound; a reading page keeps
  its connection; pages beyond ``max_pages`` are refused with 503.
* A page is told ``stopped`` before its replica's server exits.
"""

from __future__ import annotations

import collections
import json
import random
import socket
import subprocess
import sys
from contextlib import AsyncExitStack

import pytest
import trio
import trio.testing
from epto.services._websocket import (
    Access,
    WebSocket,
    WebSocketClosed,
    connect,
    connect_page,
    serve_http,
)
from epto.services.trio_editor import EditorConfig, EditorServer, editor_token
from epto.services.trio_rsm import ReplicaConfig
from epto.transports._ports import free_ports
from hypothesis import given, settings
from hypothesis import strategies as st

from epto import ConfigurationError, GroupKey
from epto.apps._ot import Insert
from epto.endpoint import NodeConfig, parse_host_port

from .test_editor_server import converged, open_clients, start_group

TOKEN = "T" * 32


async def one_replica(stack: AsyncExitStack, **kw: object) -> EditorServer:
    """A group of one EpTO replica (ready at once)."""
    port = free_ports(1, socket.SOCK_DGRAM)[0]
    node = NodeConfig(pid=1, bind=f"127.0.0.1:{port}", round_interval=0.02, seed=1)
    config = EditorConfig(replica=ReplicaConfig(audit_interval=float("inf")), **kw)  # type: ignore[arg-type]
    server = await stack.enter_async_context(EditorServer(node, config))
    await server.node.wait_ready(10)
    return server


def address(server: EditorServer) -> tuple[str, int]:
    return parse_host_port(server.url.split("/")[2])


async def exchange(host: str, port: int, data: bytes) -> bytes:
    """Send ``data`` and the end of the stream; what the server answers
    before it closes (the head only, for a 101)."""
    stream = await trio.open_tcp_stream(host, port)
    out = b""
    try:
        await stream.send_all(data)
        await stream.send_eof()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                out += chunk
                if out.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in out:
                    break
    except trio.BrokenResourceError:
        pass  # reset by the server after its answer
    finally:
        await stream.aclose()
    return out


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def handshake(target: str, *headers: tuple[str, str]) -> bytes:
    lines = [f"GET {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


WS = (
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
)


@pytest.mark.trio
async def test_handshakes_without_the_credential_or_from_elsewhere_are_refused() -> None:
    async with AsyncExitStack() as stack:
        server = await one_replica(stack, token=TOKEN, allowed_hosts=("editor.example",))
        host, port = address(server)
        assert server.url == f"http://{host}:{port}/?token={TOKEN}"
        own = ("Host", f"{host}:{port}")
        cases = [
            ("/ws", [own], 403, "no-token"),
            ("/ws?token=wrong", [own], 403, "bad-token"),
            (f"/ws?token={TOKEN}x", [own], 403, "bad-token"),
            (f"/ws?token={TOKEN}&token={TOKEN}", [own], 403, "bad-token"),
            (f"/ws?token={TOKEN}", [own, ("Origin", "https://evil.example")], 403, "origin"),
            (f"/ws?token={TOKEN}", [own, ("Origin", "null")], 403, "origin"),
            (f"/ws?token={TOKEN}", [own, ("Origin", f"http://{host}:{port + 1}")], 403, "origin"),
            (f"/ws?token={TOKEN}", [("Host", f"rebound.evil.example:{port}")], 421, "host"),
            (f"/ws?token={TOKEN}", [("Host", "rebound.evil.example")], 421, "host"),
            (f"/ws?token={TOKEN}", [], 421, "host"),
        ]
        for target, headers, code, reason in cases:
            before = server.rejected[reason]
            answer = await exchange(host, port, handshake(target, *headers, *WS))
            assert status(answer) == code, (target, headers, answer[:80])
            assert server.rejected[reason] == before + 1, reason
        assert server.pages == 0
        # Admitted: the page's own origin, localhost, a listed name (a TLS proxy).
        for headers in (
            [own, ("Origin", f"http://{host}:{port}")],
            [("Host", f"localhost:{port}"), ("Origin", f"http://localhost:{port}")],
            [("Host", "editor.example"), ("Origin", "https://editor.example")],
            [own],  # not a browser: no Origin, the token is enough
        ):
            answer = await exchange(host, port, handshake(f"/ws?token={TOKEN}", *headers, *WS))
            assert status(answer) == 101, (headers, answer[:80])
        # The page itself holds no text and needs no token.
        assert status(await exchange(host, port, handshake("/", own))) == 200
        with pytest.raises(WebSocketClosed, match="403"):
            await connect(host, port, "/ws")
        # And the replica still serves its pages.
        server.local_edit((Insert(0, "still here"),))
        ws = await connect_page(server.url)
        stack.push_async_callback(ws.aclose)
        with trio.fail_after(10):
            while (message := json.loads(await ws.receive()))["type"] != "reset":
                pass
        assert message["text"] == "still here"


@pytest.mark.trio
async def test_the_token_is_kept_in_the_data_directory_and_derived_from_a_group_key(
    tmp_path: object,
) -> None:
    key = GroupKey(key_id=1, secret=bytes(range(32)))
    assert (
        editor_token(key)
        == editor_token(key)
        != editor_token(GroupKey(key_id=2, secret=bytes(range(32))))
    )
    assert len(editor_token(key)) == 24
    for bad in ("short", "x" * 15, "has space" * 4, "é" * 20):
        with pytest.raises(ConfigurationError, match="token"):
            EditorConfig(token=bad)
    tokens = []
    for _ in range(2):
        async with AsyncExitStack() as stack:
            port = free_ports(1, socket.SOCK_DGRAM)[0]
            node = NodeConfig(pid=1, bind=f"127.0.0.1:{port}", round_interval=0.02, seed=1)
            replica = ReplicaConfig(audit_interval=float("inf"), data_dir=str(tmp_path))
            server = await stack.enter_async_context(
                EditorServer(node, EditorConfig(replica=replica))
            )
            tokens.append(server.token)
    assert tokens[0] == tokens[1] and len(tokens[0]) == 32


ISSUE_HEADS = [
    # The probe's three: no Host, no key, a bad version (about 60 bytes each).
    b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    b"GET /ws?token=TOKEN HTTP/1.1\r\nHost: HOST\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n",
    b"GET /ws?token=TOKEN HTTP/1.1\r\nHost: HOST\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 99\r\n\r\n",
]

NAMES = ["Host", "Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Origin"]
VALUES = [
    "websocket",
    "Upgrade",
    "13",
    "dGhlIHNhbXBsZSBub25jZQ==",
    "HOST",
    "http://HOST",
    "https://evil.example",
    "",
    "\x00\xff",
    "x" * 5000,
]
TARGETS = ["/", "/ws", "/ws?token=TOKEN", "/ws?token=", "/ws?token=TOKEN&" + "a=1&" * 40, "*"]


def garbage_head(rng: random.Random) -> bytes:
    """A request head from the pieces above, or bytes."""
    if rng.random() < 0.2:
        return rng.randbytes(rng.randrange(300)) + b"\r\n\r\n"
    method = rng.choice(["GET", "GET", "GET", "POST", "HEAD", "G ET", ""])
    version = rng.choice(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2", "FOO"])
    lines = [f"{method} {rng.choice(TARGETS)} {version}"]
    for _ in range(rng.randrange(8)):
        lines.append(f"{rng.choice(NAMES)}:{rng.choice(['', ' '])}{rng.choice(VALUES)}")
    if rng.random() < 0.1:
        lines.append(" folded")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _fill(head: bytes, host: str, token: str) -> bytes:
    return head.replace(b"TOKEN", token.encode()).replace(b"HOST", host.encode())


async def _serve_memory(data: bytes) -> tuple[bytes, collections.Counter[str], int]:
    """``data`` fed to :func:`serve_http` over a memory stream pair: the
    answer, the refusals counted, the WebSockets opened."""
    client, server = trio.testing.memory_stream_pair()
    counter: collections.Counter[str] = collections.Counter()
    opened = 0

    async def on_websocket(ws: WebSocket) -> None:
        nonlocal opened
        opened += 1
        await ws.aclose()

    access = Access(token=TOKEN)
    out = b""
    async with trio.open_nursery() as nursery:
        files = {"/": (b"page", "text/html")}
        nursery.start_soon(
            lambda: serve_http(server, files, on_websocket, admit=access.check, rejected=counter)
        )
        await client.send_all(data)
        await client.send_eof()
        with trio.fail_after(5):
            while chunk := await client.receive_some(65536):
                out += chunk
    return out, counter, opened


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=600),
        st.binary(max_size=600).map(lambda b: b + b"\r\n\r\n"),
        st.randoms(use_true_random=False).map(garbage_head),
        st.sampled_from(ISSUE_HEADS),
    )
)
def test_serve_http_answers_any_head_and_counts_every_refusal(data: bytes) -> None:
    data = _fill(data, "127.0.0.1:80", TOKEN)
    out, counter, opened = trio.run(_serve_memory, data)
    code = status(out)
    assert code in (0, 101, 200, 400, 403, 404, 405, 421, 431), out[:60]
    if code >= 400 or (code == 0 and not opened):
        assert sum(counter.values()) == 1, (out[:60], counter)
    else:
        assert sum(counter.values()) == 0, counter
    assert (code == 101) == (opened == 1)


def test_heads_too_long_or_too_slow_are_refused() -> None:
    out, counter, _ = trio.run(_serve_memory, b"GET / HTTP/1.1\r\nX: " + b"a" * 20_000)
    assert status(out) == 431 and counter == {"head-too-large": 1}
    out, counter, _ = trio.run(_serve_memory, b"POST / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status(out) == 405 and counter == {"method": 1}

    async def slow() -> collections.Counter[str]:
        client, server = trio.testing.memory_stream_pair()
        counter: collections.Counter[str] = collections.Counter()

        async def refuse(ws: WebSocket) -> None:
            raise AssertionError("no WebSocket")

        await client.send_all(b"GET / HTTP/1.1\r\n")  # and nothing more
        with trio.fail_after(5):
            await serve_http(server, {}, refuse, rejected=counter, head_timeout=0.2)
        return counter

    assert trio.run(slow) == {"head-timeout": 1}


@pytest.mark.trio
async def test_thousands_of_hostile_requests_stop_no_replica_of_a_group() -> None:
    async with AsyncExitStack() as stack:
        servers = await start_group(stack, "token-ring")
        rng = random.Random(29)
        targets = [(s, *address(s)) for s in servers]
        answers: collections.Counter[int] = collections.Counter()

        async def attack(count: int) -> None:
            for _ in range(count):
                server, host, port = rng.choice(targets)
                draw = rng.random()
                if draw < 0.05:  # a page of the group among them
                    head = handshake("/ws?token=TOKEN", ("Host", "HOST"), *WS)
                elif draw < 0.25:
                    head = rng.choice(ISSUE_HEADS)
                else:
                    head = garbage_head(rng)
                answer = await exchange(host, port, _fill(head, f"{host}:{port}", server.token))
                answers[status(answer)] += 1

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(attack, 200)
        assert sum(answers.values()) == 2000
        assert answers[400] > 300 and answers[101] > 0, answers
        for server in servers:
            assert server.rejected["bad-handshake"] + server.rejected["bad-request"] > 0
        # Every replica is up, takes edits, and the texts stay equal.
        clients = await open_clients(stack, servers)
        for i, client in enumerate(clients):
            await client.send(client.page.local((Insert(0, f"<{i}>"),)))
        text = await converged(servers, clients)
        assert sorted(text[k : k + 3] for k in range(0, 9, 3)) == ["<0>", "<1>", "<2>"]


async def silent_page(url: str) -> trio.SocketStream:
    """A page that opens its WebSocket and never reads (a small receive
    buffer: the kernel holds little of what it is sent)."""
    host, port = address_of(url)
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
    await sock.connect((host, port))
    stream = trio.SocketStream(sock)
    token = url.split("token=")[1]
    await stream.send_all(handshake(f"/ws?token={token}", ("Host", f"{host}:{port}"), *WS))
    return stream


def address_of(url: str) -> tuple[str, int]:
    return parse_host_port(url.split("/")[2])


@pytest.mark.trio
async def test_pages_that_do_not_read_are_dropped_and_the_queues_stay_bounded() -> None:
    async with AsyncExitStack() as stack:
        server = await one_replica(stack, page_queue_messages=50, max_pages=12)
        silent = []
        for _ in range(10):
            stream = await silent_page(server.url)
            stack.push_async_callback(stream.aclose)
            silent.append(stream)
        reader = await connect_page(server.url)
        stack.push_async_callback(reader.aclose)
        got: list[dict[str, object]] = []

        async def read() -> None:
            while True:
                got.append(json.loads(await reader.receive()))

        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        nursery.start_soon(read)
        with trio.fail_after(10):
            while server.pages < 11:
                await trio.sleep(0.01)
        # The twelfth page fits, the thirteenth is refused (503).
        extra = await connect_page(server.url)
        stack.push_async_callback(extra.aclose)
        with pytest.raises(WebSocketClosed, match="503"):
            await connect_page(server.url)
        assert server.rejected["too-many-pages"] == 1
        await extra.aclose()
        word = "x" * 300
        edits = 0
        with trio.fail_after(60):
            while server.rejected["slow-page"] < 10:
                server.local_edit((Insert(0, word),))
                edits += 1
                assert server.queued <= server.pages * 50
                await trio.sleep(0)
        assert server.pages == 1  # the reader
        # The pages that read have every change (the reader got all of them).
        with trio.fail_after(10):
            while sum(m["type"] == "change" for m in got) < edits:
                await trio.sleep(0.01)


@pytest.mark.trio
async def test_pages_are_told_when_the_replica_stops() -> None:
    async with AsyncExitStack() as outer:
        inner = AsyncExitStack()
        await outer.enter_async_context(inner)
        server = await one_replica(inner)
        ws = await connect_page(server.url)
        outer.push_async_callback(ws.aclose)
        with trio.fail_after(10):
            while json.loads(await ws.receive())["type"] != "reset":
                pass
        await inner.aclose()
        messages = []
        with trio.fail_after(10), pytest.raises(WebSocketClosed):
            while True:
                messages.append(json.loads(await ws.receive()))
        assert messages[-1] == {"type": "stopped", "reason": "replica 1 stopped"}


def _editor(pid: int, bind: int, peer: tuple[int, int], *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "epto.cli", "editor", "--id", str(pid)]
    argv += ["--bind", f"127.0.0.1:{bind}", "--peer", f"{peer[0]}=127.0.0.1:{peer[1]}"]
    argv += ["--round-interval", "0.02", *extra]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def _ready(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("ready "), line
    return line.split()[2]


async def _until_closed(ws: WebSocket) -> list[dict[str, object]]:
    messages = []
    try:
        with trio.fail_after(30), pytest.raises(WebSocketClosed):
            while True:
                messages.append(json.loads(await ws.receive()))
    finally:
        await ws.aclose()
    return messages


def test_the_command_line_tells_pages_and_terminal_why_a_replica_stopped() -> None:
    """Replica 1 is superseded by another start of id 1: its page is told,
    its terminal gets one line and the status is 3; the other start's page
    is told when its ``--duration`` ends."""
    ports = free_ports(3, socket.SOCK_DGRAM)
    first = _editor(1, ports[0], (2, ports[1]), "--duration", "60")
    other = _editor(2, ports[1], (1, ports[0]), "--duration", "60")
    later: subprocess.Popen[str] | None = None
    try:
        url = _ready(first)
        _ready(other)

        async def main() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
            nonlocal later
            ws = await connect_page(url)
            # Its events reach replica 1 through replica 2. Incarnations count
            # wall-clock seconds: a second later, it is a later start.
            await trio.sleep(1.1)
            later = _editor(1, ports[2], (2, ports[1]), "--bot", "5", "--duration", "3")
            later_url = await trio.to_thread.run_sync(_ready, later)
            ws_later = await connect_page(later_url)
            return await _until_closed(ws), await _until_closed(ws_later)

        told, told_later = trio.run(main)
        assert told[-1]["type"] == "stopped"
        assert str(told[-1]["reason"]).startswith("replica 1 superseded")
        _, err = first.communicate(timeout=30)
        assert first.returncode == 3
        assert err.startswith("superseded 1: ") and err.count("\n") == 1, err
        assert told_later[-1] == {
            "type": "stopped",
            "reason": "replica 1 stopped (its --duration ended)",
        }
        assert later is not None
        later.communicate(timeout=30)
        assert later.returncode == 0
    finally:
        for proc in (first, other, later):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_the_command_line_reports_a_stop_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from epto.transports.trio_node import MemberExcludedError

    from epto.cli._editor import _report

    excluded = ExceptionGroup("nursery", [ExceptionGroup("inner", [MemberExcludedError("out")])])
    assert _report(excluded, 4) == 3
    assert capsys.readouterr().err == "excluded 4: out\n"
    fault = ExceptionGroup("nursery", [RuntimeError("boom\nsecond line")])
    assert _report(fault, 4) == 1
    assert (
        capsys.readouterr().err == "epto editor: replica 4 stopped on a fault: RuntimeError: boom\n"
    )
