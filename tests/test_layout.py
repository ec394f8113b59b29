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


def _foreign_private_reads(name: str, text: str) -> list[str]:
    """Where module ``name`` (source ``text``) reads a private attribute
    (``x._y``, not a dunder) that it does not own: neither ``self`` nor
    ``cls``, nor a module it imported, nor an attribute the module itself
    assigns (``self._y = ...``, a slot or a class attribute: its own
    class's, read on another instance or by a helper of the same module)."""
    tree = ast.parse(text)
    owned: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            owned.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owned.add(node.name)
        elif isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            owned.update(t.id for t in targets if isinstance(t, ast.Name))
            if isinstance(node.value, ast.Tuple | ast.List):  # __slots__
                for item in node.value.elts:
                    if isinstance(item, ast.Constant) and isinstance(item.value, str):
                        owned.add(item.value)
        elif isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            # `from . import _x` and `from epto import _x`: modules (or
            # names) of the package, whose own privates it may read.
            modules.update(a.asname or a.name for a in node.names)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        attr = node.attr
        if (attr.startswith("__") and attr.endswith("__")) or attr in owned:
            continue
        base = node.value
        if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in modules):
            continue
        found.append(f"{name}:{node.lineno}: .{attr}")
    return found


def test_no_module_reads_another_modules_private_attributes() -> None:
    found = []
    for name, path in import_graph.modules().items():
        found += _foreign_private_reads(name, path.read_text())
    assert found == []


def test_the_private_read_check_can_fail() -> None:
    text = "import os\nclass A:\n    __slots__ = ('_a',)\n    def f(self, b, c):\n"
    text += "        return self._x, b._a, os._exit, c._parts, b.__class__\n"
    assert _foreign_private_reads("m", text) == ["m:5: ._parts"]
