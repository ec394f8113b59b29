"""Names a package loads on first use (PEP 562), written once.

A package keeps its map of names to defining modules (``_LAZY``, checked
against its ``TYPE_CHECKING`` imports by ``tests/test_lazy_names.py``) and
takes its module-level ``__getattr__`` and ``__dir__`` from
:func:`lazy_names`, so that importing it loads none of those modules.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_names(
    package: str, names: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps a name to
    the module that defines it (relative to ``package``), ``submodules``
    are submodules given as attributes. A name, once loaded, is kept in the
    package's namespace, so each is looked up once."""
    lazy_submodules = frozenset(submodules)

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is not None:
            value: object = getattr(importlib.import_module(module, package), name)
        elif name in lazy_submodules:
            value = importlib.import_module(f".{name}", package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
