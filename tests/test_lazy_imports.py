"""``import epto`` loads the core engines only: the token ring, the sealing
and the signing code load when a name from them is first used (PEP 562), and
every ``epto.X`` name still works. Checked in a fresh interpreter through
``sys.modules``, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LAZY = {
    "GroupKey": "epto.wire._seal",
    "EventSigner": "epto.wire._signing",
    "SignatureVerifier": "epto.wire._signing",
    "VerifierStatistics": "epto.wire._signing",
    "TokenRingConfig": "epto.tokenring",
}


def _modules_after(code: str) -> list[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import json, sys\n{code}\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('epto'))))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_import_epto_does_not_load_the_heavy_parts() -> None:
    loaded = _modules_after("import epto")
    assert "epto" in loaded and "epto.epidemic._node" in loaded
    for module in sorted(set(LAZY.values())):
        assert module not in loaded
    assert not [m for m in loaded if m.startswith("epto.tokenring")]


def test_the_command_line_parser_does_not_load_the_token_ring() -> None:
    loaded = _modules_after("from epto.cli import build_parser\nbuild_parser()")
    assert not [m for m in loaded if m.startswith("epto.tokenring")]


@pytest.mark.parametrize("name", sorted(LAZY))
def test_a_lazy_name_loads_its_module_on_first_use(name: str) -> None:
    loaded = _modules_after(
        f"import epto, importlib\n"
        f"assert epto.{name} is getattr(importlib.import_module({LAZY[name]!r}), {name!r})"
    )
    assert LAZY[name] in loaded


def test_from_import_and_the_submodule_attribute_still_work() -> None:
    _modules_after(
        "import epto\n"
        "from epto import TokenRingConfig, GroupKey\n"
        "assert epto.tokenring.TokenRingConfig is TokenRingConfig\n"
        "assert 'TokenRingConfig' in dir(epto) and 'GroupKey' in dir(epto)"
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    import epto

    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        epto.NoSuchThing  # noqa: B018
