"""The editor's page in a real headless Chromium while its replica is
SIGKILLed and started again with its data directory (``epto editor
--data-dir``, same id and ports): the page says it is reconnecting and is
editable (what is typed meanwhile is kept: test_editor_offline_browser.py),
reconnects by itself, shows the text the replica kept, and edits again; an
edit the replica may not have received (sent, then the connection lost before
its acknowledgement) is reported as not sent, with the page's copy. Skipped
without chromium (see test_editor_browser.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from epto.transports._ports import free_ports

from .test_editor_browser import By, Keys
from .test_editor_browser import browser as browser

WAIT = 30.0


class Editor:
    def __init__(self, tmp: Path) -> None:
        node = free_ports(1, socket.SOCK_DGRAM)[0]
        http, transfer = free_ports(2, socket.SOCK_STREAM)
        self.argv = [sys.executable, "-m", "epto.cli", "editor", "--id=1"]
        self.argv += [f"--bind=127.0.0.1:{node}", f"--http=127.0.0.1:{http}"]
        self.argv += [f"--transfer=127.0.0.1:{transfer}", f"--data-dir={tmp / 'data'}"]
        self.argv += ["--round-interval=0.02", "--seed=1"]
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        err = self.tmp / f"editor-{self.starts}.err"
        with open(err, "wb") as f:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=f)
        deadline = time.monotonic() + WAIT
        while not err.read_text().startswith("ready 1 "):
            assert self.proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        # The page's URL, with its token (the same at every start: kept in
        # the data directory).
        url = err.read_text().split()[2]
        assert self.url in ("", url), (self.url, url)
        self.url = url

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _until(what: str, check: Callable[[], bool], driver: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            status = driver.find_element(By.ID, "status").text
            raise AssertionError(f"not {what} within {WAIT} s (status: {status!r})")
        time.sleep(0.05)


def test_the_page_reconnects_to_its_restarted_replica(
    browser: Any,
    tmp_path: Path,
) -> None:
    editor = Editor(tmp_path)

    def js(script: str) -> Any:
        return browser.execute_script(script)

    def state() -> str:
        return str(js("return window.epto.state()"))

    def text() -> str:
        return str(js("return window.epto.text()"))

    def synced() -> bool:
        return bool(js("return window.epto.synced()"))

    def saved() -> bool:
        # Acknowledged, and in the group's order (what a crash cannot lose).
        return synced() and browser.find_element(By.ID, "status").text == "connected, saved"

    try:
        editor.start()
        browser.get(editor.url)
        area = browser.find_element(By.ID, "text")
        _until("connected", lambda: synced() and state() == "connected", browser)
        area.send_keys("hello")
        _until("saved", lambda: saved() and text() == "hello", browser)

        # The replica dies: the page says so and stays editable.
        editor.kill()
        _until("reconnecting", lambda: state() == "reconnecting", browser)
        assert js("return document.getElementById('text').readOnly") is False
        assert "reconnecting" in browser.find_element(By.ID, "status").text

        # Started again on its data directory: the page reconnects by itself
        # and shows the text the replica kept; it edits again.
        editor.start()
        _until("reconnected", lambda: synced() and state() == "connected", browser)
        assert text() == "hello"
        area.send_keys(Keys.END, " world")
        _until("saved again", lambda: saved() and text() == "hello world", browser)
        assert js("return window.epto.notSent()") is None

        # An edit sent that the replica never got (the page holds its
        # messages: they are on the way when the connection is lost) is
        # reported as not sent after the restart, with the page's copy: the
        # page cannot know whether the replica took it, and does not send it
        # twice.
        js("window.epto.hold()")
        area.send_keys(Keys.END, "!")
        editor.kill()
        editor.start()
        js("window.epto.release()")
        _until("reconnected", lambda: synced() and state() == "connected", browser)
        assert text() == "hello world"
        assert js("return window.epto.notSent()") == "hello world!"
        assert browser.find_element(By.ID, "notice").is_displayed()
    finally:
        editor.stop()
