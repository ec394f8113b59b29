"""Every page of docs/ is reachable from docs/index.md."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_page_is_linked_from_the_index() -> None:
    index = (DOCS / "index.md").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md")
    assert pages, "no pages found"
    assert [p for p in pages if f"({p})" not in index] == []
