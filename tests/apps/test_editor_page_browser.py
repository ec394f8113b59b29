"""The editor's page alone in headless Chromium, against a stand-in server
(a plain HTTP server on loopback that serves the page and answers the
WebSocket handshake with 403, as a replica does to a page without its
token), and fed server messages directly: it presents the token of its URL,
says it is refused in one line, and shows a replica's ``stopped`` message
read only. Skipped without chromium (see test_editor_browser.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, ClassVar

import pytest

from .test_editor_browser import By
from .test_editor_browser import browser as browser

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
