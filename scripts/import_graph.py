"""The import graph of the library's modules (``epto``, ``epto.transports`` and
``epto.services``),
from the source with ``ast``: every import statement counts, at module level,
under ``TYPE_CHECKING`` or inside a function. Prints the cycles (strongly
connected components of more than one module) and exits 1 when there is one.

    python scripts/import_graph.py            # cycles, if any
    python scripts/import_graph.py --edges    # every edge
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "epto": ROOT / "epto",
    "epto.transports": ROOT / "transports",
    "epto.services": ROOT / "services",
}


def modules() -> dict[str, Path]:
    """Module name to file, with ``transports/`` named ``epto.transports`` and
    ``services/`` ``epto.services``."""
    found: dict[str, Path] = {}
    for prefix, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if prefix == "epto" and parts[:1] in (["transports"], ["services"]):
                continue  # a development symlink, not a module of its own
            found[".".join([prefix, *parts])] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _resolve(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield from _resolve(sub if sub in known else target, known)


def _resolve(target: str, known: set[str]) -> Iterator[str]:
    while target and target not in known:
        target = target.rpartition(".")[0]
    if target:
        yield target


def graph() -> dict[str, set[str]]:
    mods = modules()
    # Compiled modules (Cython sources) are modules too; they import no module
    # of the library.
    known = set(mods) | {
        ".".join([prefix, *path.relative_to(folder).with_suffix("").parts])
        for prefix, folder in PACKAGES.items()
        for path in folder.rglob("*.pyx")
    }
    return {
        name: {t for t in _imports(name, path, known) if t != name} for name, path in mods.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true")
    args = parser.parse_args()
    edges = graph()
    if args.edges:
        for name in sorted(edges):
            print(name, "->", ", ".join(sorted(edges[name])))
    found = cycles(edges)
    for component in found:
        print("cycle:", " <-> ".join(component))
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} edges, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
