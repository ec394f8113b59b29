"""Every measured figure in README.md comes with the command that measures
it and the page that gives its conditions (the token ring's ratio to Raft
holds saturated, not paced)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

MEASURE = re.compile(r"\d[\d,.]*\s*(?:ms|s|MB|GB|times|/s)\b")
COMMAND = re.compile(r"`(?:epto (?:bench|simulate)|\./dev)[^`]*`")
PAGE = re.compile(r"\]\((?:docs/)?[\w-]+\.md(?:#[\w-]+)?\)")


def _paragraphs() -> list[str]:
    """Paragraphs and list items of README.md outside code blocks."""
    text = re.sub(r"```.*?```", "", README.read_text(), flags=re.S)
    return [p for p in re.split(r"\n\s*\n|\n(?=- )", text) if p.strip()]


def test_every_measured_figure_has_its_command_and_page() -> None:
    measured = [p for p in _paragraphs() if MEASURE.search(p)]
    assert len(measured) >= 2  # the token ring against Raft, the 10,000 processes
    for paragraph in measured:
        assert COMMAND.search(paragraph), paragraph
        assert PAGE.search(paragraph), paragraph


def test_the_ratio_to_raft_states_when_it_holds() -> None:
    (paragraph,) = [p for p in _paragraphs() if "as many commands per second" in p]
    for condition in ("saturated", "paced", "load average", "loopback", "CPU"):
        assert condition in paragraph, condition
