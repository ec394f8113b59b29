"""The core stays sans-IO: it imports no I/O, clock or concurrency module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FORBIDDEN = {"trio", "zmq", "socket", "threading", "time", "asyncio", "selectors", "os"}
CORE = Path(__file__).resolve().parent.parent / "epto"
# Integrations that live in epto/ but are not protocol state machines.
# ("store": epto/rsm/_store.py, the snapshot files of the state-machine layer.)
NOT_CORE = {"benchmarks", "cli", "keys", "log", "spark", "store"}


def core_modules() -> list[Path]:
    out = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE)
        if rel.parts[0] in NOT_CORE or rel.stem.lstrip("_") in NOT_CORE:
            continue
        out.append(path)
    return out


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_there_is_a_core_to_check() -> None:
    assert len(core_modules()) >= 5
