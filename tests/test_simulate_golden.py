"""The simulator's summaries do not drift: every configuration of
``scripts/simulate_golden.py`` gives, byte for byte, the JSON summary the
repository holds (written by the code before the endpoint refactoring)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "simulate_golden.py"
_spec = importlib.util.spec_from_file_location("simulate_golden", _SCRIPT)
assert _spec is not None and _spec.loader is not None
golden = importlib.util.module_from_spec(_spec)
sys.modules["simulate_golden"] = golden
_spec.loader.exec_module(golden)


@pytest.mark.parametrize("name", sorted(golden.CONFIGURATIONS))
def test_summary_is_byte_identical_to_the_golden_one(name: str) -> None:
    expected = (golden.GOLDEN / f"{name}.json").read_text()
    assert golden.summary(name) == expected
