"""The ``epto`` source's options are parsed twice: in Python
(``epto/spark/_options.py``, every read of ``format("epto")``) and in Java
(``epto/spark/jvm/Options.java``, batch reads of ``format("epto-jvm")``). The
Python table is the source of truth; this test reads both files and fails when
the Java side drifts from it: the option names, the streaming-only names, the
default of every option both sides default, and the partition size.

The Java file is read as text (no JVM needed): its table is the ``NAMES`` and
``STREAMING_ONLY`` arrays and its defaults are ``opts.getOrDefault(key,
default)`` calls; the Python defaults are the ``opts.get(key, default)`` calls
of ``_options.py`` (for a default that depends on the kind of read, the batch
one: the JVM reader reads batches only)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from epto.spark import _options

SPARK = Path(_options.__file__).resolve().parent
JAVA = SPARK / "jvm" / "Options.java"

NETWORK_ONLY = frozenset(n for n in _options.OPTIONS.values() if n.startswith("epto."))
"""Options of the Python source's network reads (``epto.servers`` and its
credentials): the JVM reader reads log files only."""
JVM_DEFAULTS_DIFFER = {"rows": ("events", "per-node")}
"""Python default, JVM default: the JVM reader reads each node's copy only
(``rows=events`` is refused there with a pointer to ``format("epto")``)."""


def _java_array(text: str, name: str) -> list[str]:
    match = re.search(rf"static final String\[\] {name} = \{{(.*?)\}};", text, re.S)
    assert match is not None, f"{JAVA.name} has no {name} table"
    return re.findall(r'"([^"]*)"', match.group(1))


def _java_long(text: str, name: str) -> int:
    match = re.search(rf"static final long {name} = (-?[0-9_]+);", text)
    assert match is not None, f"{JAVA.name} has no {name}"
    return int(match.group(1).replace("_", ""))


def _java_defaults(text: str) -> dict[str, str]:
    return dict(re.findall(r'opts\.getOrDefault\(\s*"(\w+)",\s*"([^"]*)"\)', text))


def _python_defaults(source: str) -> dict[str, str]:
    """``opts.get("key", default)`` calls: key -> default (a batch read's)."""
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "opts"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
        ):
            continue
        default = node.args[1]
        if isinstance(default, ast.IfExp):  # `"latest" if streaming else "earliest"`
            default = default.orelse
        assert isinstance(default, ast.Constant), ast.dump(node)
        out[node.args[0].value] = default.value
    return out


def test_the_java_reader_knows_the_python_options() -> None:
    text = JAVA.read_text()
    python = [n for n in _options.OPTIONS.values() if n not in NETWORK_ONLY]
    assert _java_array(text, "NAMES") == python
    assert _java_array(text, "STREAMING_ONLY") == list(_options.STREAMING_ONLY)
    assert (
        _java_long(text, "DEFAULT_MAX_RECORDS_PER_PARTITION")
        == _options.DEFAULT_MAX_RECORDS_PER_PARTITION
    )
    assert _java_long(text, "EARLIEST") == _options.EARLIEST
    assert _java_long(text, "LATEST") == _options.LATEST


def test_the_java_reader_has_the_python_defaults() -> None:
    java = _java_defaults(JAVA.read_text())
    python = _python_defaults((SPARK / "_options.py").read_text())
    assert set(java) <= set(python), "a default only the JVM reader has"
    assert {"startingoffsets", "endingoffsets", "failondataloss", "rows"} <= set(java)
    for key, value in java.items():
        expected = JVM_DEFAULTS_DIFFER.get(key, (python[key], python[key]))
        assert (python[key], value) == expected, key


def test_the_table_readers_can_fail() -> None:
    text = 'static final String[] NAMES = {\n "path", "rows"};\nopts.getOrDefault("rows", "x")'
    assert _java_array(text, "NAMES") == ["path", "rows"]
    assert _java_defaults(text) == {"rows": "x"}
    source = 'opts.get("a", "b")\nopts.get("c", "d" if streaming else "e")\nopts.get("f")'
    assert _python_defaults(source) == {"a": "b", "c": "e"}
