"""The layout keeps its promises (docs/architecture.md): no import circles
among the library's modules, no module of the core that reaches the drivers
(``epto.transports``) or the services (``epto.services``), visibly or through
a string, no driver that reaches the services, and no module longer than
about 400 lines without a reason stated at its top (a ``Size:`` paragraph in
its docstring)."""

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


INTEGRATIONS = ("epto.benchmarks", "epto.cli", "epto.spark")
"""Packages of epto/ that run the drivers (the command line, the benchmarks,
Spark's tasks and gateway) and so may import ``epto.transports``; every other
module of epto/ is the core, which the drivers import and never the reverse."""

_IMPORTERS = {"import_module", "__import__", "find_spec", "import_from_path"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (module, class, function): prose may name
    the drivers; code may not."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _mentions_the_drivers(
    name: str, text: str, *, package: bool = False, room: str = "transports"
) -> list[str]:
    """Where module ``name`` (source ``text``) reaches ``epto.<room>`` (the
    drivers by default): an import (absolute or relative), the attribute
    ``epto.<room>``, a string naming it (outside docstrings), or a string with
    ``<room>`` in it passed to an import function
    (``importlib.import_module("..transports")``). ``package``: the module is
    a package's ``__init__``."""
    target = f"epto.{room}"
    tree = ast.parse(text)
    here = name if package else name.rpartition(".")[0]
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "epto":
                targets = [f"epto.{node.attr}"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and target in node.value:
                found.append(f"{name}:{node.lineno}: string {node.value!r}")
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in _IMPORTERS:
                for arg in ast.walk(node):
                    if isinstance(arg, ast.Constant) and room in str(arg.value):
                        found.append(f"{name}:{node.lineno}: {called}({arg.value!r})")
        hits = [t for t in targets if t == target or t.startswith(f"{target}.")]
        if hits:
            found.append(f"{name}:{node.lineno}: {hits[0]}")
    return found


def test_the_core_does_not_reach_the_drivers() -> None:
    found = []
    for name, path in import_graph.modules().items():
        if name.startswith(("epto.transports", "epto.services", *INTEGRATIONS)):
            continue
        found += _mentions_the_drivers(name, path.read_text(), package=path.name == "__init__.py")
    assert found == []


def test_only_the_integrations_reach_the_services() -> None:
    # The services (state-machine servers, the editor) run on the drivers:
    # neither the core nor the drivers import them.
    found = []
    for name, path in import_graph.modules().items():
        if name.startswith(("epto.services", *INTEGRATIONS)):
            continue
        package = path.name == "__init__.py"
        found += _mentions_the_drivers(name, path.read_text(), package=package, room="services")
    assert found == []


def test_the_driver_check_can_fail() -> None:
    cases = {
        "from epto.transports.simulation import Cluster": "epto.transports.simulation",
        "from ..transports import trio_node": "epto.transports",
        "from .. import transports": "epto.transports",
        "import epto.transports": "epto.transports",
        "import epto\nepto.transports": "epto.transports",
        "x = 'epto.transports.simulation'": "string",
        "import importlib\nimportlib.import_module('..transports', 'epto.x')": "import_module",
        "__import__('epto.' + 'transports')": "__import__",
    }
    for text, expected in cases.items():
        found = _mentions_the_drivers("epto.tokenring.simulation", text)
        assert len(found) >= 1 and expected in found[0], (text, found)
    old_forwarder = "def __getattr__(name):\n    from epto.transports.simulation import X\n"
    assert _mentions_the_drivers("epto.tokenring.simulation", old_forwarder) != []
    assert _mentions_the_drivers("epto.tokenring", "from ..transports import x", package=True)
    prose = '"""Runs in :mod:`epto.transports.simulation`."""\nimport epto.tokenring\n'
    assert _mentions_the_drivers("epto.tokenring.simulation", prose) == []
    up = "from epto.services.trio_rsm import ReplicatedNode"
    assert _mentions_the_drivers("epto.transports.memory", up, room="services") != []
    assert _mentions_the_drivers("epto.transports.memory", up) == []


_SIMULATION = Path(__file__).resolve().parent.parent / "transports" / "simulation"
_ENGINE_PACKAGES = ("epto.epidemic", "epto.tokenring", "epto.atoms", "epto.endpoint")
_ENGINE_CLASSES = {"Process", "Node", "TokenRingProcess", "AtomsProcess"}
_ENGINE_BUILDERS = {"_engines", "_atoms_engine"}
"""The simulator's per-engine modules: the only ones that make an engine,
each time behind the endpoints' adapter (``epto.endpoint._engines``)."""


def _seam_breaches(name: str, tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module.startswith(_ENGINE_PACKAGES) and "._" in module:
                found.append(f"{name}:{node.lineno} imports the private {module}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ENGINE_CLASSES
            and name not in _ENGINE_BUILDERS
        ):
            found.append(f"{name}:{node.lineno} makes a {node.func.id} outside the engine modules")
    return found


def test_the_simulator_keeps_the_endpoint_seam() -> None:
    # The simulator drives the endpoints' engine adapters: it reads no
    # engine's or endpoint's private module, and only its per-engine modules
    # make engines (which they hand to an adapter; the adapters' types are
    # checked in tests/test_simulation_endpoint_seam.py).
    breaches = []
    for path in sorted(_SIMULATION.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        breaches += _seam_breaches(path.stem, tree)
    assert breaches == []


def test_the_seam_check_can_fail() -> None:
    tree = ast.parse("from epto.tokenring._process import TokenRingProcess\nTokenRingProcess(1)\n")
    assert len(_seam_breaches("_simulation", tree)) == 2
    assert len(_seam_breaches("_engines", tree)) == 1
