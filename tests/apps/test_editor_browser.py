"""Three people edit one text in three browser pages, each page served by its
own ``epto editor`` replica on loopback (both engines): typing, deleting,
replacing a selection, and three simultaneous edits at the same place (each
page holds its messages while the three are typed, then lets them go).
Every page ends with the same text, within bounded waits.

A real headless Chromium, driven by selenium through the system
chromedriver (``./dev`` installs ``chromium`` and ``chromium-driver`` with
apt-get when missing). Without them the test is skipped, unless
``EPTO_REQUIRE_BROWSER=1`` (``./dev test`` sets it): then it fails.
``EPTO_EDITOR_SCREENSHOT=PATH`` saves the three pages there
(docs/img/editor.png)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from epto.transports._ports import free_ports

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

if not (CHROMEDRIVER and CHROMIUM):
    if os.environ.get("EPTO_REQUIRE_BROWSER") == "1":
        raise RuntimeError("chromium and chromedriver are required (apt-get install chromium)")
    pytest.skip(
        "no chromium/chromedriver (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

WAIT = 30.0


def _start(mode: str, tmp: Path, n: int = 3) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    kind = socket.SOCK_STREAM if mode == "token-ring" else socket.SOCK_DGRAM
    nodes = free_ports(n, kind)
    transfers = free_ports(n, socket.SOCK_STREAM)
    presence = free_ports(n, socket.SOCK_DGRAM)
    names = ["Ada", "Brian", "Chloé"]
    procs, urls = [], []
    for i in range(n):
        pid = i + 1
        args = [
            sys.executable,
            "-m",
            "epto.cli",
            "editor",
            "--id",
            str(pid),
            "--mode",
            mode,
            "--bind",
            f"127.0.0.1:{nodes[i]}",
            "--transfer",
            f"127.0.0.1:{transfers[i]}",
            "--presence",
            f"127.0.0.1:{presence[i]}",
            "--name",
            names[i],
            "--round-interval",
            "0.02",
            "--seed",
            str(pid),
        ]
        for j in range(n):
            if j != i:
                args += ["--peer", f"{j + 1}=127.0.0.1:{nodes[j]}"]
                args += ["--peer-transfer", f"{j + 1}=127.0.0.1:{transfers[j]}"]
                args += ["--peer-presence", f"{j + 1}=127.0.0.1:{presence[j]}"]
        log = open(tmp / f"editor-{pid}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(args, stderr=subprocess.PIPE, stdout=log))
        log.close()
    for proc in procs:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        assert line.startswith("ready "), line
        urls.append(line.split()[2])
    return procs, urls


def chrome() -> Any:
    """A headless Chromium driven through the system chromedriver."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1500,560",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_script_timeout(10)
    return driver


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


class Pages:
    """Iframes in one window, one per replica."""

    def __init__(self, driver: Any, urls: list[str], tmp: Path) -> None:
        self.driver = driver
        self.n = len(urls)
        frames = "".join(
            f'<iframe src="{u}" style="width:490px;height:520px;border:1px solid #ccc"></iframe>'
            for u in urls
        )
        page = tmp / "three.html"
        page.write_text(f"<!doctype html><body style='margin:4px'>{frames}</body>")
        driver.get(page.as_uri())

    def run(self, i: int, action: Callable[[Any], Any]) -> Any:
        self.driver.switch_to.default_content()
        self.driver.switch_to.frame(self.driver.find_elements(By.TAG_NAME, "iframe")[i])
        try:
            return action(self.driver)
        finally:
            self.driver.switch_to.default_content()

    def js(self, i: int, script: str) -> Any:
        return self.run(i, lambda d: d.execute_script(script))

    def type(self, i: int, *keys: str) -> None:
        self.run(i, lambda d: d.find_element(By.ID, "text").send_keys(*keys))

    def texts(self) -> list[str]:
        return [self.js(i, "return window.epto ? window.epto.text() : null") for i in range(self.n)]

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} within {WAIT} s: {self.texts()}")
            time.sleep(0.05)

    def converged(self) -> str:
        def same() -> bool:
            synced = all(self.js(i, "return window.epto.synced()") for i in range(self.n))
            return synced and len(set(self.texts())) == 1

        self.wait("converged", same)
        return str(self.texts()[0])

    def connected(self) -> None:
        self.wait(
            "connected",
            lambda: all(
                self.js(i, "return !!window.epto && window.epto.synced()") for i in range(self.n)
            ),
        )


@pytest.mark.parametrize("mode", ["token-ring", "epto"])
def test_three_people_edit_one_text(mode: str, browser: Any, tmp_path: Path) -> None:
    procs, urls = _start(mode, tmp_path)
    try:
        pages = Pages(browser, urls, tmp_path)
        pages.wait(
            "connected",
            lambda: all(
                pages.js(i, "return !!window.epto && window.epto.synced()") for i in (0, 1, 2)
            ),
        )
        pages.type(0, "Hello world")
        assert pages.converged() == "Hello world"
        # Typing at the end, deleting, and replacing a selection, one after the other.
        pages.type(1, Keys.END, " and everyone")
        pages.converged()
        pages.type(2, Keys.END, Keys.BACK_SPACE * 8, "all")
        assert pages.converged() == "Hello world and all"
        pages.type(0, Keys.HOME, Keys.SHIFT + Keys.ARROW_RIGHT * 5 + Keys.NULL, "Howdy")
        assert pages.converged() == "Howdy world and all"
        # Three simultaneous edits at the same place, and a deletion across it.
        for i in range(3):
            pages.js(i, "window.epto.hold()")
        for i, word in enumerate(("A", "B", "C")):
            pages.type(i, Keys.HOME, Keys.ARROW_RIGHT * 6, word)
        pages.type(1, Keys.END, Keys.BACK_SPACE * 4)
        for i in range(3):
            pages.js(i, "window.epto.release()")
        text = pages.converged()
        assert sorted(text[6:9]) == ["A", "B", "C"], text
        assert text == f"Howdy {text[6:9]}world and", text
        # Everyone types at once, without holding.
        for _ in range(3):
            for i in range(3):
                pages.type(i, Keys.END, str(i))
        text = pages.converged()
        assert sorted(text[len("Howdy ABCworld and") :]) == sorted("012" * 3), text
        # The others' cursors are shown (presence datagrams).
        pages.type(1, Keys.HOME)
        pages.wait(
            "showing cursors",
            lambda: all(len(pages.js(i, "return window.epto.cursors()")) == 2 for i in range(3)),
        )
        shot = os.environ.get("EPTO_EDITOR_SCREENSHOT")
        if shot and mode == "token-ring":
            time.sleep(0.5)
            browser.save_screenshot(shot)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)
            assert proc.stderr is not None
            proc.stderr.close()


def test_the_pages_transformation_is_the_replicas(browser: Any) -> None:
    # The page's script ports epto.apps._ot.transform to JavaScript: on random
    # pairs of operations it must give what Python gives.
    import json
    import random
    from importlib import resources

    from epto.apps._editor import decode, encode
    from epto.apps._ot import Delete, Insert, transform

    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    rng = random.Random(3)

    def op() -> tuple[Insert | Delete, ...]:
        return tuple(
            Insert(rng.randint(0, 12), rng.choice(["a", "bc", "é😀"]))
            if rng.random() < 0.5
            else Delete(rng.randint(0, 12), rng.randint(0, 5))
            for _ in range(rng.randint(1, 3))
        )

    cases = [(op(), op(), rng.random() < 0.5) for _ in range(300)]
    got = browser.execute_script(
        "return JSON.parse(arguments[0]).map(([a, b, f]) => transform(a, b, f));",
        json.dumps([[encode(a), encode(b), f] for a, b, f in cases]),
    )
    for (a, b, first), (a2, b2) in zip(cases, got, strict=True):
        assert (decode(a2), decode(b2)) == transform(a, b, first), (a, b, first)


def test_a_page_without_its_text_keeps_what_is_typed(browser: Any) -> None:
    # Served from a file, the page never reaches a server: it stays
    # editable, keeps what is typed (to send once it has the text) and says
    # so; nothing is sent.
    from importlib import resources

    page = resources.files("epto.apps").joinpath("editor_static", "index.html")
    with resources.as_file(page) as path:
        browser.get(path.as_uri())
    text = browser.find_element(By.ID, "text")
    text.send_keys("kept")
    assert text.get_attribute("value") == "kept"
    assert browser.execute_script("return document.getElementById('text').readOnly") is False
    assert browser.execute_script("return window.epto.synced()") is False
    assert browser.execute_script("return window.epto.kept()") == 4
    line = browser.find_element(By.ID, "line").text
    assert line == "offline: 4 edits kept, sent when the replica is back", line
    assert browser.find_element(By.ID, "status").text == "connecting"
