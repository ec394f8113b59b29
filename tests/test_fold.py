"""The merge's fold, in both builds: the compiled one (``epto.epidemic._cfold``, when
it was built) gives what the Python one gives, on the simulator's goldens
and on random groups of layers; with ``EPTO_PURE_PYTHON=1`` the Python one
is used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epto
import epto.epidemic._fold
from epto import Event
from epto.epidemic._ball import merge_balls
from epto.epidemic._fold import fold_groups_compiled, fold_groups_python
from epto.wire import LayeredBall

BUILDS = [pytest.param(fold_groups_python, id="python")]
if fold_groups_compiled is not None:
    BUILDS.append(pytest.param(fold_groups_compiled, id="compiled"))

EVENTS = [Event(source=s, seq=q, ts=10 * s + q, payload=b"") for s in range(8) for q in range(8)]


def _groups(shape: list[list[list[int]]]) -> list[list[dict[tuple[int, int], Event] | None]]:
    return [
        [None if not ids else {EVENTS[i].id: EVENTS[i] for i in ids} for ids in group]
        for group in shape
    ]


layers = st.lists(st.integers(0, len(EVENTS) - 1), max_size=12)
shapes = st.lists(st.lists(layers, max_size=5), min_size=1, max_size=8)


@given(shapes)
@settings(max_examples=300, deadline=None)
def test_the_builds_agree(shape: list[list[list[int]]]) -> None:
    groups = _groups(shape)
    expected = fold_groups_python(groups)
    for build in (fold_groups_compiled,) if fold_groups_compiled else ():
        got = build(groups)
        assert [None if not g else list(g.items()) for g in got] == [
            None if not e else list(e.items()) for e in expected
        ]


@pytest.mark.parametrize("fold", BUILDS)
def test_an_id_is_kept_in_the_first_group_that_has_it(fold: object) -> None:
    a, b, c = EVENTS[:3]
    groups = [[{a.id: a}, None], [{a.id: a, b.id: b}], [], [{c.id: c}, {b.id: b}]]
    assert fold(groups) == [{a.id: a}, {b.id: b}, None, {c.id: c}]  # type: ignore[operator]
    assert fold([[None]]) == [None]  # type: ignore[operator]


@pytest.mark.parametrize("fold", BUILDS)
def test_equal_ids_of_different_objects_are_one_id(fold: object) -> None:
    a = EVENTS[0]
    twin = (int("0"), int("0"))  # equal to a.id, another object
    assert twin == a.id and twin is not a.id
    merged = fold([[{a.id: a}], [{twin: a}]])  # type: ignore[operator]
    assert merged == [{a.id: a}, None]


@pytest.mark.parametrize("fold", BUILDS)
def test_many_ids_grow_the_table_and_other_mappings_are_read(fold: object) -> None:
    from types import MappingProxyType

    events = [Event(source=1, seq=q, ts=q, payload=b"") for q in range(20_000)]
    first = {e.id: e for e in events[:50]}
    rest = MappingProxyType({e.id: e for e in events})
    merged = fold([[first], [rest]])  # type: ignore[operator]
    assert merged[0] == first and list(merged[1]) == [e.id for e in events[50:]]


@pytest.mark.parametrize("fold", BUILDS)
def test_conflicting_copies_keep_one_of_their_events(fold: object) -> None:
    a = EVENTS[0]
    forged = Event(source=a.source, seq=a.seq, ts=a.ts + 1, payload=b"forged")
    merged = fold([[{a.id: a}, {a.id: forged}]])  # type: ignore[operator]
    assert merged[0] is not None and merged[0][a.id] in (a, forged)


@pytest.mark.parametrize("fold", BUILDS)
def test_merge_balls_is_the_same_with_either_build(
    fold: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(epto.epidemic._fold, "fold_groups", fold)
    balls = [LayeredBall({e.id: (e, (i + e.seq) % 5) for e in EVENTS[i::3]}) for i in range(6)]
    merged = merge_balls(balls, 4, 1)
    expected: dict[tuple[int, int], tuple[Event, int]] = {}
    for ball in balls:
        for eid, (event, ttl) in ball.items():
            if ttl < 4 and ttl + 1 > expected.get(eid, (event, -1))[1]:
                expected[eid] = (event, ttl + 1)
    assert dict(merged.items()) == expected


@pytest.mark.skipif(fold_groups_compiled is None, reason="the compiled fold is not built here")
@pytest.mark.parametrize("name", ["epto-global", "epto-loss-tagged-paper", "cyclon-churn"])
def test_the_python_build_gives_the_goldens_too(name: str) -> None:
    # The golden test runs the build in use (the compiled one here); these
    # run the Python one on the EpTO configurations (the command line reads
    # EPTO_PURE_PYTHON).
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "simulate_golden.py")
    code = (
        "import importlib.util, sys, pathlib;"
        f"spec = importlib.util.spec_from_file_location('g', {script!r});"
        "g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g);"
        f"sys.exit(g.summary({name!r}) != (g.GOLDEN / '{name}.json').read_text())"
    )
    env = {**os.environ, "EPTO_PURE_PYTHON": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0


def test_select_switches_the_build_in_use() -> None:
    before = epto.epidemic._fold.fold_groups
    try:
        epto.epidemic._fold.select("python")
        assert (
            epto.epidemic._fold.fold_groups is fold_groups_python
            and not epto.epidemic._fold.compiled()
        )
        if fold_groups_compiled is None:
            with pytest.raises(epto.LocalProtocolError):
                epto.epidemic._fold.select("compiled")
        else:
            epto.epidemic._fold.select("compiled")
            assert epto.epidemic._fold.compiled()
        with pytest.raises(epto.LocalProtocolError):
            epto.epidemic._fold.select("fortran")
    finally:
        epto.epidemic._fold.fold_groups = before
