"""The layout of ``epto.tokenring``: its modules import each other without a
circle (imports under ``TYPE_CHECKING`` included), so that each part of the
process can be read, and tested, from the parts below it."""

from __future__ import annotations

import ast
from pathlib import Path

import epto.tokenring

PACKAGE = Path(epto.tokenring.__file__).resolve().parent


def _imports(path: Path) -> set[str]:
    """The modules of the package that ``path`` imports, wherever in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module is None:  # from . import _x
                    out.update(alias.name for alias in node.names)
                else:  # from ._x import y
                    out.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.startswith("epto.tokenring."):
                out.add(node.module.split(".")[2])
            elif node.level == 0 and node.module == "epto.tokenring":
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("epto.tokenring."):
                    out.add(alias.name.split(".")[2])
    return out


def _graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path) & modules.keys() for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_import_parser_sees_every_form(tmp_path: Path) -> None:
    source = (
        "from . import _a\n"
        "from ._b import x\n"
        "from epto.tokenring._c import y\n"
        "import epto.tokenring._d\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ._e import z\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert _imports(path) == {"_a", "_b", "_c", "_d", "_e"}


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_imports_without_a_circle() -> None:
    graph = _graph()
    assert "_process" in graph and "_tokenpath" in graph
    assert _cycle(graph) is None


def test_no_module_imports_the_process() -> None:
    graph = _graph()
    assert [name for name, deps in graph.items() if "_process" in deps] == []
