"""The editor's page alone in headless Chromium: against a stand-in server
(a plain HTTP server on loopback that serves the page and answers the
WebSocket handshake with 403, as a replica does to a page without its
token) it presents the token of its URL and says it is refused in one line;
fed a replica's ``stopped`` message it shows it, read only; and against a
model of the server (``ModelServer``: what services/trio_editor.py does
for one page, messages in transit both ways, dropped connections, a replica
that stops being ready and comes back, another author editing), seeded
random runs of typing, deleting, pasting, undo and redo end with the page
showing the server's text, and every undo takes back exactly the page's own
last step. Skipped without chromium (see test_editor_browser.py)."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, ClassVar

import pytest

from epto.apps._editor import PageSession, StalePage, decode
from epto.apps._ot import Delete, Insert, apply

from .test_editor_browser import By, chrome

WAIT = 20.0
PAGE = resources.files("epto.apps").joinpath("editor_static", "index.html").read_bytes()


class Refusing(BaseHTTPRequestHandler):
    """Serves the page; refuses every WebSocket handshake (403), noting its target."""

    targets: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/ws":
            self.targets.append(self.path)
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # One browser for the module: every test loads its page afresh.
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def refusing() -> Iterator[tuple[str, list[str]]]:
    targets: ClassVar[list[str]] = []
    handler = type("Handler", (Refusing,), {"targets": targets})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", targets
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {WAIT} s"
        time.sleep(0.05)


def test_a_refused_page_says_so_in_one_line(browser: Any, refusing: tuple[str, list[str]]) -> None:
    url, targets = refusing
    browser.get(url + "?token=s3cr%2Bt")
    line = browser.find_element(By.ID, "line")
    _until("refused", lambda: line.text.startswith("refused"))
    assert line.text == "refused: open the URL the replica printed, with its token"
    assert browser.execute_script("return window.epto.state()") == "refused"
    # It presented the token of its URL.
    assert targets[0] == "/ws?token=s3cr%2Bt"
    # From the fragment too (not sent to the server with the page's request).
    browser.get(url + "#token=abc")
    _until("presented", lambda: "/ws?token=abc" in targets)
    # Without a token it asks without one.
    browser.get(url)
    _until("asked without a token", lambda: targets[-1] == "/ws")


def test_a_stopped_replica_leaves_its_page_read_only_with_its_reason(browser: Any) -> None:
    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    browser.execute_script(
        "receive({type: 'state', ready: true, unsaved: false});"
        "receive({type: 'reset', rev: 1, text: 'hello'});"
        "receive({type: 'stopped', reason: 'excluded by the group\\nsecond line'});"
    )
    assert browser.find_element(By.ID, "line").text == "stopped: excluded by the group"
    assert browser.execute_script("return window.epto.state()") == "stopped"
    assert browser.execute_script("return document.getElementById('text').readOnly") is True
    assert browser.execute_script("return window.epto.text()") == "hello"


# -- the page's protocol against a model of the server ------------------------------

FAKE = """
window.sent = [];
ws = {readyState: 1, send(m) { window.sent.push(m); }};
wsOpened();
"""

LOCAL = """
const [kind, a, b, s] = arguments;
const arr = cps(ta.value), n = arr.length;
let p = kind === "continue" ? toCp(ta.value, ta.selectionEnd) : Math.floor(a * (n + 1));
p = Math.min(p, n);
const m = Math.min(n - p, Math.floor(b * 4));
let inputType = "insertText", caret = p + cps(s).length;
if (kind === "type" || kind === "continue") insertAt(arr, p, cps(s));
else if (kind === "delete") {
    arr.splice(p, Math.max(m, 1)); inputType = "deleteContentBackward"; caret = p;
} else { arr.splice(p, m); insertAt(arr, p, cps(s)); inputType = "insertFromPaste"; }
ta.value = arr.join("");
ta.setSelectionRange(toU16(arr, caret), toU16(arr, caret));
ta.dispatchEvent(new InputEvent("input", {inputType}));
"""


class ModelServer:
    """What services/trio_editor.py does for one page, with the network in
    between: messages in transit both ways, a connection that drops (what
    was in transit towards the server arrives or not, in order), a replica
    that stops being ready and comes back; other authors edit its text."""

    def __init__(self, driver: Any, rng: Any) -> None:
        self.driver, self.rng = driver, rng
        self.text = ""
        self.ready = True
        self.session: PageSession | None = None
        self.waiting = False
        self.to_page: list[dict[str, Any]] = []
        self.to_server: list[str] = []

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def connect(self) -> None:
        self.js(FAKE)
        self.session = PageSession()
        self.to_page = [{"type": "hello", "author": 1, "name": "Ada", "color": "red"}]
        self.to_page.append({"type": "state", "ready": self.ready, "unsaved": False})
        if self.ready:
            self.to_page.append(self.session.reset(self.text))
        self.waiting = not self.ready

    def drop(self) -> None:
        self.collect()
        arrive = self.rng.randint(0, len(self.to_server))
        for raw in self.to_server[:arrive]:
            self.at_server(raw)
        self.to_server, self.to_page, self.session = [], [], None
        self.js("ws.readyState = 3; wsClosed();")

    def set_ready(self, ready: bool) -> None:
        self.ready = ready
        if self.session is None:
            return
        if not ready:
            self.waiting = True
        elif self.waiting:
            self.waiting = False
            self.to_page.append(self.session.reset(self.text))
        self.to_page.append({"type": "state", "ready": ready, "unsaved": False})

    def other(self) -> None:
        n = len(self.text)
        pos = self.rng.randint(0, n)
        if n and self.rng.random() < 0.4:
            op: Any = (Delete(min(pos, n - 1), self.rng.randint(1, 3)),)
        else:
            op = (Insert(pos, self.rng.choice(["x", "yz", "é😀"])),)
        self.text = apply(self.text, op)
        if self.session is not None and not self.waiting:
            self.to_page.append(self.session.push(op))

    def collect(self) -> None:
        self.to_server += self.js("const s = window.sent; window.sent = []; return s;")

    def at_server(self, raw: str) -> None:
        assert self.session is not None
        message = json.loads(raw)
        if message["type"] == "cursor":
            with contextlib.suppress(StalePage):
                self.session.position(message["base"], message["pos"])
            return
        assert message["type"] == "edit", message
        op = decode(message["edits"])
        if not self.ready:
            self.waiting = True
            return
        try:
            rebased, ack = self.session.receive(message["base"], op)
        except StalePage:
            return
        self.text = apply(self.text, rebased)
        self.to_page.append(ack)

    def to_the_page(self) -> None:
        self.js("receive(JSON.parse(arguments[0]))", json.dumps(self.to_page.pop(0)))

    def to_the_server(self) -> None:
        self.collect()
        if self.to_server and self.session is not None:
            self.at_server(self.to_server.pop(0))

    def settle(self) -> str:
        if self.session is None:
            self.connect()
        self.set_ready(True)
        for _ in range(10_000):
            self.collect()
            if not (self.to_page or self.to_server):
                break
            if self.to_page:
                self.to_the_page()
            if self.to_server:
                self.to_the_server()
        assert self.js("return window.epto.synced()") is True
        return str(self.js("return window.epto.text()"))


@pytest.mark.parametrize("seed", range(2))
def test_the_page_converges_through_drops_restarts_undo_and_offline_typing(
    browser: Any, seed: int
) -> None:
    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    rng = random.Random(seed)
    server = ModelServer(browser, rng)
    server.connect()
    actions = ["local"] * 6 + ["other"] * 3 + ["to page"] * 6 + ["to server"] * 6
    actions += ["undo", "undo", "redo", "drop", "reconnect", "not ready", "ready"]
    for _ in range(250):
        action = rng.choice(actions)
        if action == "local":
            kind = rng.choice(["type", "continue", "continue", "delete", "paste"])
            word = rng.choice(["a", "b", "é", "😀", "cd"])
            browser.execute_script(LOCAL, kind, rng.random(), rng.random(), word)
        elif action in ("undo", "redo"):
            browser.execute_script(f"{action}()")
        elif action == "other":
            server.other()
        elif action == "to page" and server.to_page:
            server.to_the_page()
        elif action == "to server":
            server.to_the_server()
        elif action == "drop" and server.session is not None:
            server.drop()
        elif action == "reconnect" and server.session is None:
            server.connect()
        elif action in ("ready", "not ready"):
            server.set_ready(action == "ready")
    assert server.settle() == server.text


@pytest.mark.parametrize("seed", range(2))
def test_an_undo_takes_back_the_pages_own_step_and_nothing_else(browser: Any, seed: int) -> None:
    # The page types characters of its own (emoji), another author inserts
    # others (Cyrillic) anywhere, messages cross, the replica stops being
    # ready and comes back (the page rebases what it kept): an undo removes
    # exactly the characters of the page's last step, a redo puts them
    # back, and the others' characters are never touched.
    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    rng = random.Random(100 + seed)
    server = ModelServer(browser, rng)
    server.connect()
    browser.execute_script("stepPause = 1e9")  # steps split by the caret alone
    mine = iter(chr(0x1F600 + k) for k in range(80))
    theirs = iter(chr(0x0410 + k) for k in range(64))
    undo: list[set[str]] = []
    redo: list[set[str]] = []
    joins = False

    def seen() -> tuple[set[str], set[str]]:
        text = str(browser.execute_script("return window.epto.text()"))
        return {c for c in text if ord(c) >= 0x1F600}, {c for c in text if ord(c) < 0x1F600}

    actions = ["type"] * 4 + ["paste"] * 2 + ["other"] * 3 + ["to page"] * 5
    actions += ["to server"] * 5 + ["undo"] * 3 + ["redo"] * 2 + ["not ready", "ready"]
    for _ in range(200):
        action = rng.choice(actions)
        if action in ("type", "paste"):
            chars = [next(mine, None) for _ in range(1 if action == "type" else 2)]
            if None in chars:
                continue
            word = "".join(c for c in chars if c is not None)
            kind = "continue" if action == "type" else "paste"
            browser.execute_script(LOCAL, kind, rng.random(), 0.0, word)
            if action == "type" and joins:
                undo[-1] |= set(word)
            else:
                undo.append(set(word))
            redo.clear()
            joins = action == "type"
        elif action in ("undo", "redo"):
            before, others_before = seen()
            browser.execute_script(f"{action}()")
            after, others_after = seen()
            assert others_after == others_before, action
            if action == "undo" and undo:
                step = undo.pop()
                redo.append(step)
                assert after == before - step, (action, before, step, after)
            elif action == "redo" and redo:
                step = redo.pop()
                undo.append(step)
                assert after == before | step, (action, before, step, after)
            else:
                assert after == before
            joins = False
        elif action == "other":
            char = next(theirs, None)
            if char is None:
                continue
            pos = rng.randint(0, len(server.text))
            server.text = apply(server.text, (Insert(pos, char),))
            if server.session is not None and not server.waiting:
                server.to_page.append(server.session.push((Insert(pos, char),)))
        elif action == "to page" and server.to_page:
            server.to_the_page()
        elif action == "to server":
            server.to_the_server()
        elif action in ("ready", "not ready"):
            server.set_ready(action == "ready")
    assert server.settle() == server.text
    assert seen() == ({c for s in undo for c in s}, {c for c in server.text if ord(c) < 0x1F600})


def test_a_name_tag_stays_inside_the_box(browser: Any) -> None:
    # A caret on the first line has its tag below it (above, it would be
    # clipped by the box); one further down keeps it above.
    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    browser.execute_script(
        "receive({type: 'state', ready: true, unsaved: false});"
        "receive({type: 'reset', rev: 1, text: 'first line\\nsecond\\nthird'});"
        "receive({type: 'presence', cursors: ["
        "{author: 2, name: 'Brian', color: 'red', pos: 0, end: 0},"
        "{author: 3, name: 'Chloé', color: 'blue', pos: 18, end: 18}]});"
    )
    box, tags = browser.execute_script(
        "const r = (e) => { const b = e.getBoundingClientRect();"
        " return [b.top, b.bottom, b.left, b.right]; };"
        "return [r(document.getElementById('overlay')),"
        " Array.from(document.querySelectorAll('#overlay .caret b')).map("
        "   (b) => [b.textContent, r(b), r(b.parentElement)])];"
    )
    assert [t[0] for t in tags] == ["Brian", "Chloé"]
    for _, tag, _caret in tags:
        assert box[0] <= tag[0] and tag[1] <= box[1], (box, tag)
        assert box[2] <= tag[2] and tag[3] <= box[3], (box, tag)
    (_, first, first_caret), (_, lower, lower_caret) = tags
    assert first[0] >= first_caret[0]  # below its caret
    assert lower[1] <= lower_caret[0] + 1  # above its caret


def test_a_long_paste_is_one_step_sent_in_several_messages(browser: Any) -> None:
    # A paste of 600,000 characters leaves in two messages of at most
    # 500,000 (the replica takes messages of at most 4 Mi characters), one
    # after the other, and is still one undo step.
    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    server = ModelServer(browser, random.Random(1))
    server.connect()
    while server.to_page:
        server.to_the_page()
    browser.execute_script(LOCAL, "paste", 0.0, 0.0, "ab" * 300_000)
    sizes = []
    for _ in range(10):
        server.collect()
        edits = [json.loads(m) for m in server.to_server]
        sizes += [[len(e[2]) for e in m["edits"]] for m in edits if m["type"] == "edit"]
        while server.to_server:
            server.to_the_server()
        while server.to_page:
            server.to_the_page()
    assert sizes == [[500_000], [100_000]]
    assert server.settle() == "ab" * 300_000
    browser.execute_script("undo()")
    assert server.settle() == ""
