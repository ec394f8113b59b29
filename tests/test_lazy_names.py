"""The packages that load names on first use (PEP 562) state each name twice:
once in ``_LAZY`` (what runs) and once under ``if TYPE_CHECKING`` (what mypy
and readers see). These tests keep the two in step, and check that every lazy
name resolves to the object its module defines."""

from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType

import pytest

LAZY_PACKAGES = ["epto", "epto.wire", "epto.transports"]


def _type_checking_imports(package: ModuleType) -> dict[str, str]:
    """The names imported under ``if TYPE_CHECKING`` in ``package``, each
    mapped to its module written as ``_LAZY`` writes it (``..epidemic._ball``)."""
    tree = ast.parse(inspect.getsource(package))
    names: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.If) or "TYPE_CHECKING" not in ast.unparse(node.test):
            continue
        for statement in node.body:
            assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
            module = "." * statement.level + (statement.module or "")
            for alias in statement.names:
                # The re-export form ``import X as X``: anything else would
                # bind a name ``_LAZY`` cannot know.
                assert alias.asname == alias.name, ast.unparse(statement)
                names[alias.name] = module
    return names


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_the_lazy_map_and_the_type_checking_imports_agree(name: str) -> None:
    package = importlib.import_module(name)
    lazy: dict[str, str] = package._LAZY
    assert _type_checking_imports(package) == lazy


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_every_lazy_name_is_the_object_its_module_defines(name: str) -> None:
    package = importlib.import_module(name)
    lazy: dict[str, str] = package._LAZY
    for attribute, module in lazy.items():
        defining = importlib.import_module(module, name)
        assert getattr(package, attribute) is getattr(defining, attribute), attribute
        assert attribute in dir(package)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import epto.wire

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        epto.wire.Nope  # noqa: B018
