"""``epto.spark.session()`` gives Python workers this interpreter and this ``epto``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import epto
from epto.spark import worker_settings

HOME = os.path.abspath(Path(epto.__file__).parent.parent)
"""Where ``epto`` is imported from, links not followed (an editable install
in strict mode links every file of a build tree to the checkout)."""


def test_workers_run_this_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_settings()["spark.pyspark.python"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python3")
    assert worker_settings()["spark.pyspark.python"] == "/opt/python3"


def test_an_epto_outside_site_packages_goes_first_on_the_workers_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", HOME]))
    settings = worker_settings()
    # This checkout (or editable install) is not in site-packages.
    assert settings["spark.executorEnv.PYTHONPATH"] == os.pathsep.join([HOME, "/elsewhere"])


def test_the_session_workers_import_this_epto(spark: Any) -> None:
    def where(_: object) -> str:
        import epto

        return str(epto.__file__)

    assert spark.sparkContext.parallelize([0], 1).map(where).collect() == [epto.__file__]
