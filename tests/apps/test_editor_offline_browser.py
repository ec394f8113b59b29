"""Typing while the replica is down, in headless Chromium: three pages, each
served by its own ``epto editor --data-dir`` replica (EpTO, loopback). One
replica is SIGKILLed; its page stays editable and keeps what is typed in it
(saying so), while the two other pages type too; the replica is started
again with the same id, ports and data directory; its page reconnects by
itself, rebases what it kept onto the group's text and sends it. Every page
ends with the same text, holding every word typed, and nothing is reported
as not sent. Skipped without chromium (see test_editor_browser.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from epto.transports._ports import free_ports

from .test_editor_browser import Keys, Pages
from .test_editor_browser import browser as browser
from .test_editor_restart import PIDS, Replica, _argv

WAIT = 30.0


def _started(replica: Replica) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        for line in replica.log.read_text(errors="replace").splitlines():
            if line.startswith(f"ready {replica.pid} "):
                replica.url = line.split()[2]
                return
        assert replica.proc is not None
        assert replica.proc.poll() is None, replica.stderr()
        assert time.monotonic() < deadline, replica.stderr()
        time.sleep(0.05)


def test_typing_while_the_replica_is_down_is_sent_when_it_is_back(
    browser: Any, tmp_path: Path
) -> None:
    tcp = free_ports(6, socket.SOCK_STREAM)
    ports = {
        "node": free_ports(3, socket.SOCK_DGRAM),
        "http": tcp[:3],
        "transfer": tcp[3:],
        "presence": free_ports(3, socket.SOCK_DGRAM),
    }
    replicas = [Replica(pid, _argv("epto", pid, ports, tmp_path), tmp_path) for pid in PIDS]
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            _started(replica)
        pages = Pages(browser, [r.url for r in replicas], tmp_path)
        pages.connected()
        # One after the other: a word typed at the end while another page's
        # word is half way there would land inside it (each keystroke is an
        # insert at the caret, and the others' keystrokes arrive meanwhile).
        pages.type(0, "<a0>")
        pages.converged()
        pages.type(1, Keys.END, "<b0>")
        pages.converged()
        pages.type(2, Keys.END, "<c0>")
        pages.wait(
            "saved",
            lambda: all(
                pages.js(i, "return document.getElementById('status').textContent")
                == "connected, saved"
                for i in range(3)
            ),
        )
        before = pages.converged()

        # The third replica dies; its page stays editable and keeps what is
        # typed, at the start and at the end, while the others type too.
        replicas[2].kill()
        pages.wait("reconnecting", lambda: pages.js(2, "return window.epto.state()") != "connected")
        pages.type(2, Keys.HOME, "<c1>")
        pages.type(2, Keys.END, "<c2>")
        pages.type(0, Keys.END, "<a1>")
        pages.type(1, Keys.HOME, "<b1>")
        assert pages.js(2, "return document.getElementById('text').readOnly") is False
        line = pages.run(2, lambda d: d.find_element("id", "line").text)
        assert line.startswith("offline: ") and line.endswith(
            " kept, sent when the replica is back"
        ), line
        assert pages.js(2, "return window.epto.text()") == "<c1>" + before + "<c2>"

        # Started again as itself: the page reconnects, sends what it kept.
        replicas[2].start()
        _started(replicas[2])
        pages.converged()  # what page 3 kept, in place, before anyone types at its end
        pages.type(0, Keys.END, "<a2>")
        text = pages.converged()
    finally:
        for replica in replicas:
            replica.stop()
    for word in ("<a0>", "<b0>", "<c0>", "<c1>", "<c2>", "<a1>", "<b1>", "<a2>"):
        assert text.count(word) == 1, (word, text)
    assert len(text) == 8 * 4, text
    # Kept where it was typed: at the start and right after the text it had.
    assert text.startswith("<b1><c1>") or text.startswith("<c1><b1>"), text
    assert "<c0><c2>" in text or "<c0><a1>" in text, text
    for i in range(3):
        assert pages.js(i, "return window.epto.notSent()") is None
        assert pages.js(i, "return window.epto.kept()") == 0
