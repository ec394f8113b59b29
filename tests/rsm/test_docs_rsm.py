"""docs/rsm.md holds what it shows: every python block marked
``<!-- test: run -->`` runs as a program and succeeds, and its table of
``ReplicaConfig`` fields names every field of the class, with its default.

A marked block is run as written, in a subprocess with a bounded timeout,
except for its loopback ports: each ``127.0.0.1:PORT`` is given a port the
kernel just handed out, so that the test does not depend on 9001-9003 being
free on the machine that runs it.
"""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from epto.services.trio_rsm import ReplicaConfig
from epto.transports._ports import free_ports

from epto.rsm import JsonCodec

PAGE = Path(__file__).resolve().parents[2] / "docs" / "rsm.md"
MARKER = "<!-- test: run -->"
RUN_BLOCK = re.compile(r"^" + re.escape(MARKER) + r"\n```python\n(.*?)\n```", re.S | re.M)
LOOPBACK = re.compile(r"127\.0\.0\.1:(\d+)")
TABLE_HEADING = "## `ReplicaConfig`: every field"
ROW = re.compile(r"^\| `(\w+)` \| (.*?) \| `([^`]*)` \| (.+) \|$")


def _marked_blocks() -> list[str]:
    text = PAGE.read_text()
    blocks = RUN_BLOCK.findall(text)
    markers = [line for line in text.splitlines() if line == MARKER]
    assert len(blocks) == len(markers), "a marker not followed by a python block"
    return blocks


def _with_free_ports(source: str) -> str:
    ports = sorted({int(p) for p in LOOPBACK.findall(source)} - {0})
    fresh = dict(zip(ports, free_ports(len(ports), socket.SOCK_STREAM), strict=True))
    return LOOPBACK.sub(lambda m: f"127.0.0.1:{fresh.get(int(m[1]), int(m[1]))}", source)


def test_the_page_marks_its_complete_sample() -> None:
    (sample,) = _marked_blocks()
    assert "from epto.transports import NodeConfig" in sample  # the README's import
    assert "trio.run(" in sample


@pytest.mark.parametrize("index", range(len(_marked_blocks())))
def test_a_marked_block_runs_as_written(index: int, tmp_path: Path) -> None:
    program = tmp_path / "sample.py"
    program.write_text(_with_free_ports(_marked_blocks()[index]))
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # The sample prints each replica's state: three replicas, one state.
    assert len(lines) == 3 and len(set(lines)) == 1, done.stdout
    assert lines[0] == "{'colour': 'green', 'size': 3}"


def _table() -> list[tuple[str, str, str]]:
    """(field, type, default) of each row of the page's ReplicaConfig table."""
    text = PAGE.read_text()
    assert text.count(TABLE_HEADING) == 1
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    parsed = []
    for line in rows:
        match = ROW.match(line)
        assert match, f"a row that is not 'field | type | default | what it does': {line}"
        assert match[4].strip(), f"{match[1]}: nothing says what it does"
        parsed.append((match[1], match[2], match[3]))
    return parsed


def test_the_table_names_every_field_of_replica_config() -> None:
    documented = [name for name, _, _ in _table()]
    assert len(documented) == len(set(documented)), documented
    fields = [f.name for f in attrs.fields(ReplicaConfig)]
    assert sorted(documented) == sorted(fields), (
        f"undocumented: {sorted(set(fields) - set(documented))}; "
        f"not a field: {sorted(set(documented) - set(fields))}"
    )


def _same(documented: Any, actual: Any) -> bool:
    if documented == actual:
        return True
    # An instance of a class without equality (a codec): the same class.
    cls = type(actual)
    return type(documented) is cls and "__eq__" not in vars(cls)


def test_the_table_gives_each_default() -> None:
    fields = {f.name: f for f in attrs.fields(ReplicaConfig)}
    names = {"JsonCodec": JsonCodec, "inf": math.inf}
    for name, _, default in _table():
        field = fields[name]
        if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            actual = field.default.factory()  # type: ignore[union-attr]
        else:
            actual = field.default
        documented = eval(default, {"__builtins__": {}}, names)  # the page's own text
        assert _same(documented, actual), f"{name}: the page says {default}, it is {actual!r}"


@pytest.mark.parametrize("mode", ["epto", "token-ring"])
def test_the_restart_example_ends_with_one_state(mode: str, tmp_path: Path) -> None:
    """examples/rsm_restart.py, which the page's *Restart a replica* names:
    replica 3 stopped, the group writing on, replica 3 started again on its
    directory, then one state and one digest at all three."""
    example = PAGE.parents[1] / "examples" / "rsm_restart.py"
    kind = socket.SOCK_STREAM if mode == "token-ring" else socket.SOCK_DGRAM
    ports = free_ports(3, kind)
    members = [f"--member={pid}=127.0.0.1:{port}" for pid, port in enumerate(ports, 1)]
    transfer_ports = free_ports(3, socket.SOCK_STREAM)
    if mode == "token-ring":  # both listen on TCP: the six ports must differ
        while set(transfer_ports) & set(ports):
            transfer_ports = free_ports(3, socket.SOCK_STREAM)
    transfers = [f"--transfer={pid}=127.0.0.1:{p}" for pid, p in enumerate(transfer_ports, 1)]
    done = subprocess.run(
        [sys.executable, str(example), *members, *transfers, f"--mode={mode}", "--timeout=40"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["stopped", "restarted", "agreed"], lines
    assert lines[0] == "stopped 3 after 5 commands"
    applied = json.loads(lines[2].split(" ", 1)[1].rsplit(" ", 1)[0])
    assert applied == [12, 12, 12]  # 5 before, 5 while down, 1 after, 1 from replica 3


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_within_the_page_names_one_of_its_headings() -> None:
    text = re.sub(r"```.*?```", "", PAGE.read_text(), flags=re.S)
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    links = set(re.findall(r"\]\(#([\w-]+)\)", text))
    assert {"restart-a-replica", "replicaconfig-every-field"} <= links
    assert sorted(links - anchors) == []
