"""The installed package as a user's program sees it.

The user's script sits next to a clone of this repository named ``epto`` (the
clone's root, which has no ``__init__.py``). ``import epto`` must still find the
installed package rather than that folder as a namespace package, ``epto.transports``
must be there, and ``mypy --strict`` on the script must see both packages' types
(mypy does not run import hooks). See docs/architecture.md, "Packaging".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """\
from __future__ import annotations

import epto
import epto.transports
from epto.transports import NodeConfig


def node_config(pid: int) -> NodeConfig:
    return epto.transports.NodeConfig(pid=epto.ProcessId(pid), members={})


config: epto.Config = epto.Config.for_group(10)
print(type(config).__name__, node_config(7).pid, epto.transports.__name__)
"""


def _installed_from_this_checkout() -> bool:
    try:
        text = metadata.distribution("epto").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    if text is None:
        return False
    url = urlsplit(str(json.loads(text).get("url", "")))
    return url.scheme == "file" and Path(unquote(url.path)).resolve() == REPO


pytestmark = pytest.mark.skipif(
    not _installed_from_this_checkout(),
    reason="the environment's epto is not installed from this checkout (./dev installs it)",
)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "epto").symlink_to(REPO, target_is_directory=True)
    (tmp_path / "script.py").write_text(SCRIPT)
    return tmp_path


def _user_env() -> dict[str, str]:
    """The environment of a user who runs ``python script.py`` in their folder."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONSAFEPATH", "MYPYPATH"):
        env.pop(name, None)
    return env


def test_a_script_next_to_a_clone_named_epto_imports_the_package(user_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "script.py"],
        cwd=user_dir,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Config", "7", "epto.transports"]


def test_mypy_strict_sees_epto_and_epto_transports(user_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", ".mypy_cache", "script.py"],
        cwd=user_dir,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout
