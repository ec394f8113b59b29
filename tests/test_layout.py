"""The layout keeps its promises (docs/architecture.md): no import circles
among the library's modules, and no module longer than about 400 lines
without a reason stated at its top (a ``Size:`` paragraph in its docstring)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_graph.py"
_spec = importlib.util.spec_from_file_location("import_graph", _SCRIPT)
assert _spec is not None and _spec.loader is not None
import_graph = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = import_graph
_spec.loader.exec_module(import_graph)

MAX_LINES = 420
"""About 400 lines: beyond, a module says why at its top."""


def test_the_library_has_no_import_circles() -> None:
    assert import_graph.cycles(import_graph.graph()) == []


def test_the_graph_sees_the_edges_it_must() -> None:
    # A check that cannot fail is no check: the graph knows the drivers
    # import the endpoints, and the endpoints the engines.
    edges = import_graph.graph()
    assert "epto.endpoint" in edges["epto.transports._loop"]
    assert "epto.tokenring" in edges["epto.endpoint._tokenring"]
    assert import_graph.cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_long_modules_say_why() -> None:
    unexplained = []
    for name, path in import_graph.modules().items():
        text = path.read_text()
        lines = text.count("\n")
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(paragraph.startswith("Size:") for paragraph in doc.split("\n\n")):
            unexplained.append(f"{name} ({lines} lines)")
    assert unexplained == []


def test_every_package_is_listed_for_the_install() -> None:
    # pyproject.toml lists the packages one by one (transports/ is mapped to
    # epto.transports); a sub-package missing there is missing from the
    # install, and only a fresh install would show it.
    import tomllib

    root = _SCRIPT.parent.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        name
        for name, path in import_graph.modules().items()
        if path.name == "__init__.py" and not name.endswith(".data")
    }
    assert found == listed
