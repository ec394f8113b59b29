"""A live group of three editor replicas (EpTO, in-process, loopback) under
hostile pages and hostile HTTP clients: hypothesis draws page messages
(wrong types, huge and negative numbers, deep nesting, bad revisions,
every message type, oversized) and raw HTTP requests (garbage, and the
WebSocket heads that stopped a replica: no ``Host``, no key, a bad
version), thousands of them. Every replica stays up, a faulty message
closes only its own page (``refused``, counted in ``rejected``), a
legitimate edit afterwards converges with the replicas' texts equal, and
the process's resident memory stays bounded.

The group runs in a trio loop on a thread of its own; each hypothesis
example hands one message to it (``trio.from_thread``) and waits until the
replica has taken it in."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
import trio.testing
from epto.services._websocket import WebSocket, WebSocketClosed, connect_page
from epto.services.trio_editor import EditorConfig, EditorServer
from epto.services.trio_rsm import ReplicaConfig
from epto.transports._ports import free_ports
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epto.apps._editor import (
    MAX_PAGE_MESSAGE,
    PageCursor,
    PageEdit,
    PageFault,
    PageModel,
    PageSession,
    StalePage,
    check_work,
    parse_page_message,
)
from epto.apps._ot import Delete, Insert
from epto.endpoint import NodeConfig

PAGE_MESSAGES = 1500
HTTP_REQUESTS = 500


def _resident() -> int:
    """Resident memory of this process, bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class LiveGroup:
    """Three EditorServers (EpTO, loopback) in a trio loop on a thread."""

    def __init__(self) -> None:
        self.servers: list[EditorServer] = []
        self.pages: dict[int, WebSocket] = {}
        self.sent = 0
        self.http = 0
        self.statuses: dict[str, int] = {}
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._started.wait(60) or self._error is not None:
            raise RuntimeError("the group did not start") from self._error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported by check()
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        ports = free_ports(3, socket.SOCK_DGRAM)
        presence = free_ports(3, socket.SOCK_DGRAM)
        members = {p + 1: f"127.0.0.1:{port}" for p, port in enumerate(ports)}
        peers = {p + 1: f"127.0.0.1:{port}" for p, port in enumerate(presence)}
        async with AsyncExitStack() as stack:
            for pid, bind in members.items():
                node = NodeConfig(
                    mode="epto", pid=pid, bind=bind, members=members, round_interval=0.02, seed=pid
                )
                config = EditorConfig(
                    presence=peers[pid],
                    presence_peers=peers,
                    replica=ReplicaConfig(audit_interval=float("inf")),
                )
                self.servers.append(await stack.enter_async_context(EditorServer(node, config)))
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(self._nursery.cancel_scope.cancel)
            self._started.set()
            await self._stop.wait()

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        self.check()
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def check(self) -> None:
        if self._error is not None or not self._thread.is_alive():
            raise AssertionError("the group stopped") from self._error

    def close(self) -> None:
        if self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)

    # -- in the group's loop ---------------------------------------------------------

    async def _settle(self) -> None:
        """Until every task waits (the replica took the message in)."""
        with trio.move_on_after(0.05):
            await trio.testing.wait_all_tasks_blocked(cushion=0.001)

    async def _page(self, index: int) -> WebSocket:
        ws = self.pages.get(index)
        if ws is None or ws.closed:
            ws = self.pages[index] = await connect_page(self.servers[index].url)
            self._nursery.start_soon(self._drain, ws)
        return ws

    async def _drain(self, ws: WebSocket) -> None:
        """Read what the server sends (a page that does not read is dropped:
        a cause of its own, not the one under test)."""
        try:
            while True:
                await ws.receive()
        except WebSocketClosed:
            pass
        finally:
            with trio.CancelScope(shield=True):
                await ws.aclose(timeout=1)

    async def page_message(self, index: int, raw: str) -> None:
        ws = await self._page(index)
        try:
            await ws.send(raw)
            self.sent += 1
        except WebSocketClosed:
            pass
        await self._settle()

    async def http_request(self, index: int, head: bytes) -> None:
        url = urllib.parse.urlsplit(self.servers[index].url)
        stream = await trio.open_tcp_stream(url.hostname or "", url.port or 80)
        answer = b""
        try:
            with trio.move_on_after(1):
                await stream.send_all(head)
                while b"\r\n" not in answer:
                    data = await stream.receive_some(4096)
                    if not data:
                        break
                    answer += data
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")[:12] or "(closed)"
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.http += 1

    async def refused_beside(self, index: int) -> tuple[dict[str, Any], str]:
        """A page sends a caret out of range beside a page that edits: what
        the first is told last, and the answer to the second's edit."""
        url = self.servers[index].url
        bad, good = await connect_page(url), await connect_page(url)
        model = PageModel()
        with trio.fail_after(10):
            while not (model.rev and model.ready):
                model.receive(json.loads(await good.receive()))
        await bad.send(json.dumps({"type": "cursor", "base": 1, "pos": -1, "end": -1}))
        told = (await _messages_until_closed(bad))[-1]
        await bad.aclose(timeout=1)
        message = model.local((Insert(0, "beside "),))
        await good.send(json.dumps(message))
        with trio.fail_after(10):
            while model.inflight is not None:
                reply = json.loads(await good.receive())
                model.receive(reply)
        await good.aclose(timeout=1)
        return told, reply["type"]

    async def truncate(self) -> None:
        """A user clears the text (keeps every page's reset small)."""
        server = self.servers[0]
        if server.ready and server.doc.view:
            server.local_edit((Delete(0, len(server.doc.view)),))
        await self._settle()

    async def legitimate_edit(self) -> str:
        """A page per replica, one edit, until every replica and page agree."""
        pages = []
        async with trio.open_nursery() as nursery:
            for server in self.servers:
                ws = await connect_page(server.url)
                model = PageModel()
                pages.append((ws, model))
                nursery.start_soon(self._follow, ws, model)
            with trio.fail_after(20):
                while not all(m.rev and m.ready for _, m in pages):
                    await trio.sleep(0.01)
            ws, model = pages[1]
            message = model.local((Insert(0, "still here: "),))
            await ws.send(json.dumps(message))
            with trio.fail_after(30):
                while True:
                    texts = {s.doc.text for s in self.servers} | {s.doc.view for s in self.servers}
                    texts |= {m.text for _, m in pages}
                    if len(texts) == 1 and all(m.synced for _, m in pages):
                        break
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        for ws, _ in pages:
            await ws.aclose(timeout=1)
        return texts.pop()

    async def _follow(self, ws: WebSocket, model: PageModel) -> None:
        try:
            while True:
                reply = model.receive(json.loads(await ws.receive()))
                if reply is not None:
                    await ws.send(json.dumps(reply))
        except WebSocketClosed:
            pass


# -- what hostile pages send ------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_numbers = st.one_of(
    st.integers(-2, 30),
    st.integers(-2, 30),
    st.integers(-(2**70), 2**70),
    st.sampled_from([-1, 2**31, 2**53, 2**53 + 1, 2**63, 2**64, 10**8, 10**400]),
    st.booleans(),
    st.floats(),
    st.none(),
    st.text(max_size=3),
)
_small_text = st.text(max_size=12)
_texts = st.one_of(
    *[_small_text] * 6,
    # Above one payload (1024 bytes), and above the 65,536 of one insert.
    st.sampled_from(["x" * 2_000, "é\n" * 900, "😀" * 400, "z" * 70_000]),
)
_edit = st.one_of(
    st.tuples(st.just("i"), _numbers, _texts).map(list),
    st.tuples(st.just("d"), _numbers, _numbers).map(list),
    st.lists(_json, max_size=4),
    _json,
)
_edits = st.one_of(
    st.lists(_edit, max_size=4), _json, st.lists(st.just(["i", 0, "a"]), max_size=1500)
)
_types = st.sampled_from(
    ["edit", "cursor", "hello", "state", "reset", "change", "ack", "presence", "refused", "stopped"]
)
_messages = st.one_of(
    # Edits that may well be taken (a fresh page is at revision 1), some of
    # them larger than a payload.
    st.fixed_dictionaries(
        {
            "type": st.just("edit"),
            "base": st.integers(0, 4),
            "edits": st.lists(
                st.one_of(
                    st.tuples(st.just("i"), st.integers(0, 4), _texts).map(list),
                    st.tuples(st.just("d"), st.integers(0, 2), st.integers(0, 3)).map(list),
                ),
                min_size=1,
                max_size=3,
            ),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("edit"), "base": _numbers, "edits": _edits},
        optional={"extra": _json},
    ),
    st.fixed_dictionaries(
        {"type": st.just("cursor"), "base": _numbers, "pos": _numbers, "end": _numbers}
    ),
    st.fixed_dictionaries({"type": _types}, optional={"base": _numbers, "edits": _edits}),
    st.fixed_dictionaries({}, optional={"type": _json, "base": _numbers, "pos": _numbers}),
    _json,
)


def _dumps(message: Any) -> str:
    try:
        return json.dumps(message)
    except ValueError:  # 10**400 as a float: the page's JSON.stringify would not send it
        return json.dumps(str(message))


_raw_pages = st.one_of(
    *[_messages.map(_dumps)] * 8,
    st.integers(1, 200_000).map(lambda n: "[" * n),
    st.integers(1, 200_000).map(lambda n: '{"type":"edit","base":1,"edits":' + "[" * n),
    st.integers(1, 50_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.text(max_size=40),
    st.sampled_from(["", "null", "1e999999", "9" * 5000, '{"type":"edit"', "NaN"]),
)

# -- what hostile HTTP clients send ---------------------------------------------------------

_UPGRADE = (
    "GET /ws?token={token} HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Origin: http://{host}\r\n"
)
_KEY = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
THREE_HEADS = (
    # No Host, no key, a bad version: each stopped a replica (wsproto raised).
    _UPGRADE + _KEY + "Sec-WebSocket-Version: 13\r\n\r\n",
    _UPGRADE + "Host: {host}\r\nSec-WebSocket-Version: 13\r\n\r\n",
    _UPGRADE + "Host: {host}\r\n" + _KEY + "Sec-WebSocket-Version: 99\r\n\r\n",
)
_header_names = st.sampled_from(
    [
        "Host",
        "Upgrade",
        "Connection",
        "Sec-WebSocket-Key",
        "Sec-WebSocket-Version",
        "Origin",
        "Content-Length",
        "Transfer-Encoding",
        "X",
        "",
    ]
)
_header_values = st.one_of(
    st.sampled_from(["websocket", "Upgrade", "13", "{host}", "http://{host}", "-1", "99" * 40]),
    st.text(max_size=30),
)
_heads = st.one_of(
    st.binary(max_size=300).map(lambda b: b + b"\r\n\r\n"),
    st.builds(
        lambda method, target, version, headers: (
            f"{method} {target} {version}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers)
            + "\r\n"
        ),
        st.sampled_from(["GET", "POST", "HEAD", "", "G\x00T", "GET GET"]),
        st.sampled_from(["/", "/ws", "/ws?token={token}", "/ws?token=x", "*", "", "/%00"]),
        st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/9", ""]),
        st.lists(st.tuples(_header_names, _header_values), max_size=8),
    ),
    st.sampled_from(THREE_HEADS),
    st.integers(1, 40).map(lambda n: "GET / HTTP/1.1\r\n" + "X: " + "y" * 1000 * n + "\r\n\r\n"),
)


def _fill(head: str | bytes, server: EditorServer) -> bytes:
    if isinstance(head, bytes):
        return head
    url = urllib.parse.urlsplit(server.url)
    token = urllib.parse.parse_qs(url.query).get("token", [""])[0]
    return head.replace("{token}", token).replace("{host}", url.netloc).encode("utf-8")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("[" * 100_000, "not-json"),  # RecursionError in the parser
        ("9" * 5000, "not-json"),  # above the int conversion limit
        ("x" * (MAX_PAGE_MESSAGE + 1), "too-large"),
        ("[]", "not-an-object"),
        ('{"type": "nope"}', "unknown-type"),
        ('{"type": "cursor", "base": 1, "pos": -1, "end": -1}', "out-of-range"),
        ('{"type": "cursor", "base": 1, "pos": true, "end": 0}', "bad-field"),
        ('{"type": "cursor", "base": 1, "pos": 1.0, "end": 0}', "bad-field"),
        ('{"type": "cursor", "base": 1, "pos": 0}', "bad-field"),
        ('{"type": "edit", "base": -1, "edits": []}', "out-of-range"),
        ('{"type": "edit", "base": 1, "edits": [["i", 100000000, "x"]]}', "bad-edits"),
        ('{"type": "edit", "base": 1, "edits": [["d", 0, false]]}', "bad-edits"),
        ('{"type": "edit", "base": 1, "edits": [["i", 0, 5]]}', "bad-edits"),
        ('{"type": "edit", "base": 1, "edits": {}}', "bad-edits"),
        ('{"type": "edit", "base": 1, "edits": [["i", 0, "a"]]' + ', "x": 1}', None),
        ('{"type": "cursor", "base": 1, "pos": 2, "end": 0}', None),
    ],
)
def test_page_messages_are_checked_whole(raw: str, reason: str | None) -> None:
    if reason is None:
        assert isinstance(parse_page_message(raw, max_length=1000), PageEdit | PageCursor)
        return
    with pytest.raises(PageFault) as fault:
        parse_page_message(raw, max_length=1000)
    assert fault.value.reason == reason


def test_revisions_never_sent_and_edits_too_costly_are_faults() -> None:
    session = PageSession()
    session.reset("abc")
    session.reset("abc")  # revision 2; edits made on 1 were made before it
    with pytest.raises(StalePage):
        session.receive(1, (Insert(0, "x"),))
    with pytest.raises(PageFault, match="bad-revision"):
        session.receive(3, (Insert(0, "x"),))  # never sent
    for _ in range(600):
        session.push((Insert(0, "y"),))
    with pytest.raises(PageFault, match="too-far-behind"):
        session.receive(2, tuple(Insert(0, "z") for _ in range(1000)))
    check_work((Insert(0, "z"),), 10**7)  # one edit on a long text: fine
    with pytest.raises(PageFault, match="too-much-work"):
        check_work(tuple(Insert(0, "z") for _ in range(100)), 10**6)


@pytest.fixture(scope="module")
def group() -> Iterator[LiveGroup]:
    live = LiveGroup()
    yield live
    live.close()


def test_the_three_websocket_heads_are_refused(group: LiveGroup) -> None:
    for head in THREE_HEADS:
        group.statuses.clear()
        group.call(group.http_request, 0, _fill(head, group.servers[0]))
        # 400; a head without Host is refused by the Host check first (421).
        assert list(group.statuses) in (["HTTP/1.1 400"], ["HTTP/1.1 421"]), head
    group.check()


def test_a_caret_out_of_range_closes_its_page_and_nothing_else(group: LiveGroup) -> None:
    # {"type":"cursor","base":R,"pos":-1,"end":-1} reached the presence
    # encoder and stopped the replica (LocalProtocolError).
    before = sum(group.servers[0].rejected.values())
    for base in (0, 1, 2):
        raw = json.dumps({"type": "cursor", "base": base, "pos": -1, "end": -1})
        group.call(group.page_message, 0, raw)
    group.call(group.page_message, 0, "[" * 100_000)  # RecursionError, uncaught
    group.call(group.page_message, 0, "x" * (MAX_PAGE_MESSAGE + 1))
    assert sum(group.servers[0].rejected.values()) > before
    assert group.servers[0].rejected["page-out-of-range"] >= 1
    assert group.servers[0].rejected["page-not-json"] >= 1
    group.check()
    assert all(s.ready for s in group.servers)
    # The page is told why, then closed; a page beside it goes on.
    told, other = group.call(group.refused_beside, 1)
    assert told["type"] == "refused" and told["reason"].startswith("out-of-range")
    assert other == "ack"


async def _messages_until_closed(ws: WebSocket) -> list[dict[str, Any]]:
    out = []
    with trio.fail_after(10):
        try:
            while True:
                out.append(json.loads(await ws.receive()))
        except WebSocketClosed:
            pass
    return out


def test_thousands_of_hostile_messages_leave_every_replica_up_and_equal(
    group: LiveGroup,
) -> None:
    rss_before = _resident()
    done = {"pages": 0, "http": 0}

    @settings(
        max_examples=PAGE_MESSAGES,
        derandomize=True,
        deadline=None,
        database=None,
        # Deterministic examples; their generation time depends on the machine's load.
        suppress_health_check=list(HealthCheck),
    )
    @given(index=st.integers(0, 2), raw=_raw_pages)
    def pages(index: int, raw: str) -> None:
        done["pages"] += 1
        if done["pages"] % 200 == 0:
            group.call(group.truncate)
        group.call(group.page_message, index, raw)

    @settings(
        max_examples=HTTP_REQUESTS,
        derandomize=True,
        deadline=None,
        database=None,
        # Deterministic examples; their generation time depends on the machine's load.
        suppress_health_check=list(HealthCheck),
    )
    @given(index=st.integers(0, 2), head=_heads)
    def requests(index: int, head: str | bytes) -> None:
        done["http"] += 1
        group.call(group.http_request, index, _fill(head, group.servers[index]))

    pages()
    requests()
    group.check()
    rejected: dict[str, int] = {}
    for server in group.servers:
        for reason, count in server.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + count
    assert all(server.ready for server in group.servers)
    text = group.call(group.legitimate_edit)
    assert text.startswith("still here: ")
    rss_after = _resident()
    print(
        f"\nhostile run: {done['pages']} page messages ({group.sent} written), "
        f"{done['http']} HTTP requests; refusals by reason: {dict(sorted(rejected.items()))}; "
        f"HTTP answers: {dict(sorted(group.statuses.items()))}; "
        f"RSS {rss_before / 1e6:.0f} MB before, {rss_after / 1e6:.0f} MB after"
    )
    assert done["pages"] >= PAGE_MESSAGES // 2 and done["http"] >= HTTP_REQUESTS // 2
    assert sum(n for r, n in rejected.items() if r.startswith("page-")) > done["pages"] // 4
    assert rss_after - rss_before < 200e6
