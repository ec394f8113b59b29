"""The editor's door in headless Chromium, against a live ``epto editor``:
the page opened with the URL the replica printed connects; opened without
its token, or with another one, it is refused and says so in one line; a
page of another origin (served from another port) that knows the token
cannot open the WebSocket either. A replica that stops tells its page why,
which then is read only. Skipped without chromium (see
test_editor_browser.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .test_editor_browser import By
from .test_editor_browser import browser as browser
from .test_editor_reconnect_browser import Editor

WAIT = 30.0
REFUSED = "refused: open the URL the replica printed, with its token"

ELSEWHERE = b"""<!doctype html><script>
window.outcome = "pending";
const ws = new WebSocket(new URLSearchParams(location.search).get("ws"));
ws.onopen = () => { window.outcome = "open"; };
ws.onclose = () => { if (window.outcome === "pending") window.outcome = "refused"; };
</script>"""


class Elsewhere(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(ELSEWHERE)))
        self.end_headers()
        self.wfile.write(ELSEWHERE)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def elsewhere() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {WAIT} s"
        time.sleep(0.05)


def test_only_the_printed_url_opens_the_page(browser: Any, elsewhere: str, tmp_path: Path) -> None:
    editor = Editor(tmp_path)
    try:
        editor.start()
        url = urlsplit(editor.url)
        assert url.query.startswith("token=")
        token = url.query.removeprefix("token=")
        bare = f"{url.scheme}://{url.netloc}/"

        def line() -> str:
            return str(browser.find_element(By.ID, "line").text)

        # The URL printed: connected, editable.
        browser.get(editor.url)
        _until("connected", lambda: browser.execute_script("return window.epto.synced()"))
        assert line() == ""
        # The token in the fragment works too (never sent in a request for the page).
        browser.get(f"{bare}#token={token}")
        _until("connected", lambda: browser.execute_script("return window.epto.synced()"))
        # Without the token, or with another: refused, in one line.
        for wrong in (bare, f"{bare}?token={'x' * len(token)}"):
            browser.get(wrong)
            _until("refused", lambda: line() == REFUSED)
            assert browser.execute_script("return window.epto.state()") == "refused"
            assert browser.execute_script("return window.epto.synced()") is False
        # A page of another origin that knows the token: refused too (the
        # same WebSocket opened from the page's own origin opens).
        ws_url = f"ws://{url.netloc}/ws?token={token}"
        browser.get(editor.url)
        browser.execute_script(
            "window.outcome = 'pending'; const w = new WebSocket(arguments[0]);"
            "w.onopen = () => { window.outcome = 'open'; w.close(); };"
            "w.onclose = () => { if (window.outcome === 'pending') window.outcome = 'refused'; };",
            ws_url,
        )
        _until("settled", lambda: browser.execute_script("return window.outcome") != "pending")
        assert browser.execute_script("return window.outcome") == "open"
        browser.get(f"{elsewhere}?ws={ws_url}")
        _until("settled", lambda: browser.execute_script("return window.outcome") != "pending")
        assert browser.execute_script("return window.outcome") == "refused"
    finally:
        editor.stop()


def test_a_stopped_replica_says_why_on_its_page(browser: Any, tmp_path: Path) -> None:
    editor = Editor(tmp_path)
    editor.argv.append("--duration=3")
    try:
        editor.start()
        browser.get(editor.url)
        _until("connected", lambda: browser.execute_script("return window.epto.synced()"))
        _until("stopped", lambda: browser.execute_script("return window.epto.state()") == "stopped")
        line = browser.find_element(By.ID, "line").text
        assert line.startswith("stopped: ") and len(line) > len("stopped: "), line
        assert browser.execute_script("return document.getElementById('text').readOnly") is True
        assert editor.proc is not None
        assert editor.proc.wait(timeout=WAIT) == 0
    finally:
        editor.stop()
