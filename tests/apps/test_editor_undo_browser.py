"""Undo and redo across two authors in headless Chromium: two pages, each
served by its own ``epto editor`` replica (token ring, loopback), type in
turn; one of them undoes its last two steps (keeping the other's words typed
in between and after) and redoes one. Every page ends with the same text,
the expected one. Skipped without chromium (see test_editor_browser.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .test_editor_browser import Keys, Pages, _start
from .test_editor_browser import browser as browser

UNDO = Keys.CONTROL + "z" + Keys.NULL
REDO = Keys.CONTROL + Keys.SHIFT + "z" + Keys.NULL
REDO_Y = Keys.CONTROL + "y" + Keys.NULL


def test_undo_and_redo_across_two_authors(browser: Any, tmp_path: Path) -> None:
    procs, urls = _start("token-ring", tmp_path, n=2)
    try:
        pages = Pages(browser, urls, tmp_path)
        pages.connected()
        ada, brian = 0, 1
        pages.type(ada, "alpha")
        pages.converged()
        pages.type(brian, Keys.END, " beta")
        pages.converged()
        # Each of Ada's steps starts where her caret was not: a step of its own.
        pages.type(ada, Keys.HOME, "1 ")
        pages.converged()
        pages.type(brian, Keys.END, " gamma")
        pages.converged()
        pages.type(ada, Keys.END, " 2")
        assert pages.converged() == "1 alpha beta gamma 2"
        # Ada undoes " 2"; Brian types; Ada undoes "1 ": Brian's words stay.
        pages.type(ada, UNDO)
        assert pages.converged() == "1 alpha beta gamma"
        pages.type(brian, Keys.END, "!")
        pages.converged()
        pages.type(ada, UNDO)
        assert pages.converged() == "alpha beta gamma!"
        # One redo puts "1 " back (Ctrl+Shift+Z); the next one would be " 2".
        pages.type(ada, REDO)
        assert pages.converged() == "1 alpha beta gamma!"
        assert pages.js(ada, "return window.epto.steps()") == [2, 1]
        # Brian's own undo takes back his last word only; Ctrl+Y redoes it.
        pages.type(brian, UNDO)
        assert pages.converged() == "1 alpha beta gamma"
        pages.type(brian, REDO_Y)
        assert pages.converged() == "1 alpha beta gamma!"
        assert [pages.js(i, "return window.epto.notSent()") for i in (ada, brian)] == [None, None]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)
            assert proc.stderr is not None
            proc.stderr.close()
